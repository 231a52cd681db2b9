"""JSON API of breaks (hud.breaks): GET /api/oot/<org>/<repo>/breaks/[?state=open|closed] — the backend's breaks,
newest first, each with its runs, its tests, its ranked suspects with their evidence and its bisection."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.breaks import queries
from hud.web.api_shared import backend_or_404, plain
from ootci import breaks as rules
from ootci.models import Break


class EvidenceSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="pr_run_failed, file, untested, pr_run_passed, pr_run_failed_<verdict>")
    text = serializers.CharField()
    url = serializers.CharField(help_text="The PR-time run, when there is one")
    line = serializers.CharField(required=False, help_text="The failing line of that run")


class SuspectSerializer(serializers.Serializer):
    rank = serializers.IntegerField(help_text="1: the likeliest")
    tier = serializers.ChoiceField(choices=rules.TIERS, help_text="strong > medium > untested > passed")
    tier_text = serializers.CharField()
    sha = serializers.CharField(help_text="Upstream commit in (good_sha, bad_sha]")
    pr_number = serializers.IntegerField(allow_null=True, help_text="The PR that merged it")
    title = serializers.CharField()
    url = serializers.CharField()
    evidence = EvidenceSerializer(many=True)


class BreakTestSerializer(serializers.Serializer):
    test_id = serializers.CharField()
    backend = serializers.CharField()
    line = serializers.CharField(help_text="The failure's last line")
    job_id = serializers.IntegerField(allow_null=True)
    run_url = serializers.CharField()
    fixed = serializers.DateTimeField(allow_null=True, help_text="When a baseline run passed it again")
    fixed_run_url = serializers.CharField()


class BreakRunSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["failing", "previous", "fixed"])
    backend = serializers.CharField()
    job_id = serializers.IntegerField()
    event = serializers.CharField()
    sha = serializers.CharField()
    job = serializers.CharField()
    run_url = serializers.CharField()


class StepSerializer(serializers.Serializer):
    sha = serializers.CharField()
    backend = serializers.CharField()
    state = serializers.ChoiceField(choices=["dispatched", "good", "bad", "inconclusive"])
    note = serializers.CharField()
    dispatched_at = serializers.DateTimeField()
    decided_at = serializers.DateTimeField(allow_null=True)
    run_url = serializers.CharField()


class BisectionSerializer(serializers.Serializer):
    state = serializers.CharField(help_text="empty (not asked), running, found, inconclusive, capped, failed")
    note = serializers.CharField()
    culprit = serializers.CharField(help_text="The one commit it ended at")
    backend = serializers.CharField()
    steps = StepSerializer(many=True)


class BreakSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=Break.State.values)
    upstream_repo = serializers.CharField()
    good_sha = serializers.CharField(help_text="N−1: the previous baseline run's commit, where the tests passed")
    bad_sha = serializers.CharField(help_text="N: the baseline run's commit, where they newly fail")
    opened_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    closed_note = serializers.CharField(help_text="The run that passed the tests again")
    commits = serializers.IntegerField(help_text="Upstream commits in (good_sha, bad_sha]")
    suspects_at = serializers.DateTimeField(allow_null=True, help_text="When the suspects were ranked")
    runs = BreakRunSerializer(many=True)
    tests = BreakTestSerializer(many=True)
    suspects = SuspectSerializer(many=True)
    bisection = BisectionSerializer()


class BreaksView(APIView):
    @extend_schema(
        operation_id="oot_backend_breaks",
        summary="A backend's breaks: tests newly failing on a baseline run, with ranked suspect upstream PRs",
        parameters=[OpenApiParameter("state", str, enum=list(Break.State.values))],
        responses=BreakSerializer(many=True),
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        info = backend_or_404(org, repo)
        state = request.query_params.get("state", "")
        if state and state not in Break.State.values:
            raise ParseError(f"state must be one of {', '.join(Break.State.values)}.")
        return Response(plain(queries.breaks(backend_id=info.id, state=state)))
