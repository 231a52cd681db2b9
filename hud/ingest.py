"""POST /api/crcr/results: job results as the reference relay forwards them to its HUD (hud-spec §1.2–1.3).

An existing reference relay deployment can point its HUD_API_URL here. The body is ``{trusted, untrusted}``;
it is written into the same JobResult table the callbacks fill, by an upsert that never replaces a known
value with a missing one (the completed report carries ``queue_time: null`` and must not erase the
in_progress report's). The endpoint is off until HUD_INGEST_TOKEN is set.
"""

import hmac
from typing import Any

from django.conf import settings
from django.db import transaction
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ootci import checked
from ootci.api_errors import validation_detail
from ootci.levels import Level
from ootci.models import Backend, Dispatch, Event, JobResult
from ootci.replication import job_results_changed

MAX_BODY_BYTES = 2 * 1024 * 1024  # exactly 2 MiB is accepted, as the reference HUD does
MAX_COUNT = checked.INTEGER_RANGES["PositiveIntegerField"][1]


class Refused(exceptions.APIException):
    def __init__(self, status_code: int, detail: str):
        super().__init__(checked.display_text(detail))  # a detail may quote the sender's text: keep it encodable
        self.status_code = status_code


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

                class WorkflowSerializer(serializers.Serializer):
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

    def post(self, request: Request) -> Response:
        _token_check(request)
        serializer = self.InputSerializer(data=_json_body(request))
        if not serializer.is_valid():
            raise Refused(400, validation_detail(serializer.errors))
        trusted = serializer.validated_data["trusted"]
        report = serializer.validated_data["untrusted"]["callback_payload"]
        job = crcr_result_upsert(trusted=trusted, report=report)
        workflow = report["workflow"]
        names = (job.backend.repo, job.delivery_id, workflow["name"], workflow["job_name"], workflow["check_run_id"])
        return Response({"ok": True, "status": workflow["status"], "dynamoKey": "/".join(names)})


def crcr_result_upsert(*, trusted: dict[str, Any], report: dict[str, Any]) -> JobResult:
    """Create or update the job attempt a forwarded report describes; only the values it knows are written.

    Atomic per attempt (the row is locked or created in one transaction). A completed job is not moved
    back to in_progress by a late or replayed in_progress report.
    """
    backend = Backend.objects.filter(repo__iexact=trusted["verified_repo"]).first()
    if backend is None:
        raise Refused(400, f"{trusted['verified_repo']} is not in the OOT CI allowlist: add it before sending results.")
    workflow = report["workflow"]
    key = {
        "backend": backend,
        "delivery_id": report["delivery_id"],
        "workflow_name": workflow["name"],
        "job_name": workflow["job_name"],
        "run_id": workflow.get("run_id") or "",
        "run_attempt": _attempt(workflow.get("run_attempt")),
    }
    known = _known_fields(trusted, report)
    with transaction.atomic():
        job, created = JobResult.objects.select_for_update().get_or_create(
            **key, defaults={**_creation_defaults(backend, report), **known}
        )
        if not created:
            if job.status == JobResult.Status.COMPLETED and known["status"] == JobResult.Status.IN_PROGRESS:
                known = {k: v for k, v in known.items() if k not in ("status", "conclusion", "completed_at")}
            for name, value in known.items():
                setattr(job, name, value)
            job.save()
    job_results_changed()
    return job


def _known_fields(trusted: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    workflow = report["workflow"]
    payload = report.get("payload") or {}
    pull_request = payload.get("pull_request") or {}
    metrics = trusted.get("ci_metrics") or {}
    fields = {
        "status": workflow["status"],
        "check_run_id": workflow["check_run_id"],
        "level": trusted.get("downstream_repo_level"),
        "event_type": report.get("event_type"),
        "upstream_repo": (payload.get("repository") or {}).get("full_name"),
        "pr_number": pull_request.get("number") or None,
        "head_sha": (pull_request.get("head") or {}).get("sha") or payload.get("head_sha"),
        "queue_time": metrics.get("queue_time"),
        "execution_time": metrics.get("execution_time"),
        "started_at": workflow.get("started_at"),
        "run_url": JobResult.safe_link(workflow.get("url")),
        "artifact_url": JobResult.safe_link(workflow.get("artifact_url")),
    }
    if workflow["status"] == JobResult.Status.COMPLETED:
        results = workflow.get("test_results") or {}
        fields.update(
            conclusion=workflow.get("conclusion"),
            completed_at=workflow.get("completed_at"),
            passed=results.get("passed"),
            failed=results.get("failed"),
            skipped=results.get("skipped"),
        )
    return {name: value for name, value in fields.items() if value is not None and value != ""}


def _creation_defaults(backend: Backend, report: dict[str, Any]) -> dict[str, Any]:
    """What a new row needs when the report leaves it out (the reference HUD's defaults)."""
    delivery_id = report["delivery_id"]
    event_type = report.get("event_type") or Event.PULL_REQUEST
    self_report = event_type in (Event.NIGHTLY, Event.PERIODIC)
    return {
        "event_type": event_type,
        "upstream_repo": settings.UPSTREAM_REPO,
        # Nightly rows name the tested SHA only in delivery_id.
        "head_sha": delivery_id if self_report and len(delivery_id) <= 40 else "",
        "dispatch": None if self_report else _dispatch(backend, delivery_id),
        "level": backend.level,
        "source": JobResult.Source.INGEST,
    }


def _dispatch(backend: Backend, delivery_id: str) -> Dispatch | None:
    """Our own dispatch of this delivery to this backend, if we made one: linked, it is not counted as lost."""
    return Dispatch.objects.filter(backend=backend, delivery__delivery_id=delivery_id).first()


def _attempt(value: Any) -> int:
    try:
        attempt = int(value)
    except (TypeError, ValueError):
        return 1
    return attempt if 1 <= attempt <= MAX_COUNT else 1


def _token_check(request: Request) -> None:
    expected = settings.HUD_INGEST_TOKEN
    if not expected:
        raise Refused(404, "Result ingest is off: HUD_INGEST_TOKEN is not set.")
    given = request.headers.get("x-hud-internal-bot", "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Refused(401, "Missing or wrong x-hud-internal-bot token.")
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit():
        raise Refused(400, "Content-Length is not a number.")
    if int(length) > MAX_BODY_BYTES:
        raise Refused(413, "Payload exceeds 2MB limit.")


def _json_body(request: Request) -> Any:
    try:
        body = checked.json_document(request.body)
        # The reference HUD also takes the body as a JSON string holding the JSON object.
        return checked.json_document(body) if isinstance(body, str) else body
    except checked.Unchecked as e:
        raise Refused(e.status, e.detail) from e
