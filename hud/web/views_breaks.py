"""The breaks page: a backend's breaks (``hud.breaks.queries``), their suspects and evidence, and the bisection button
for maintainers (the request itself is the relay's: POST /api/oot/<org>/<repo>/breaks/<id>/bisect/)."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from hud.breaks import queries
from hud.stores import allowlisted
from ootci.breaks import BISECT_PERMISSION
from ootci.models import Backend, Break


def breaks(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    info = allowlisted.backend(f"{org}/{repo}")
    if info is None:
        raise Http404(f"{org}/{repo} is not an allowlisted backend")
    state = request.GET.get("state", "")
    if state and state not in Break.State.values:
        context = {"backend": info, "problem": f"“{state[:50]}” is not a state: open or closed."}
        return render(request, "hud/breaks.html", context, status=400)
    context = {
        "backend": info,
        "state": state,
        "breaks": queries.breaks(backend_id=info.id, state=state),
        "bisect_opted_in": Backend.objects.filter(pk=info.id, bisect=True).exists(),
        "may_bisect": request.user.is_authenticated and request.user.has_perm(BISECT_PERMISSION),
    }
    return render(request, "hud/breaks.html", context)
