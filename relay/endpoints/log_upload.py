"""POST /github/job-log: a failed job's log uploaded by CI that is not GitHub Actions (Buildkite, Jenkins, ...).

The same contract as ``POST /github/test-report``: authenticated as the callback is (the job's OIDC token, the
allowlist, the rate limit: relay.endpoints.requests), the job attempt named by the same query parameters
(``delivery_id``, ``workflow``, ``job``, ``run_id``, ``run_attempt``; ``job_name`` is still taken for ``job``, and only
then may ``workflow`` be left out, when the job name alone is unique), the same refusals, and 202 once the raw log
(text/plain, at most JOB_LOG_MAX_BYTES) is in the intermediate store: a task classifies it (relay.reports.logs).
"""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ootci.http.api_errors import RefusalSerializer
from ootci.models import JobResult
from relay.endpoints import checked
from relay.endpoints.requests import Refused, WriteApi, body_size_check, rate_limit, reporting_backend, verified_repo
from relay.reliability import archive
from relay.reports import logs, pull

QUERY = {
    "delivery_id": "The delivery id of the dispatch (client_payload.delivery_id)",
    "workflow": "The workflow name the callback reported",
    "job": "The job name the callback reported",
    "run_id": "The run id the callback reported",
    "run_attempt": "The run attempt the callback reported (default 1)",
    "job_name": "Accepted for job (the earlier name of this parameter); workflow may then be left out",
}


class JobLogApi(WriteApi):
    @extend_schema(
        operation_id="github_job_log",
        summary="Upload a failed job's log (CI other than GitHub Actions)",
        description="Authorization: Bearer <OIDC token>, as the callback. The body is the raw log.",
        parameters=[
            OpenApiParameter(name, str, required=name in ("delivery_id", "run_id"), description=d)
            for name, d in QUERY.items()
        ],
        request={"text/plain": bytes},
        responses={
            202: inline_serializer(
                "JobLogQueued",
                {
                    "ok": serializers.BooleanField(),
                    "job_id": serializers.IntegerField(),
                    "sha256": serializers.CharField(),
                    "bytes": serializers.IntegerField(),
                },
            ),
            400: OpenApiResponse(RefusalSerializer, "A query parameter is missing or not valid."),
            401: OpenApiResponse(RefusalSerializer, "The OIDC token is missing or not valid."),
            403: OpenApiResponse(RefusalSerializer, "Not an allowed repository, or not its job attempt."),
            404: OpenApiResponse(RefusalSerializer, "No such job attempt."),
            409: OpenApiResponse(
                RefusalSerializer, "The job did not fail (only failed jobs' logs are kept), or job_name is ambiguous."
            ),
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
        if request.stream is None:  # no body at all (Content-Length 0)
            raise Refused(400, "The request has no body: send the job's log as the request body.")
        try:
            stored = logs.job_log_store(job=job, stream=request.stream)
        except archive.ArchiveError as e:
            raise Refused(503, f"The log store cannot be written now: {e}", wait=5) from e
        answer = {"ok": True, "job_id": job.pk, "sha256": stored.log_sha256, "bytes": stored.log_bytes}
        return Response(answer, status=202)


def _job_named(request: Request, *, backend_id: int) -> JobResult:
    values = {name: request.query_params.get(name, "").strip() for name in QUERY}
    for name, value in values.items():
        if problem := checked.text_problem(value):
            raise Refused(400, f"Query parameter {name} {problem}.")
    legacy = not values["job"] and bool(values["job_name"])
    job = values["job"] or values["job_name"]
    missing = [name for name in ("delivery_id", "run_id") if not values[name]]
    missing += [] if job else ["job"]
    missing += [] if values["workflow"] or legacy else ["workflow"]
    if missing:
        raise Refused(400, f"Missing query parameter: {', '.join(missing)}.")
    attempt = values["run_attempt"] or "1"
    if not (attempt.isascii() and attempt.isdigit() and 0 < int(attempt) < 2**31):
        raise Refused(400, "run_attempt must be a positive integer.")
    try:
        return pull.upload_job(
            backend_id=backend_id,
            delivery_id=values["delivery_id"],
            workflow=values["workflow"] or None,
            job=job,
            run_id=values["run_id"],
            run_attempt=int(attempt),
        )
    except pull.UploadRefused as e:
        raise Refused(e.status_code, e.detail) from e
