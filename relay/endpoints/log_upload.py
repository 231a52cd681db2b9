"""POST /github/job-log: a failed job's log uploaded by CI that is not GitHub Actions (Buildkite, Jenkins, ...).

Authenticated as the callback is (the job's OIDC token, the allowlist, the rate limit: relay.endpoints.requests), the
job named by query parameters (``delivery_id``, ``run_id``, ``job_name``, ``run_attempt``), the body the raw log
(text/plain, at most JOB_LOG_MAX_BYTES), streamed into the intermediate store and classified by a task
(relay.reports.logs).
"""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ootci.http.api_errors import RefusalSerializer
from ootci.models import JobResult
from relay.endpoints.requests import Refused, body_size_check, rate_limit, reporting_backend, verified_repo
from relay.reliability import archive
from relay.reports import logs

QUERY = {
    "delivery_id": "The delivery id of the dispatch (client_payload.delivery_id)",
    "run_id": "The run id the callback reported",
    "job_name": "The job name the callback reported",
    "run_attempt": "The run attempt the callback reported (default 1)",
}


class JobLogApi(APIView):
    authentication_classes: list = []
    permission_classes: list = []
    parser_classes: list = []  # the body is streamed to the store, never parsed or read whole

    @extend_schema(
        operation_id="github_job_log",
        summary="Upload a failed job's log (CI other than GitHub Actions)",
        description="Authorization: Bearer <OIDC token>, as the callback. The body is the raw log.",
        parameters=[
            OpenApiParameter(name, str, required=name != "run_attempt", description=d) for name, d in QUERY.items()
        ],
        request={"text/plain": bytes},
        responses={
            200: inline_serializer(
                "JobLogStored",
                {
                    "ok": serializers.BooleanField(),
                    "sha256": serializers.CharField(),
                    "bytes": serializers.IntegerField(),
                },
            ),
            400: OpenApiResponse(RefusalSerializer, "A query parameter is missing or not valid."),
            401: OpenApiResponse(RefusalSerializer, "The OIDC token is missing or not valid."),
            403: OpenApiResponse(RefusalSerializer, "The repository is not allowed to report."),
            404: OpenApiResponse(RefusalSerializer, "No reported job of this repository matches the parameters."),
            409: OpenApiResponse(RefusalSerializer, "The job did not fail: only failed jobs' logs are kept."),
            413: OpenApiResponse(RefusalSerializer, "The log is over JOB_LOG_MAX_BYTES."),
            429: OpenApiResponse(RefusalSerializer, "The repository's rate limit is used up: see Retry-After."),
        },
    )
    def post(self, request: Request) -> Response:
        limit = settings.JOB_LOG_MAX_BYTES
        body_size_check(request, limit=limit, too_large="The log is {length} bytes; logs are limited to {limit} bytes.")
        backend = reporting_backend(verified_repo(request))
        rate_limit(backend.repo)
        job = _job_named(request, backend_id=backend.pk)
        if not logs.job_log_wanted(job):
            raise Refused(
                409, f"Job {job.job_name!r} is {job.conclusion or job.status}: only failed jobs' logs are kept."
            )
        try:
            stored = logs.job_log_store(job=job, stream=request.stream)
        except archive.ArchiveError as e:
            raise Refused(503, f"The log store cannot be written now: {e}", wait=5) from e
        return Response({"ok": True, "sha256": stored.log_sha256, "bytes": stored.log_bytes})


def _job_named(request: Request, *, backend_id: int) -> JobResult:
    values = {name: request.query_params.get(name, "").strip() for name in QUERY}
    missing = [name for name in ("delivery_id", "run_id", "job_name") if not values[name]]
    if missing:
        raise Refused(400, f"Missing query parameter: {', '.join(missing)}.")
    attempt = values["run_attempt"] or "1"
    if not (attempt.isascii() and attempt.isdigit() and 0 < int(attempt) < 2**31):
        raise Refused(400, "run_attempt must be a positive integer.")
    job = (
        JobResult.objects.select_related("backend")
        .filter(backend_id=backend_id, delivery_id=values["delivery_id"], run_id=values["run_id"])
        .filter(job_name=values["job_name"], run_attempt=int(attempt))
        .first()
    )
    if job is None:
        raise Refused(404, "No reported job of this repository matches delivery_id, run_id, job_name and run_attempt.")
    return job
