"""JSON API of per-test history (hud.history.assembly): GET /api/oot/tests/?q= (the test search) and
GET /api/oot/tests/<generic id>/ (one test across backends), as the pages show them.

Unlike the older endpoints, whose bad query values fall back to defaults, these refuse them (400 with ``detail``): a
script asking for page "abc" or a 5,000-character search should hear so rather than get page 1.
"""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.history import assembly
from hud.history import queries as history_queries
from hud.web import params
from hud.web.api_shared import BackendRefSerializer
from ootci.http.api_errors import RefusalSerializer, validation_detail

DAYS = serializers.ChoiceField(choices=params.DAYS, default=7, help_text="Window in days (default 7)")


class SearchInput(serializers.Serializer):
    q = serializers.CharField(
        min_length=assembly.MIN_QUERY,
        max_length=assembly.MAX_QUERY,
        help_text="Text the generic test id contains (any case)",
    )
    days = DAYS
    page = serializers.IntegerField(min_value=1, max_value=params.MAX_PAGE, default=1, help_text="50 tests a page")


class TestInput(serializers.Serializer):
    days = DAYS


def valid(serializer_class: type[serializers.Serializer], request: Request) -> dict:
    serializer = serializer_class(data=request.query_params)
    if not serializer.is_valid():
        raise ParseError(validation_detail(serializer.errors))
    return serializer.validated_data


class HitSerializer(serializers.Serializer):
    generic_id = serializers.CharField()
    last_failure = serializers.DateTimeField(allow_null=True, help_text="Arrival of its latest failing result")
    last_run = serializers.DateTimeField()
    runs = serializers.IntegerField(help_text="Passes and failures in the window (skipped ones aside)")
    failures = serializers.IntegerField()
    pass_rate = serializers.FloatField(allow_null=True)


class SearchSerializer(serializers.Serializer):
    text = serializers.CharField()
    days = serializers.IntegerField()
    hits = HitSerializer(many=True, help_text="Failing most recently first, then the rest by id")
    page = serializers.IntegerField()
    has_next = serializers.BooleanField()


class MomentSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    sha = serializers.CharField(help_text="Tested upstream SHA")
    pr_number = serializers.IntegerField(allow_null=True)
    event_type = serializers.CharField()
    at = serializers.DateTimeField(help_text="When its test report arrived")


class CellSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    status = serializers.CharField(help_text="passed, failed, error, xpass, skipped or xfail")
    reruns = serializers.IntegerField(help_text="pytest reruns of this result")
    results = serializers.IntegerField(help_text="Results of the test on this backend and SHA (re-runs included)")
    letter = serializers.CharField(help_text="As the backend matrix: O pass, X fail, S skipped, N xfail")
    outcome = serializers.CharField(help_text="The matrix cell class: success, test, infra or skipped")
    status_text = serializers.CharField()


class StartedFailingSerializer(serializers.Serializer):
    first = MomentSerializer(help_text="The first failure after the last pass")
    after_pass = serializers.BooleanField(help_text="False when no pass is in the window")
    failures = serializers.IntegerField()


class LastFailureSerializer(serializers.Serializer):
    moment = MomentSerializer()
    status = serializers.CharField()
    message = serializers.CharField(help_text="The first 2 KB")
    folded = serializers.BooleanField()
    first_line = serializers.CharField()


class BackendHistorySerializer(serializers.Serializer):
    backend = BackendRefSerializer()
    cells = serializers.ListField(
        child=CellSerializer(allow_null=True), help_text="One per column; null where it did not run"
    )
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()
    skipped = serializers.IntegerField()
    runs = serializers.IntegerField()
    pass_rate = serializers.FloatField(allow_null=True)
    started_failing = StartedFailingSerializer(allow_null=True, help_text="null when its latest result passes")
    last_failure = LastFailureSerializer(allow_null=True)


class ColumnSerializer(serializers.Serializer):
    pr_number = serializers.IntegerField(allow_null=True)
    sha = serializers.CharField()
    at = serializers.DateTimeField()


class TestHistorySerializer(serializers.Serializer):
    generic_id = serializers.CharField()
    days = serializers.IntegerField()
    columns = ColumnSerializer(many=True, help_text="Tested upstream SHAs, newest first")
    backends = BackendHistorySerializer(many=True, help_text="Failing now first, then by repo")


class TestSearchView(APIView):
    @extend_schema(
        operation_id="oot_test_search",
        parameters=[SearchInput],
        responses={200: SearchSerializer, 400: RefusalSerializer},
        summary="Tests whose generic id contains the text, failing most recently first",
    )
    def get(self, request: Request) -> Response:
        data = valid(SearchInput, request)
        found = history_queries.search(text=data["q"], days=data["days"], page=data["page"])
        return Response(SearchSerializer(found).data)


class TestHistoryView(APIView):
    @extend_schema(
        operation_id="oot_test_history",
        parameters=[TestInput],
        responses={200: TestHistorySerializer, 400: RefusalSerializer},
        summary="One test across backends: results by upstream SHA, when it started failing, last failure, pass rate",
    )
    def get(self, request: Request, generic_id: str) -> Response:
        data = valid(TestInput, request)
        if not assembly.possible_id(generic_id):
            raise NotFound("No test has this id")
        found = history_queries.page(generic_id=generic_id, days=data["days"])
        return Response(TestHistorySerializer(found).data)
