"""The HUD pages: each view reads its parameters, asks hud.queries, renders one template."""

from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from hud import params, queries
from hud.queries import BackendInfo, BackendStats


def analytics_fallback(request: HttpRequest) -> dict:
    """Context processor: why this page's figures come from the database rather than ClickHouse, if they do."""
    reason = queries.fallback_reason()
    return {"analytics_fallback": {"reason": reason, "database": connection.display_name} if reason else None}


def backend_or_404(org: str, repo: str) -> BackendInfo:
    found = queries.backend(f"{org}/{repo}")
    if found is None:
        raise Http404(f"{org}/{repo} is not an allowlisted backend")
    return found


def index(request: HttpRequest) -> HttpResponse:
    days, event = params.days(request), params.event(request)
    overview = queries.overview(days=days, event=event)
    empty = not any(overview.sections.values()) and not overview.listed
    context = {"overview": overview, "days": days, "event": event, "empty": empty, "day_choices": params.DAYS}
    return render(request, "hud/index.html", context)


def backend(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    info = backend_or_404(org, repo)
    days, event, page = params.days(request), params.event(request), params.page(request)
    failing = params.flag(request, "failing")
    stats = queries.backend_stats(days=days, event=event, backend_id=info.id).get(info.id, BackendStats())
    matrix = queries.backend_matrix(backend_id=info.id, days=days, event=event, failing_only=failing, page=page)
    context = {
        "backend": info,
        "stats": stats,
        "matrix": matrix,
        "days": days,
        "event": event,
        "failing": failing,
        "day_choices": params.DAYS,
    }
    return render(request, "hud/backend.html", context)


def pull_request(request: HttpRequest, number: int) -> HttpResponse:
    detail = queries.pull_request(number)
    if detail is None:
        raise Http404(f"No pull request #{number} has been relayed")
    return render(request, "hud/pull_request.html", {"pr": detail})


def pr_jump(request: HttpRequest) -> HttpResponse:
    number = params.number(request.GET.get("number", "").strip().lstrip("#"))
    if number is not None and 0 < number < 2**31:
        return redirect("hud:pull-request", number=number)
    return redirect("hud:index")


def job(request: HttpRequest, org: str, repo: str, job_id: int) -> HttpResponse:
    info = backend_or_404(org, repo)
    detail = queries.job_detail(backend_id=info.id, job_id=job_id)
    if detail is None:
        raise Http404(f"{info.repo} has no job {job_id}")
    return render(request, "hud/job.html", {"backend": info, "detail": detail, "job": detail.job})


def metrics(request: HttpRequest) -> HttpResponse:
    days = params.days(request, params.METRIC_DAYS, default=30)
    event = params.event(request)
    series = queries.metrics(days=days, event=event)
    context = {"series": series, "days": days, "event": event, "day_choices": params.METRIC_DAYS}
    return render(request, "hud/metrics.html", context)
