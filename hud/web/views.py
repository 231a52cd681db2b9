"""The HUD pages: each view reads its parameters, asks hud.figures.queries, renders one template.

A page's live part (``<div id="live">``) is also its own template, ``hud/_<page>_live.html``: the page script asks
for it alone (header ``X-HUD-Fragment: live``) when it refreshes, so a refresh moves a tenth of the bytes and
replaces nothing outside it.
"""

from dataclasses import replace
from datetime import timedelta

from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import cache_page

from hud.breaks import queries as breaks_queries
from hud.coverage import queries as coverage_queries
from hud.failing import classes
from hud.failing import queries as failing_queries
from hud.figures import queries, where
from hud.history import queries as history_queries
from hud.readiness import impact
from hud.stores import allowlisted, fallback
from hud.stores.types import BackendInfo, BackendStats, Matrix, PrGroup
from hud.web import badges, params
from ootci import allowlist
from ootci.http import errors

FRAGMENT_HEADER = "X-HUD-Fragment"
FAILING = ("test", "infra")
FIRST_FAILED_TESTS = 3
BADGE_SECONDS = 60


def analytics_fallback(request: HttpRequest) -> dict:
    """Context processor: why this page's figures come from the database rather than ClickHouse, if they do."""
    reason = fallback.fallback_reason()
    if reason and not (request.user.is_authenticated and request.user.is_staff):
        # The driver's error names hosts and SQL: staff see it here, everyone in the logs (hud.stores.fallback).
        reason = "The analytics store did not answer; the details are in the server's log."
    return {"analytics_fallback": {"reason": reason, "database": connection.display_name} if reason else None}


def render_page(request: HttpRequest, name: str, context: dict) -> HttpResponse:
    """The page ``hud/<name>.html``, or only its live fragment when the page script asks for it."""
    fragment = request.headers.get(FRAGMENT_HEADER) == "live"
    response = render(request, f"hud/_{name}_live.html" if fragment else f"hud/{name}.html", context)
    patch_vary_headers(response, [FRAGMENT_HEADER])
    return response


def backend_or_404(org: str, repo: str) -> BackendInfo:
    found = allowlisted.backend(f"{org}/{repo}")
    if found is None:
        raise Http404(f"{org}/{repo} is not an allowlisted backend")
    return found


def index(request: HttpRequest) -> HttpResponse:
    days, event = params.days(request), params.event(request)
    overview = queries.overview(days=days, event=event)
    empty = not any(overview.sections.values()) and not overview.listed and not overview.probes
    context = {"overview": overview, "days": days, "event": event, "empty": empty, "day_choices": params.DAYS}
    context["silent"] = queries.silent([row.backend.id for rows in overview.sections.values() for row in rows])
    return render_page(request, "index", context)


def visible_columns(matrix: Matrix, *, job_filter: str, hide_green: bool) -> Matrix:
    """The matrix with only the columns asked for: names containing ``job_filter`` (any case) and, with
    ``hide_green``, not those whose every job passed; rows left without a job go too (lost rows stay unfiltered)."""
    columns = [c for c in matrix.columns if job_filter.lower() in c.lower()]
    if hide_green:
        columns = [c for c in columns if any(c in r.cells and r.cells[c].outcome != "success" for r in matrix.rows)]
    if columns == matrix.columns:
        return matrix
    rows = [r for r in matrix.rows if any(c in r.cells for c in columns) or (r.lost and not job_filter)]
    return replace(matrix, columns=columns, rows=rows)


def backend(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    info = backend_or_404(org, repo)
    if request.GET.get("view") == "failing-tests":
        return failing_tests(request, info)
    days, event, page = params.days(request), params.event(request), params.page(request)
    failing, hide_green = params.flag(request, "failing"), params.flag(request, "hide_green")
    job_filter = request.GET.get("job", "").strip()[:100]
    runner, device = params.text(request, "runner"), params.text(request, "device")
    stats = queries.backend_stats(days=days, event=event, backend_id=info.id).get(info.id, BackendStats())
    matrix = queries.backend_matrix(backend_id=info.id, days=days, event=event, failing_only=failing, page=page)
    envs = where.environments([job.id for row in matrix.rows for job in row.cells.values()])
    matrix = where.matrix_where(matrix, envs, runner=runner, device=device)
    failed_ids = [job.id for row in matrix.rows for job in row.cells.values() if job.outcome in FAILING]
    context = {
        "backend": info,
        "stats": stats,
        "matrix": visible_columns(matrix, job_filter=job_filter, hide_green=hide_green),
        "environments": envs,
        "runner": runner,
        "device": device,
        "hardware": where.hardware_share(backend_id=info.id, event=event, since=queries.since_days(days)),
        "sick": where.sick_runners(info.id),
        "days": days,
        "event": event,
        "failing": failing,
        "hide_green": hide_green,
        "job_filter": job_filter,
        "day_choices": params.DAYS,
        "failures": failing_queries.job_failures(failed_ids),
        "auto": failing_queries.auto_retries(job for row in matrix.rows for job in row.cells.values()),
        "badge_markdown": badge_markdown(request, info),
        "silent": queries.silent([info.id]).get(info.id, ""),
    }
    return render_page(request, "backend", context)


def failing_tests(request: HttpRequest, info: BackendInfo) -> HttpResponse:
    """The backend page's failing-tests view: the tests failing in its latest nightly/push run, or on ``?pr=``'s head,
    each classified (hud.failing.classes); a bad or unknown PR number is said on the page (400, 404)."""
    raw = request.GET.get("pr", "").strip()[:50]
    pr = params.number(raw.lstrip("#")) if raw else None
    context = {"backend": info, "recent": failing_queries.recent_failing_prs(info.id), "pr_asked": raw}
    if raw and (pr is None or not 0 < pr < 2**31):
        context["problem"] = f"“{raw}” is not a pull request number."
        return render(request, "hud/failing_tests.html", context, status=400)
    found = failing_queries.failing_tests(info, pr=pr)
    if found is None:
        context["problem"] = f"No pull request #{pr} has been relayed."
        return render(request, "hud/failing_tests.html", context, status=404)
    shown = breaks_queries.breaks(backend_id=info.id, bad_sha=found.sha) if pr is None and found.sha else []
    return render(request, "hud/failing_tests.html", context | {"found": found, "breaks": shown})


def group_failing(group: PrGroup) -> bool:
    """A backend with a failed job on the head SHA, or whose dispatch was lost or failed."""
    waiting = group.waiting is not None and group.waiting.state != "waiting"
    return waiting or any(job.outcome in FAILING for job in group.jobs)


def pull_request(request: HttpRequest, number: int) -> HttpResponse:
    detail = queries.pull_request(number)
    if detail is None:
        raise Http404(f"No pull request #{number} has been relayed")
    # Failing backends first, where the reader looks (stable: queries' order within each part).
    groups = sorted(detail.groups, key=lambda group: not group_failing(group))
    failing = {group.backend.id for group in groups if group_failing(group)}
    failed_jobs = [job.id for group in groups for job in group.jobs + group.earlier if job.outcome in FAILING]
    reported = history_queries.first_failing_tests(failed_jobs, per_job=FIRST_FAILED_TESTS)
    context = {
        "pr": detail,
        "groups": groups,
        "failing": failing,
        "first_failed": FIRST_FAILED_TESTS,
        "reported": reported,
        "failures": failing_queries.job_failures(failed_jobs),
    }
    classified = failing_queries.pr_failing_tests(number, detail) or []
    context["failing_tests"] = {found.backend.id: found for found in classified}
    context["failing_line"] = classes.summary_line(classified)
    return render_page(request, "pull_request", context)


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
    context = {"backend": info, "detail": detail, "job": detail.job, "current": detail.job.id}
    after = params.after(request)
    if after is None:
        return HttpResponseBadRequest("?after= is a page cursor: the link to the next page of failing tests gives it.")
    context["tests"] = history_queries.job_tests(job_id=detail.job.id, after=after)
    context["failure"] = failing_queries.job_failures([detail.job.id]).get(detail.job.id)
    context["environment"] = where.environments([detail.job.id]).get(detail.job.id, {})
    context["infra_candidate"] = where.infra_candidate(detail.job, context["environment"])
    return render_page(request, "job", context)


def failures(request: HttpRequest) -> HttpResponse:
    days = params.days(request)
    context = {"signatures": failing_queries.failure_signatures(days=days), "days": days, "day_choices": params.DAYS}
    return render_page(request, "failures", context)


def metrics(request: HttpRequest) -> HttpResponse:
    days = params.days(request, params.METRIC_DAYS, default=30)
    event = params.event(request)
    series = queries.metrics(days=days, event=event)
    context = {"series": series, "days": days, "event": event, "day_choices": params.METRIC_DAYS}
    return render_page(request, "metrics", context)


def allowlist_page(request: HttpRequest) -> HttpResponse:
    by_level: dict[str, list[BackendInfo]] = {level: [] for level in ("L4", "L3", "L2", "L1")}
    for info in allowlisted.backends():
        by_level.setdefault(info.level, []).append(info)
    context = {"by_level": by_level, "yaml": allowlist.export_yaml()}
    return render(request, "hud/allowlist.html", context)


def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "hud/api_docs.html")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The 404 page in the HUD's layout: what was not found, and where to go instead (JSON under /api/ and /github/,
    as the API's own 404s are)."""
    if request.path.startswith(errors.JSON_PATHS):
        return errors.not_found(request, exception)
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "hud/404.html", {"message": message, "path": request.path}, status=404)


def readiness(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """The backend against the level gates over the fixed promotion and demotion windows, with its verdict."""
    info = backend_or_404(org, repo)
    verdict = queries.readiness(shown=[info])[info.id]
    days = verdict.promotion.days
    found = impact.impact(info.id, since=timezone.now() - timedelta(days=days), days=days)
    context = {"backend": info, "r": verdict, "impact": found, "silent": queries.silent([info.id]).get(info.id, "")}
    context["coverage"] = coverage_queries.readiness_coverage(info.id)
    return render(request, "hud/readiness.html", context)


@cache_page(BADGE_SECONDS)
def badge(request: HttpRequest, org: str, repo: str) -> HttpResponse:
    """Level and pass rate over ``days`` of ``event`` (the page's parameters) as an SVG badge; cached 60 s."""
    info = backend_or_404(org, repo)
    days, event = params.days(request), params.event(request)
    counts = queries.backend_stats(days=days, event=event, backend_id=info.id).get(info.id, BackendStats()).counts
    rate = counts.pass_rate
    message = f"{info.level} · {'no data' if rate is None else f'{rate:g}%'}"
    if silent := queries.silent([info.id]).get(info.id):  # a green rate of results that stopped coming would mislead
        message, rate = f"{info.level} · {silent.split(' (')[0]}", None
    title = f"{info.repo}: {info.level}, pass rate of {event} jobs over {days} days"
    svg = badges.badge_svg(label="OOT CI", message=message, pass_rate=rate, title=title)
    return HttpResponse(svg, content_type="image/svg+xml; charset=utf-8")


def badge_markdown(request: HttpRequest, info: BackendInfo) -> str:
    """The Markdown that embeds a backend's badge, linking to its page (shown on that page)."""
    page = request.build_absolute_uri(reverse("hud:backend", args=[info.org, info.name]))
    return f"[![OOT CI]({page}badge.svg)]({page})"
