"""POST /github/callback: downstream CI reports a job's progress, authenticated by its GitHub Actions OIDC token.

The body is exactly what the public `cross-repo-ci-relay-callback` action sends (DESIGN §4). Checks run
cheapest and most trusted first: size, token, allowlist, rate limit, then the body. Every refusal is a
JSON ``detail`` and is counted for the HUD (CallbackRejection).
"""

from django.conf import settings
from django.db import connection
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ootci import checked, levels
from ootci.api_errors import validation_detail
from ootci.levels import Level
from ootci.models import Backend, JobResult
from relay import oidc, ratelimit, services

MAX_BODY_BYTES = 2 * 1024 * 1024
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


class CallbackApi(APIView):
    authentication_classes: list = []  # the OIDC token is checked in post(), in the order above
    permission_classes: list = []
    parser_classes: list = []  # the raw body is size-checked before it is parsed

    class InputSerializer(serializers.Serializer):
        class WorkflowSerializer(serializers.Serializer):
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

    def post(self, request: Request) -> Response:
        self.repo = ""
        _size_check(request)
        self.repo = _verified_repo(request)
        backend = _reporting_backend(self.repo)
        _rate_limit(self.repo)
        serializer = self.InputSerializer(data=_json_body(request))
        if not serializer.is_valid():
            raise Refused(400, validation_detail(serializer.errors))
        data = serializer.validated_data
        try:
            outcome = services.callback_accept(
                backend=backend,
                event_type=data["event_type"],
                delivery_id=data["delivery_id"],
                workflow=data["workflow"],
                callback_token=data.get("callback_token") or "",
            )
        except services.CallbackRefused as e:
            raise Refused(e.status_code, e.detail) from e
        return Response({"ok": True, "status": outcome.status, "duplicate": not outcome.changed})

    def finalize_response(self, request, response, *args, **kwargs):
        if request.method == "POST" and response.status_code >= 400:
            detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
            services.callback_rejection_record(
                repo=getattr(self, "repo", ""),
                status_code=response.status_code,
                detail=checked.display_text(str(detail)),  # the HUD shows it; PostgreSQL cannot store a NUL
            )
        return super().finalize_response(request, response, *args, **kwargs)


def _size_check(request: Request) -> None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise Refused(400, "Content-Length is not a number.") from None
    if length > MAX_BODY_BYTES:
        raise Refused(413, f"The body is {length} bytes; callbacks are limited to {MAX_BODY_BYTES} bytes (2 MB).")


def _verified_repo(request: Request) -> str:
    try:
        return oidc.oidc_repository_verify(authorization=request.headers.get("Authorization", ""))
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


def _json_body(request: Request):
    try:
        return checked.json_document(request.body, display_only=DISPLAY_ONLY)
    except checked.Unchecked as e:
        raise Refused(e.status, e.detail) from e
