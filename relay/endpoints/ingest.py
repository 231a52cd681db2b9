"""POST /api/crcr/results: the ``{trusted, untrusted}`` body the reference relay forwards to its HUD, with the shared
bot token (``x-hud-internal-bot``), so that an existing relay deployment can use our HUD (DESIGN §4)."""

import hmac
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ootci.http.api_errors import RefusalSerializer, validation_detail
from ootci.levels import Level
from ootci.models import Backend, Event, JobResult
from relay.endpoints import checked, job_reports
from relay.endpoints.requests import MAX_COUNT, Refused, WriteApi, body_json, body_size_check

INGEST_MAX_BYTES = 2 * 1024 * 1024  # exactly 2 MiB is accepted, as the reference HUD does


def _column(name: str) -> int:
    return checked.max_length(JobResult, name)


def _text(max_length: int | None = None) -> serializers.CharField:
    return serializers.CharField(max_length=max_length, required=False, allow_null=True, allow_blank=True)


def _count() -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=MAX_COUNT, required=False, allow_null=True)


def _choice(choices: list[str]) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=choices, required=False, allow_null=True, allow_blank=True)


class IngestApi(WriteApi):
    # Component names of their own in the OpenAPI schema: the callback has serializers of the same class names.
    @extend_schema_serializer(component_name="CrcrResult")
    class InputSerializer(serializers.Serializer):
        class TrustedSerializer(serializers.Serializer):
            class MetricsSerializer(serializers.Serializer):
                queue_time = serializers.FloatField(min_value=0, required=False, allow_null=True)
                execution_time = serializers.FloatField(min_value=0, required=False, allow_null=True)

            verified_repo = serializers.CharField(max_length=checked.max_length(Backend, "repo"))
            downstream_repo_level = _choice(Level.values)
            ci_metrics = MetricsSerializer(required=False, allow_null=True)

        class UntrustedSerializer(serializers.Serializer):
            class CallbackSerializer(serializers.Serializer):
                class PayloadSerializer(serializers.Serializer):
                    # Only what is read of the echoed upstream webhook; the rest is ignored.
                    class PullRequestSerializer(serializers.Serializer):
                        class HeadSerializer(serializers.Serializer):
                            sha = _text(_column("head_sha"))

                        number = _count()
                        head = HeadSerializer(required=False, allow_null=True)

                    class RepositorySerializer(serializers.Serializer):
                        full_name = _text(_column("upstream_repo"))

                    pull_request = PullRequestSerializer(required=False, allow_null=True)
                    repository = RepositorySerializer(required=False, allow_null=True)
                    head_sha = _text(_column("head_sha"))

                @extend_schema_serializer(component_name="CrcrWorkflow")
                class WorkflowSerializer(serializers.Serializer):
                    @extend_schema_serializer(component_name="CrcrTestResults")
                    class TestResultsSerializer(serializers.Serializer):
                        passed, failed, skipped = _count(), _count(), _count()

                    status = serializers.ChoiceField(choices=JobResult.Status.values)
                    conclusion = _text(_column("conclusion"))
                    name = serializers.CharField(max_length=_column("workflow_name"))
                    url = _text()
                    job_name = serializers.CharField(max_length=_column("job_name"))
                    check_run_id = serializers.CharField(max_length=_column("check_run_id"))
                    run_id = _text(_column("run_id"))
                    # The reference HUD coerces: anything that is not a positive number counts as attempt 1.
                    run_attempt = serializers.JSONField(required=False, allow_null=True)
                    started_at = serializers.DateTimeField(required=False, allow_null=True)
                    completed_at = serializers.DateTimeField(required=False, allow_null=True)
                    test_results = TestResultsSerializer(required=False, allow_null=True)
                    artifact_url = _text()

                event_type = _choice(Event.values)
                delivery_id = serializers.CharField(max_length=_column("delivery_id"))
                payload = PayloadSerializer(required=False, allow_null=True)
                workflow = WorkflowSerializer()

            callback_payload = CallbackSerializer()

        trusted = TrustedSerializer()
        untrusted = UntrustedSerializer()

    @extend_schema(
        operation_id="crcr_results",
        summary="Store a job result as the reference relay forwards it to its HUD",
        parameters=[
            OpenApiParameter(
                "x-hud-internal-bot",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=True,
                description="HUD_INGEST_TOKEN",
            )
        ],
        request={"application/json": InputSerializer},
        responses={
            200: inline_serializer(
                "CrcrResultStored",
                {
                    "ok": serializers.BooleanField(),
                    "status": serializers.CharField(),
                    "dynamoKey": serializers.CharField(),
                },
            ),
            400: OpenApiResponse(
                RefusalSerializer, "The body is not JSON, not a valid result, or from an unknown repo."
            ),
            401: OpenApiResponse(RefusalSerializer, "The x-hud-internal-bot token is missing or wrong."),
            404: OpenApiResponse(RefusalSerializer, "Ingest is off: HUD_INGEST_TOKEN is not set."),
            413: OpenApiResponse(RefusalSerializer, "The body is over 2 MB."),
        },
    )
    def post(self, request: Request) -> Response:
        _ingest_token_check(request)
        body_size_check(request, limit=INGEST_MAX_BYTES, too_large="Payload exceeds 2MB limit.")
        body = body_json(request)
        # The reference HUD also takes the body as a JSON string holding the JSON object.
        if isinstance(body, str):
            body = body_json_text(body)
        serializer = self.InputSerializer(data=body)
        if not serializer.is_valid():
            raise Refused(400, validation_detail(serializer.errors))
        trusted = serializer.validated_data["trusted"]
        report = serializer.validated_data["untrusted"]["callback_payload"]
        try:
            job = job_reports.crcr_result_apply(trusted=trusted, report=report)
        except job_reports.CallbackRefused as e:
            raise Refused(e.status_code, e.detail) from e
        workflow = report["workflow"]
        names = (
            trusted["verified_repo"],
            job.delivery_id,
            workflow["name"],
            workflow["job_name"],
            workflow["check_run_id"],
        )
        return Response({"ok": True, "status": workflow["status"], "dynamoKey": "/".join(names)})


def _ingest_token_check(request: Request) -> None:
    expected = settings.HUD_INGEST_TOKEN
    if not expected:
        raise Refused(404, "Result ingest is off: HUD_INGEST_TOKEN is not set.")
    given = request.headers.get("x-hud-internal-bot", "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Refused(401, "Missing or wrong x-hud-internal-bot token.")


def body_json_text(text: str) -> Any:
    """A body that is a JSON string holding the JSON document, as the reference HUD also takes."""
    try:
        return checked.json_document(text)
    except checked.Unchecked as e:
        raise Refused(e.status, e.detail) from e
