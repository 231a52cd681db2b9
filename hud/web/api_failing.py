"""JSON API of the failing-tests classification (hud.failing.classes): GET /api/oot/<org>/<repo>/failing-tests/[?pr=N]
— a backend's failing tests with their classes and baseline — and GET /api/oot/pr/<n>/, the PR page's data with each
backend's classified failing tests and the summary line."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.failing import classes
from hud.failing import queries as failing_queries
from hud.figures import queries
from hud.web import params
from hud.web.api_shared import BackendRefSerializer, backend_or_404, plain
from ootci import verdicts

PR = OpenApiParameter("pr", int, description="A PR number: its head's failing tests (default: the latest baseline run)")


class BaselineSerializer(serializers.Serializer):
    rule = serializers.CharField(
        help_text="base (the PR's base commit), before (latest run before the head was "
        "pushed) or previous (the run before this nightly/push run)"
    )
    rule_text = serializers.CharField()
    sha = serializers.CharField(help_text="Upstream commit of the baseline run")
    event = serializers.CharField(help_text="nightly or push")
    finished_at = serializers.DateTimeField()
    job_id = serializers.IntegerField(help_text="A job of the run (its HUD job page)")
    run_url = serializers.CharField()


class FailingTestSerializer(serializers.Serializer):
    test_id = serializers.CharField(help_text="Generic id: file::Class::name with the device made generic")
    verdict = serializers.ChoiceField(
        choices=verdicts.TEST_ORDER,
        help_text="The first that holds: infra, disabled, flaky, broken-baseline, new (README 'How we count')",
    )
    classes = serializers.ListField(
        child=serializers.CharField(),
        help_text="the verdict, then passed/failing/not on baseline or no baseline, then only here",
    )
    new = serializers.BooleanField(help_text="verdict == new")
    already_failing = serializers.BooleanField(help_text="verdict == broken-baseline")
    only_here = serializers.BooleanField(help_text="Passed on another backend at the same upstream SHA, failed on none")
    flaky = serializers.BooleanField()
    flaky_why = serializers.ListField(child=serializers.CharField(), help_text="The evidence that makes it flaky")
    baseline = serializers.CharField(help_text="passed, failing, absent; empty without a baseline")
    elsewhere = serializers.CharField(help_text="passes, fails or not run on the other backends at the same SHA")
    flakiness = serializers.FloatField(allow_null=True, help_text="Flips / (results - 1) over the last 20 results")
    flakiness_pct = serializers.FloatField(allow_null=True)
    results = serializers.IntegerField(help_text="Results the score reads (at most 20)")
    since = serializers.DateTimeField(allow_null=True, help_text="Oldest failure of the current streak")
    since_sha = serializers.CharField()
    streak = serializers.IntegerField(help_text="Failures in a row, newest first (20: at least)")
    status = serializers.CharField()
    message = serializers.CharField(help_text="First line of the failure message")
    job_id = serializers.IntegerField()
    jobs = serializers.ListField(child=serializers.CharField(), help_text="Jobs (workflow / job) it fails in")


class BackendFailingSerializer(serializers.Serializer):
    backend = BackendRefSerializer()
    sha = serializers.CharField(help_text="Upstream SHA of the jobs read")
    event = serializers.CharField()
    pr_number = serializers.IntegerField(allow_null=True)
    ran = serializers.BooleanField(help_text="The backend has jobs at that SHA")
    baseline = BaselineSerializer(allow_null=True, help_text="null: no baseline")
    total = serializers.IntegerField(help_text="Failing tests at the SHA (tests lists the first 500)")
    verdict = serializers.CharField(help_text="The worst of its tests' verdicts (new first); empty without any")
    new = serializers.IntegerField()
    already_failing = serializers.IntegerField()
    only_here = serializers.IntegerField()
    flaky = serializers.IntegerField()
    summary = serializers.CharField()
    tests = FailingTestSerializer(many=True)


class PullRequestDetailSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    upstream_repo = serializers.CharField()
    title = serializers.CharField()
    author = serializers.CharField()
    labels = serializers.ListField(child=serializers.CharField())
    state = serializers.CharField()
    head_sha = serializers.CharField()
    html_url = serializers.CharField()
    groups = serializers.ListField(child=serializers.DictField(), help_text="Per backend: jobs on the head, earlier")
    summary = serializers.DictField(child=serializers.IntegerField())
    failing_tests = BackendFailingSerializer(many=True)
    failing_summary = serializers.CharField(help_text='e.g. "2 new failures on npu, 1 flaky, 14 broken-baseline"')
    job_verdicts = serializers.DictField(
        child=serializers.CharField(), help_text="Each failed job's verdict (ootci.verdicts), by job id, once known"
    )


def pr_param(request: Request) -> int | None:
    """?pr=, or None when absent; anything but a PR number is a 400."""
    raw = request.query_params.get("pr", "").strip()
    if not raw:
        return None
    number = params.number(raw.lstrip("#"))
    if number is None or not 0 < number < 2**31:
        raise ValidationError({"detail": f"pr must be a pull request number, not {raw[:50]!r}"})
    return number


class FailingTestsView(APIView):
    @extend_schema(
        operation_id="oot_failing_tests",
        parameters=[PR],
        responses=BackendFailingSerializer,
        summary="A backend's failing tests with their classes (new, already failing, only here, flaky) and baseline",
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        info = backend_or_404(org, repo)
        pr = pr_param(request)
        found = failing_queries.failing_tests(info, pr=pr)
        if found is None:
            raise NotFound(f"No pull request #{pr} has been relayed")
        return Response(BackendFailingSerializer(found).data)


FAILED = ("test", "infra")


class PullRequestView(APIView):
    @extend_schema(
        operation_id="oot_pull_request",
        responses=PullRequestDetailSerializer,
        summary="One upstream PR across backends, with each backend's failing tests classified",
    )
    def get(self, request: Request, number: int) -> Response:
        detail = queries.pull_request(number)
        if detail is None:
            raise NotFound(f"No pull request #{number} has been relayed")
        found = failing_queries.pr_failing_tests(number, detail) or []
        failed = [job.id for group in detail.groups for job in group.jobs + group.earlier if job.outcome in FAILED]
        lines = failing_queries.job_failures(failed)
        data = plain(detail) | {
            "failing_tests": BackendFailingSerializer(found, many=True).data,
            "failing_summary": classes.summary_line(found),
            "job_verdicts": {str(job_id): line.verdict for job_id, line in lines.items() if line.verdict},
        }
        return Response(data)
