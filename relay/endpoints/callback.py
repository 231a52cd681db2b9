"""POST /github/callback: the job reports of downstream CI (the CRCR ingest is ``relay.endpoints.ingest``).

The callback's body is exactly what the public `cross-repo-ci-relay-callback` action sends (DESIGN §4), with the
job's GitHub Actions OIDC token; the ingest's is the ``{trusted, untrusted}`` body the reference relay forwards to
its HUD, with the shared bot token. Both read their body through :func:`request_body` (size cap, JSON, refusals as
``{"detail": ...}``), validate it as a nested InputSerializer says and hand it to one service in
relay.endpoints.job_reports. The callback's serializer is its schema; its body is checked by
relay.endpoints.callback_body, which answers the same without building a serializer per request. Callback checks
refuse cheapest and most trusted first: size, token, allowlist, rate limit, then the body (a body up to
EARLY_BODY_BYTES is checked before the allowlist is read, so that one statement reads all a callback needs, but
refused only after); every refused callback is counted for the HUD (CallbackRejection).
"""

import logging

from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ootci import environment
from ootci.http.api_errors import RefusalSerializer
from ootci.models import JobResult
from relay.endpoints import checked, job_reports
from relay.endpoints.callback_body import CONCLUSIONS, callback_body_checked
from relay.endpoints.requests import (
    MAX_COUNT,
    Refused,
    WriteApi,
    backend_allowed,
    body_json,
    body_size_check,
    rate_limit,
    reporting_backend,
    verified_repo,
)
from relay.reliability import journal

logger = logging.getLogger(__name__)

CALLBACK_MAX_BYTES = 2 * 1024 * 1024
# A body up to this size is checked before the allowlist is read (a usual callback is 1-3 KB; checking 64 KB costs
# about what the allowlist's statement does): one statement then reads what the callback needs.
EARLY_BODY_BYTES = 64 * 1024
# Failed-test names and messages are only shown: NUL characters and lone surrogates there are stripped, not refused.
DISPLAY_ONLY = ("workflow.test_results.failed_tests",)


@extend_schema_serializer(component_name="CallbackEnvironment")
class EnvironmentDoc(serializers.Serializer):
    """What the schema shows of ``environment``; the values are checked by ``ootci.environment``."""

    device = serializers.CharField(max_length=environment.TEXT_KEYS["device"], required=False)
    device_count = serializers.IntegerField(min_value=0, max_value=environment.DEVICE_COUNT_MAX, required=False)
    driver = serializers.CharField(max_length=environment.TEXT_KEYS["driver"], required=False)
    sdk = serializers.CharField(max_length=environment.TEXT_KEYS["sdk"], required=False)
    torch_version = serializers.CharField(max_length=environment.TEXT_KEYS["torch_version"], required=False)
    os = serializers.CharField(max_length=environment.TEXT_KEYS["os"], required=False)
    image_digest = serializers.CharField(max_length=environment.TEXT_KEYS["image_digest"], required=False)
    runner = serializers.CharField(max_length=environment.TEXT_KEYS["runner"], required=False)
    runner_labels = serializers.ListField(
        child=serializers.CharField(max_length=environment.LABEL_CHARS),
        max_length=environment.LABELS_MAX,
        required=False,
    )


@extend_schema_field(EnvironmentDoc)
class EnvironmentField(serializers.JSONField):
    """Where the job ran (optional, never used for routing); other keys are kept up to a size cap."""


class CallbackApi(WriteApi):
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
        environment = EnvironmentField(required=False, allow_null=True)
        # The echoed upstream payload is untrusted and not read: PR and SHA come from our Delivery.

        def validate(self, attrs):
            try:
                attrs["environment"] = environment.environment_checked(attrs.get("environment"))
            except environment.EnvironmentProblem as e:
                raise serializers.ValidationError(e.detail) from e
            return attrs

    @extend_schema(
        operation_id="github_callback",
        summary="Report a downstream job's progress (the cross-repo-ci-relay-callback action's body)",
        description="Authorization: Bearer <GitHub Actions or Buildkite OIDC token>: a GitHub Actions token's "
        "`repository` claim is the reporter; a Buildkite token reports as the backend its pipeline is mapped to. "
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
                RefusalSerializer,
                "The repository is not allowed to report, or not on this delivery; or the Buildkite pipeline is not "
                "mapped to a backend, or its build lacks the mapping's required claims.",
            ),
            409: OpenApiResponse(RefusalSerializer, "The report does not follow the job's state machine."),
            422: OpenApiResponse(
                RefusalSerializer, "A nightly/periodic report names an upstream SHA that is not a commit there."
            ),
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
        try:
            self.repo = verified_repo(request, at=replayed)
        except Refused as e:  # counted for the backend a Buildkite pipeline would have reported as, when mapped
            self.repo = e.repo
            raise
        self.rate_counted = replayed is not None  # a replay was counted when it first came
        try:
            return self._apply(request)
        except journal.DATABASE_DOWN:
            # A verified caller: journal the report, to be replayed with every check once the database is back.
            if not self.rate_counted:
                rate_limit(self.repo)
            if not journal.journal_taken(kind="callback", request=request, body=request.body):
                raise
            return Response(journal.journaled_answer(), status=202)

    def _apply(self, request: Request) -> Response:
        # A usual body is checked before the allowlist is read, so that one statement reads the caller's backend, our
        # dispatch and the job attempt (job_reports.callback_known); its refusal still comes after the allowlist's and
        # the rate limit's. A large one is read only for a caller that may report, as before.
        small = int(request.META.get("CONTENT_LENGTH") or 0) <= EARLY_BODY_BYTES
        data, problem = self._body(request) if small else (None, None)
        known = data and job_reports.callback_known(
            repo=self.repo, event_type=data["event_type"], delivery_id=data["delivery_id"], workflow=data["workflow"]
        )
        backend = backend_allowed(self.repo, known.backend) if known else reporting_backend(self.repo)
        if not self.rate_counted:
            self.rate_counted = True
            rate_limit(self.repo)
        if not small:
            data, problem = self._body(request)
        if problem is not None:
            raise problem
        try:
            outcome = job_reports.callback_accept(
                backend=backend,
                event_type=data["event_type"],
                delivery_id=data["delivery_id"],
                workflow=data["workflow"],
                callback_token=data.get("callback_token") or "",
                environment=data["environment"],
                known=known,
            )
        except job_reports.CallbackRefused as e:
            raise Refused(e.status_code, e.detail) from e
        return Response({"ok": True, "status": outcome.status, "duplicate": not outcome.changed})

    @staticmethod
    def _body(request: Request) -> tuple[dict | None, Refused | None]:
        """The checked body, or why it is refused (400, as InputSerializer would, without building it:
        relay.endpoints.callback_body)."""
        try:
            return callback_body_checked(body_json(request, display_only=DISPLAY_ONLY)), None
        except ValueError as e:
            return None, Refused(400, str(e))
        except Refused as e:
            return None, e

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
