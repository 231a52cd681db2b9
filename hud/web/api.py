"""The HUD's JSON API under /api/oot/: the same figures as the pages, from hud.figures.queries.

One APIView per operation. Query parameters behave as on the pages (bad values fall back to defaults).
The POST /api/crcr/results ingest is the relay's (relay/endpoints/ingest.py): the relay writes, the HUD reads.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.coverage import queries as coverage_queries
from hud.failing import queries as failing_queries
from hud.figures import queries, where
from hud.stores.types import EVENTS, BackendStats
from hud.web import params
from hud.web.api_shared import backend_or_404, plain
from ootci import allowlist

DAYS = OpenApiParameter("days", int, enum=list(params.DAYS), description="Window in days (default 7)")
METRIC_DAYS = OpenApiParameter("days", int, enum=list(params.METRIC_DAYS), description="Days shown (default 30)")
EVENT = OpenApiParameter("event", str, enum=list(EVENTS), description="Upstream event (default pull_request)")
PAGE = OpenApiParameter("page", int, description="Matrix page, 50 rows each (default 1)")
FAILING = OpenApiParameter("failing", bool, description="Only rows with a failure")
RUNNER = OpenApiParameter("runner", str, description="Only jobs that ran on this runner, or a runner with this label")
DEVICE = OpenApiParameter("device", str, description="Only jobs that ran on this device (environment.device)")


class OverviewView(APIView):
    @extend_schema(
        operation_id="oot_overview",
        parameters=[DAYS, EVENT],
        responses=OpenApiTypes.OBJECT,
        summary="Health of every backend",
    )
    def get(self, request: Request) -> Response:
        overview = queries.overview(days=params.days(request), event=params.event(request))
        return Response(plain(overview))


class BackendView(APIView):
    @extend_schema(
        operation_id="oot_backend",
        parameters=[DAYS, EVENT, PAGE, FAILING, RUNNER, DEVICE],
        responses=OpenApiTypes.OBJECT,
        summary="One backend: cards and matrix",
        description="``environments``: where each matrix job ran (job id → its environment); ``hardware``: the "
        "share of its jobs in the window that name their device or runner (goal ≥ 95 % once it sends any); "
        "``sick_runners``: runners failing significantly more than the backend over the last 24 h.",
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        info = backend_or_404(org, repo)
        days, event = params.days(request), params.event(request)
        stats = queries.backend_stats(days=days, event=event, backend_id=info.id).get(info.id, BackendStats())
        matrix = queries.backend_matrix(
            backend_id=info.id,
            days=days,
            event=event,
            failing_only=params.flag(request, "failing"),
            page=params.page(request),
        )
        envs = where.environments([job.id for row in matrix.rows for job in row.cells.values()])
        runner, device = params.text(request, "runner"), params.text(request, "device")
        matrix = where.matrix_where(matrix, envs, runner=runner, device=device)
        hardware = where.hardware_share(backend_id=info.id, event=event, since=queries.since_days(days))
        found = {"backend": info, "days": days, "event": event, "stats": stats, "matrix": matrix}
        found |= {"environments": envs, "hardware": hardware, "sick_runners": where.sick_runners(info.id)}
        return Response(plain(found))


class JobView(APIView):
    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        summary="One job attempt and every attempt of that job",
        description="``failure``: why the attempt failed, as the job page shows it (class, where it was decided, the "
        "rule and the log line with its link on GitHub, the failed step); null when it did not fail or is not "
        "classified yet. ``verdict``: the job's verdict (ootci.verdicts: infra, disabled, flaky, broken-baseline, "
        "new, unknown; empty when it did not fail or is not known yet); ``exonerated``: why its check run concluded "
        "neutral; ``auto_retry``: the relay's automatic re-run of an infra failure, or why none; ``environment``: "
        "where it ran (device, device_count, driver, sdk, torch_version, os, image_digest, runner, runner_labels and "
        "any other key sent); ``infra_candidate``: the sick runner a failed job ran on, with the evidence, or null.",
    )
    def get(self, request: Request, org: str, repo: str, job_id: int) -> Response:
        info = backend_or_404(org, repo)
        detail = queries.job_detail(backend_id=info.id, job_id=job_id)
        if detail is None:
            raise NotFound(f"{info.repo} has no job {job_id}")
        failure = failing_queries.job_failures([detail.job.id]).get(detail.job.id)
        verdict = {"verdict": failure.verdict if failure else "", "exonerated": failure.exonerated if failure else ""}
        verdict["auto_retry"] = failure.auto_retry if failure else ""
        env = where.environments([detail.job.id]).get(detail.job.id, {})
        candidate = where.infra_candidate(detail.job, env)
        verdict |= {"environment": env, "infra_candidate": candidate.evidence() if candidate else None}
        return Response(plain(detail) | {"failure": plain(failure)} | verdict)


class ReadinessView(APIView):
    @extend_schema(
        responses=OpenApiTypes.OBJECT,
        summary="One backend against the level gates, with its verdict",
        description="``coverage``: its skip ledger's totals over its jobs' newest baseline runs (shown, not gated).",
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        info = backend_or_404(org, repo)
        found = {"backend": info, "readiness": queries.readiness(shown=[info])[info.id]}
        return Response(plain(found | {"coverage": coverage_queries.readiness_coverage(info.id)}))


class MetricsView(APIView):
    @extend_schema(parameters=[METRIC_DAYS, EVENT], responses=OpenApiTypes.OBJECT, summary="Daily pass rate")
    def get(self, request: Request) -> Response:
        days = params.days(request, params.METRIC_DAYS, default=30)
        event = params.event(request)
        return Response(plain({"days": days, "event": event, "series": queries.metrics(days=days, event=event)}))


class FailuresView(APIView):
    @extend_schema(
        operation_id="oot_failures",
        parameters=[DAYS],
        responses=OpenApiTypes.OBJECT,
        summary="Failure signatures ranked by jobs affected, with backends, first/last seen and example jobs",
    )
    def get(self, request: Request) -> Response:
        days = params.days(request)
        return Response(plain({"days": days, "signatures": failing_queries.failure_signatures(days=days)}))


class YAMLRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return data.encode() if isinstance(data, str) else str(data).encode()


class AllowlistView(APIView):
    renderer_classes = [JSONRenderer, YAMLRenderer]

    @extend_schema(
        responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "application/yaml"): OpenApiTypes.STR},
        summary="The enabled allowlist in the RFC layout (JSON, or YAML with ?format=yaml)",
    )
    def get(self, request: Request) -> Response:
        if request.accepted_renderer.format == "yaml":
            return Response(allowlist.export_yaml())
        return Response(allowlist.export_data())
