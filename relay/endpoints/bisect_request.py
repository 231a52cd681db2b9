"""POST /api/oot/<org>/<repo>/breaks/<id>/bisect/ — a maintainer asks for a bisection of a break on that backend
(``relay.breaks.bisect``). Served by the relay (it writes and dispatches), posted from the HUD's break page with the
session's CSRF token. The permission is the admin's "redispatch" one (``ootci.change_dispatch``): a bisection sends
dispatches. Refusals are JSON ``{"detail"}``: 403 (not signed in, or without the permission), 404, 409."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from ootci.breaks import BISECT_PERMISSION
from ootci.models import Backend
from relay.breaks import bisect

PERMISSION = BISECT_PERMISSION


@require_POST
def bisect_request(request: HttpRequest, org: str, repo: str, break_id: int) -> HttpResponse:
    user = request.user
    if not user.is_authenticated:
        return JsonResponse({"detail": "Sign in as a maintainer to ask for a bisection."}, status=403)
    if not user.has_perm(PERMISSION):
        return JsonResponse({"detail": f"Asking for a bisection needs the {PERMISSION} permission."}, status=403)
    backend = Backend.objects.filter(repo__iexact=f"{org}/{repo}").first()
    if backend is None:
        return JsonResponse({"detail": f"{org}/{repo} is not an allowlisted backend."}, status=404)
    try:
        outcome = bisect.bisect_request(break_id=break_id, backend=backend, user=user)
    except bisect.BisectRefused as e:
        return JsonResponse({"detail": e.detail}, status=e.status_code)
    if "text/html" in request.headers.get("Accept", ""):  # the break page's form: back to it
        return redirect(f"/oot/{backend.repo}/breaks/#break-{break_id}", permanent=False)
    return JsonResponse({"ok": True, "break": break_id, "bisection": outcome}, status=202)
