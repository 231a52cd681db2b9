"""The coverage page: a backend's skip ledger (``hud.coverage.queries``), with a chart of its skipped tests over 90
days and how its upstream test files compare with its peers'."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from hud.coverage import queries
from hud.stores import allowlisted
from hud.web import params


def coverage(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    info = allowlisted.backend(f"{org}/{repo}")
    if info is None:
        raise Http404(f"{org}/{repo} is not an allowlisted backend")
    day = params.day(request)
    if isinstance(day, str):
        context = {"backend": info, "problem": f"“{day}” is not a day: write it as YYYY-MM-DD."}
        return render(request, "hud/coverage.html", context, status=400)
    return render(request, "hud/coverage.html", {"backend": info, "c": queries.coverage(info, day=day)})
