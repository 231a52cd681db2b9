"""The write endpoints downstream CI and the reference relay call: POST /github/callback and POST /api/crcr/results.

The callback's body is exactly what the public `cross-repo-ci-relay-callback` action sends (DESIGN §4), with the
job's GitHub Actions OIDC token; the ingest's is the ``{trusted, untrusted}`` body the reference relay forwards to
its HUD, with the shared bot token. Both read their body through :func:`request_body` (size cap, JSON, refusals as
``{"detail": ...}``), validate it with a nested InputSerializer and hand it to one service in
relay.endpoints.job_reports. Callback checks run cheapest and most trusted first: size, token, allowlist, rate limit,
then the body; every refused callback is counted for the HUD (CallbackRejection).
"""

import hmac
import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ootci import levels
from ootci.http.api_errors import RefusalSerializer, validation_detail
from ootci.levels import Level
from ootci.models import Backend, Event, JobResult
from relay.endpoints import checked, job_reports, oidc, ratelimit
from relay.reliability import journal

logger = logging.getLogger(__name__)

CALLBACK_MAX_BYTES = 2 * 1024 * 1024
INGEST_MAX_BYTES = 2 * 1024 * 1024  # exactly 2 MiB is accepted, as the reference HUD does
# PositiveIntegerField columns hold at most this on PostgreSQL; larger numbers are bad input, not a crash.
MAX_COUNT = checked.INTEGER_RANGES["PositiveIntegerField"][1]
# Failed-test names and messages are only shown: NUL characters and lone surrogates there are stripped, not refused.
DISPLAY_ONLY = ("workflow.test_results.failed_tests",)
# The conclusions GitHub accepts for a check run.
CONCLUSIONS = ["success", "failure", "cancelled", "timed_out", "skipped", "neutral", "action_required", "stale"]
STORE_RETRY_SECONDS = 5
BACKEND_FIELDS = ["id", "repo", "level", "device", "enabled"]
BACKEND_BY_REPO = f"SELECT {', '.join(BACKEND_FIELDS)} FROM ootci_backend WHERE lower(repo) = lower(%s)"


class Refused(exceptions.APIException):
    """Any refusal: DRF renders it as ``{"detail": ...}`` with Retry-After / WWW-Authenticate when set."""

    def __init__(self, status_code: int, detail: str, *, wait: int | None = None, auth_header: str | None = None):
        super().__init__(checked.display_text(detail))  # a detail may quote the sender's text: keep it encodable
        self.status_code = status_code
        self.wait = wait
        self.auth_header = auth_header


def body_size_check(request: Request, *, limit: int, too_large: str) -> None:
    """Refuse a body over ``limit`` bytes (413, ``too_large`` formatted with length and limit) before it is read."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not (length.isascii() and length.isdigit()):
        raise Refused(400, "Content-Length is not a number.")
    if int(length) > limit:
        raise Refused(413, too_large.format(length=int(length), limit=limit))


def body_json(request: Request, *, display_only: tuple[str, ...] = ()) -> Any:
    """The parsed and checked JSON body (``relay.endpoints.checked.json_document``: no NaN, no deep nesting, no text
    PostgreSQL cannot store except in the ``display_only`` fields, where it is stripped), or a 400 that says why."""
    try:
        return checked.json_document(request.body, display_only=display_only)
    except checked.Unchecked as e:
        raise Refused(e.status, e.detail) from e


class CallbackApi(APIView):
    authentication_classes: list = []  # the OIDC token is checked in post(), in the order above
    permission_classes: list = []
    parser_classes: list = []  # the raw body is size-checked before it is parsed

    # Component names of their own in the OpenAPI schema: the HUD ingest has serializers of the same class names.
    @extend_schema_serializer(component_name="CallbackReport")
    class InputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="CallbackWorkflow")
        class WorkflowSerializer(serializers.Serializer):
            @extend_schema_serializer(component_name="CallbackTestResults")
            class TestResultsSerializer(serializers.Serializer):
                passed = serializers.IntegerField(min_value=0, max_value=MAX_COUNT, required=False, allow_null=True)
                failed = serializers.IntegerField(min_value=0, max_value=MAX_COUNT, required=False, allow_null=True)
                skipped = serializers.IntegerField(min_value=0, max_value=MAX_COUNT, required=False, allow_null=True)
                failed_tests = serializers.ListField(child=serializers.JSONField(), required=False, allow_null=True)

            schema_version = serializers.CharField(required=False, allow_null=True, allow_blank=True)
            status = serializers.ChoiceField(choices=[s.value for s in JobResult.Status])
            conclusion = serializers.ChoiceField(choices=CONCLUSIONS, required=False, allow_null=True, allow_blank=True)
            name = serializers.CharField(max_length=checked.max_length(JobResult, "workflow_name"))
            url = serializers.CharField(required=False, allow_null=True, allow_blank=True)
            # Not always numeric: other CI systems (Buildkite) use UUIDs.
            run_id = serializers.CharField(max_length=checked.max_length(JobResult, "run_id"))
            run_attempt = serializers.IntegerField(min_value=1, max_value=MAX_COUNT, required=False, allow_null=True)
            job_name = serializers.CharField(
                max_length=checked.max_length(JobResult, "job_name"), required=False, allow_null=True, allow_blank=True
            )
            check_run_id = serializers.CharField(
                max_length=checked.max_length(JobResult, "check_run_id"),
                required=False,
                allow_null=True,
                allow_blank=True,
            )
            # Downstream's own clock, not used for timings: the relay times transitions itself.
            started_at = serializers.CharField(required=False, allow_null=True, allow_blank=True)
            completed_at = serializers.CharField(required=False, allow_null=True, allow_blank=True)
            test_results = TestResultsSerializer(required=False, allow_null=True)
            artifact_url = serializers.CharField(required=False, allow_null=True, allow_blank=True)

            def validate(self, attrs):
                if attrs["status"] == JobResult.Status.COMPLETED and not attrs.get("conclusion"):
                    raise serializers.ValidationError({"conclusion": "A completed callback needs a conclusion."})
                return attrs

        event_type = serializers.CharField(
            max_length=checked.max_length(JobResult, "event_type"), required=False, allow_blank=True, default=""
        )
        delivery_id = serializers.CharField(max_length=checked.max_length(JobResult, "delivery_id"))
        callback_token = serializers.CharField(required=False, allow_null=True, allow_blank=True)
        workflow = WorkflowSerializer()
        # The echoed upstream payload is untrusted and not read: PR and SHA come from our Delivery.

    @extend_schema(
        operation_id="github_callback",
        summary="Report a downstream job's progress (the cross-repo-ci-relay-callback action's body)",
        description="Authorization: Bearer <GitHub Actions OIDC token>; its `repository` claim is the reporter. "
        "The body is the dispatch's client_payload echoed back, plus `workflow`.",
        request={"application/json": InputSerializer},
        responses={
            200: inline_serializer(
                "CallbackAccepted",
                {
                    "ok": serializers.BooleanField(),
                    "status": serializers.CharField(),
                    "duplicate": serializers.BooleanField(),
                },
            ),
            400: OpenApiResponse(RefusalSerializer, "The body is not JSON or not a valid report."),
            401: OpenApiResponse(RefusalSerializer, "The OIDC token is missing or not valid."),
            403: OpenApiResponse(
                RefusalSerializer, "The repository is not allowed to report, or not on this delivery."
            ),
            409: OpenApiResponse(RefusalSerializer, "The report does not follow the job's state machine."),
            413: OpenApiResponse(RefusalSerializer, "The body is over 2 MB."),
            429: OpenApiResponse(RefusalSerializer, "The repository's rate limit is used up: see Retry-After."),
            503: OpenApiResponse(RefusalSerializer, "The OIDC keys cannot be fetched now: see Retry-After."),
        },
    )
    def post(self, request: Request) -> Response:
        self.repo = ""
        body_size_check(
            request,
            limit=CALLBACK_MAX_BYTES,
            too_large="The body is {length} bytes; callbacks are limited to {limit} bytes (2 MB).",
        )
        replayed = journal.replayed_at(request)
        self.repo = _verified_repo(request, at=replayed)
        self.rate_counted = replayed is not None  # a replay was counted when it first came
        try:
            return self._apply(request)
        except journal.DATABASE_DOWN:
            # A verified caller: journal the report, to be replayed with every check once the database is back.
            if not self.rate_counted:
                _rate_limit(self.repo)
            if not journal.journal_taken(kind="callback", request=request, body=request.body):
                raise
            return Response(journal.journaled_answer(), status=202)

    def _apply(self, request: Request) -> Response:
        backend = _reporting_backend(self.repo)
        if not self.rate_counted:
            self.rate_counted = True
            _rate_limit(self.repo)
        serializer = self.InputSerializer(data=body_json(request, display_only=DISPLAY_ONLY))
        if not serializer.is_valid():
            raise Refused(400, validation_detail(serializer.errors))
        data = serializer.validated_data
        try:
            outcome = job_reports.callback_accept(
                backend=backend,
                event_type=data["event_type"],
                delivery_id=data["delivery_id"],
                workflow=data["workflow"],
                callback_token=data.get("callback_token") or "",
            )
        except job_reports.CallbackRefused as e:
            raise Refused(e.status_code, e.detail) from e
        return Response({"ok": True, "status": outcome.status, "duplicate": not outcome.changed})

    def finalize_response(self, request, response, *args, **kwargs):
        if request.method == "POST" and response.status_code >= 400:
            detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
            try:
                job_reports.callback_rejection_record(
                    repo=getattr(self, "repo", ""),
                    status_code=response.status_code,
                    detail=checked.display_text(str(detail)),  # the HUD shows it; PostgreSQL cannot store a NUL
                )
            except journal.DATABASE_DOWN as e:  # the refusal stands; only its count for the HUD is lost
                logger.warning("callback refusal not counted, the database is unavailable: %s", e)
        return super().finalize_response(request, response, *args, **kwargs)


def _verified_repo(request: Request, *, at: datetime | None = None) -> str:
    try:
        return oidc.oidc_repository_verify(authorization=request.headers.get("Authorization", ""), at=at)
    except oidc.OidcUnavailable as e:
        raise Refused(503, e.detail, wait=STORE_RETRY_SECONDS) from e
    except oidc.OidcError as e:
        raise Refused(401, e.detail, auth_header='Bearer realm="ootci"') from e


def _reporting_backend(repo: str) -> Backend:
    # Backend.objects.filter(repo__iexact=repo).first(), written out: it is on every callback, and the ORM takes
    # twice as long to compile it as PostgreSQL to run it. lower() is what the unique index on the repo is built on.
    with connection.cursor() as cursor:
        cursor.execute(BACKEND_BY_REPO, [repo])
        row = cursor.fetchone()
    backend = Backend.from_db(connection.alias, BACKEND_FIELDS, row) if row else None  # the rest of it deferred
    if backend is None:
        raise Refused(403, f"{repo} is not in the OOT CI allowlist.")
    if not backend.enabled:
        raise Refused(403, f"{repo} is disabled in the OOT CI allowlist.")
    if not levels.policy(backend.level).display_on_hud:
        raise Refused(403, f"{repo} is at {backend.level} (dispatch only): callbacks are accepted from {Level.L2} up.")
    return backend


def _rate_limit(repo: str) -> None:
    limit = settings.CALLBACK_RATE_LIMIT_PER_MIN
    decision = ratelimit.rate_limit_hit(key=f"callback:{repo.lower()}", limit=limit)
    if not decision.allowed:
        raise Refused(
            429,
            f"Rate limit exceeded for {repo}: {limit} callbacks per minute; retry in {decision.retry_after} s.",
            wait=decision.retry_after,
        )


def _column(name: str) -> int:
    return checked.max_length(JobResult, name)


def _text(max_length: int | None = None) -> serializers.CharField:
    return serializers.CharField(max_length=max_length, required=False, allow_null=True, allow_blank=True)


def _count() -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=MAX_COUNT, required=False, allow_null=True)


def _choice(choices: list[str]) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=choices, required=False, allow_null=True, allow_blank=True)


class IngestApi(APIView):
    authentication_classes: list = []  # the shared bot token is checked in post()
    permission_classes: list = []
    parser_classes: list = []  # the raw body is size-checked before it is parsed

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
