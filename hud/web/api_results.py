"""JSON API of per-test results: GET /api/oot/<org>/<repo>/jobs/<id>/tests/ — a job attempt's test reports (with
their parse state) and every failing test with its message, as the job page shows them."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.figures import queries
from hud.history import queries as history_queries
from hud.web import params
from hud.web.api_shared import backend_or_404, plain


class ReportSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    source = serializers.CharField(help_text="artifact or upload")
    state = serializers.CharField(help_text="pending, parsed, refused or failed")
    reason = serializers.CharField(help_text="Why it was refused or failed")
    cases = serializers.IntegerField()
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()
    errors = serializers.IntegerField()
    skipped = serializers.IntegerField()
    xfailed = serializers.IntegerField()
    xpassed = serializers.IntegerField()
    reruns = serializers.IntegerField()
    duration = serializers.FloatField()
    received_at = serializers.DateTimeField()
    parsed_at = serializers.DateTimeField(allow_null=True)


class CaseSerializer(serializers.Serializer):
    test_id = serializers.CharField(help_text="file::Class::name with the device made generic ({DEVICE}, {device})")
    file = serializers.CharField()
    classname = serializers.CharField()
    name = serializers.CharField()
    status = serializers.CharField(help_text="failed, error, xpass (failing) or passed (flaky)")
    duration = serializers.FloatField()
    reruns = serializers.IntegerField()
    message = serializers.CharField(help_text="The first 2 KB")


class JobTestsSerializer(serializers.Serializer):
    reports = ReportSerializer(many=True)
    failing = CaseSerializer(many=True, help_text="Failed, errored or strictly xpassed tests: a page of 200")
    failing_total = serializers.IntegerField(help_text="Failing tests in all")
    next_after = serializers.IntegerField(allow_null=True, help_text="?after= for the next page; null: the last")
    flaky = CaseSerializer(many=True, help_text="Tests that passed after reruns: the first 200")
    flaky_total = serializers.IntegerField()
    parsed = serializers.BooleanField()


class JobTestsView(APIView):
    @extend_schema(
        operation_id="oot_job_tests",
        responses=JobTestsSerializer,
        summary="A job attempt's test reports and its failing tests with their messages, a page at a time",
        parameters=[OpenApiParameter("after", int, description="The next_after of the previous page")],
    )
    def get(self, request: Request, org: str, repo: str, job_id: int) -> Response:
        info = backend_or_404(org, repo)
        if queries.job_detail(backend_id=info.id, job_id=job_id) is None:
            raise NotFound(f"{info.repo} has no job {job_id}")
        after = params.after(request)
        if after is None:
            raise ParseError("after must be a page cursor: the next_after of the previous page.")
        return Response(plain(history_queries.job_tests(job_id=job_id, after=after)))
