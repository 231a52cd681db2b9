"""JSON API of the on-call incidents (relay.alerts.incidents): GET /api/oot/incidents/[?state=firing|resolved]
[&kind=stale_results|…] — the newest first, at most LIMIT."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ootci.models import AlertRule, Incident

LIMIT = 200


class IncidentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(source="rule.kind", help_text=", ".join(AlertRule.Kind.values))
    backend = serializers.CharField(source="backend.repo", allow_null=True, default=None)
    state = serializers.CharField(help_text="firing or resolved")
    what = serializers.CharField()
    opened = serializers.DateTimeField(source="opened_at")
    resolved = serializers.DateTimeField(source="resolved_at", allow_null=True)


class IncidentsView(APIView):
    @extend_schema(
        operation_id="oot_incidents",
        responses=IncidentSerializer(many=True),
        summary="On-call incidents, newest first (stale results, baseline breakage, PR failures, relay, gates)",
        parameters=[
            OpenApiParameter("state", str, enum=list(Incident.State.values)),
            OpenApiParameter("kind", str, enum=list(AlertRule.Kind.values)),
        ],
    )
    def get(self, request: Request) -> Response:
        found = Incident.objects.select_related("rule", "backend").order_by("-opened_at", "-pk")
        filters = (("state", Incident.State.values, "state"), ("kind", AlertRule.Kind.values, "rule__kind"))
        for name, choices, field in filters:
            value = request.query_params.get(name)
            if value is None:
                continue
            if value not in choices:
                raise ParseError(f"{name} must be one of {', '.join(choices)}.")
            found = found.filter(**{field: value})
        return Response(IncidentSerializer(found[:LIMIT], many=True).data)
