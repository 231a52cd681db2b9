"""POST /github/test-report: a job's test report uploaded directly, for CI that is not GitHub Actions (or prefers it).

Same OIDC token and allowlist checks as the callback (relay.endpoints.requests), in the same order, cheapest first; the
query names the job attempt exactly as its callback did; the body is one JUnit XML file or a zip/tar.gz of them,
optionally ``Content-Encoding: gzip``. The bytes go to the intermediate store and a task parses them: the answer is 202.
"""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ootci.http.api_errors import RefusalSerializer, validation_detail
from ootci.models import TestReport
from ootci.reports import junit
from relay.endpoints import ratelimit
from relay.endpoints.requests import MAX_COUNT, Refused, WriteApi, body_size_check, reporting_backend, verified_repo
from relay.reports import pull

CONTENT_TYPES = {
    "application/xml": "xml",
    "text/xml": "xml",
    "application/zip": "zip",
    "application/x-zip-compressed": "zip",
    "application/gzip": "tar.gz",
    "application/x-gzip": "tar.gz",
    "application/x-tar+gzip": "tar.gz",
    "application/x-gtar": "tar.gz",
    "application/octet-stream": "any",
}


class TestReportApi(WriteApi):
    class QuerySerializer(serializers.Serializer):
        delivery_id = serializers.CharField(max_length=100)
        workflow = serializers.CharField(max_length=255)
        job = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
        run_id = serializers.CharField(max_length=100)
        run_attempt = serializers.IntegerField(min_value=1, max_value=MAX_COUNT, required=False, default=1)

    @extend_schema(
        operation_id="github_test_report",
        summary="Upload a job attempt's test report (JUnit XML, or a zip or tar.gz of JUnit XML files)",
        description="Authorization: Bearer <OIDC token>, as for callbacks. The query names the job attempt with the "
        "values its callback sent. Content-Type application/xml, application/zip or application/gzip; "
        "Content-Encoding: gzip is accepted. Parsed by a task: see the job's reports in the JSON API.",
        parameters=[QuerySerializer],
        request={"application/xml": OpenApiTypes.BINARY, "application/zip": OpenApiTypes.BINARY},
        responses={
            202: inline_serializer("TestReportQueued", {"report_id": serializers.IntegerField()}),
            400: OpenApiResponse(RefusalSerializer, "Bad query parameters or Content-Type."),
            401: OpenApiResponse(RefusalSerializer, "The OIDC token is missing or not valid."),
            403: OpenApiResponse(RefusalSerializer, "Not an allowed repository, or not its job attempt."),
            404: OpenApiResponse(RefusalSerializer, "No such job attempt."),
            409: OpenApiResponse(RefusalSerializer, "The attempt already has a different report."),
            413: OpenApiResponse(RefusalSerializer, "Over 50 MB."),
            422: OpenApiResponse(RefusalSerializer, "The body is not a JUnit XML file, zip or tar.gz."),
        },
    )
    def post(self, request: Request) -> Response:
        body_size_check(
            request,
            limit=junit.MAX_COMPRESSED,
            too_large="The report is {length} bytes; uploads are limited to {limit} bytes (50 MB).",
        )
        repo = verified_repo(request)
        backend = reporting_backend(repo)
        limit = settings.CALLBACK_RATE_LIMIT_PER_MIN
        decision = ratelimit.rate_limit_hit(key=f"test-report:{repo.lower()}", limit=limit)
        if not decision.allowed:
            raise Refused(429, f"Too many test reports from {repo}; retry in {decision.retry_after} s.")
        query = self.QuerySerializer(data=request.query_params)
        if not query.is_valid():
            raise Refused(400, validation_detail(query.errors))
        content_type = (request.content_type or "").split(";")[0].strip().lower()
        if content_type not in CONTENT_TYPES:
            raise Refused(400, f"Content-Type must be one of {', '.join(CONTENT_TYPES)}, not {content_type!r}.")
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            raise Refused(400, f"Content-Encoding {encoding!r} is not supported: send gzip or nothing.")
        encoding = "gzip" if encoding == "gzip" else ""
        received = None
        try:
            job = pull.upload_job(backend_id=backend.pk, **query.validated_data)
            received = pull.spooled(request._request, limit=junit.MAX_COMPRESSED)
            if received.size == 0:
                raise pull.UploadRefused(400, "The body is empty: send the report file.")
            pull.upload_sniff(received, content_encoding=encoding)
            report, _ = pull.report_store(
                job=job,
                received=received,
                source=TestReport.Source.UPLOAD,
                content_type=content_type,
                content_encoding=encoding,
                only_one=True,
            )
        except pull.UploadRefused as e:
            raise Refused(e.status_code, e.detail) from e
        finally:
            if received is not None:
                received.spool.close()
        return Response({"report_id": report.pk}, status=202)
