"""Downstream CI callback endpoint (placeholder until the callback work lands)."""

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@require_POST
def callback(request):
    return JsonResponse({"detail": "not implemented"}, status=501)
