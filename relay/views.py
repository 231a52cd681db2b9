"""GitHub webhook endpoint: verify, deduplicate, persist, enqueue on commit, answer without waiting for GitHub."""

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ootci.models import Delivery
from relay import services

# Events about the App itself: answered so GitHub shows a green delivery, nothing stored.
ACKNOWLEDGED_EVENTS = frozenset({"ping", "installation", "installation_repositories"})


@csrf_exempt
def webhook(request):
    if request.method != "POST":
        return _detail("Only POST is allowed.", 405)
    if problem := _signature_problem(request):
        return problem
    event = request.headers.get("X-GitHub-Event", "")
    try:
        payload = json.loads(request.body)
    except ValueError:
        return _detail("The body is not valid JSON.", 400)
    if not isinstance(payload, dict):
        return _detail("The body must be a JSON object.", 400)
    if event in ACKNOWLEDGED_EVENTS:
        return JsonResponse({"ok": True, "event": event})
    handler = HANDLERS.get((event, payload.get("action"))) or HANDLERS.get((event, None))
    if handler is None or not _from_upstream(payload):
        return JsonResponse({"ignored": True})
    delivery_id = request.headers.get("X-GitHub-Delivery", "").strip()
    if not delivery_id or len(delivery_id) > 100:
        return _detail("X-GitHub-Delivery must be a delivery id of at most 100 characters.", 400)
    if Delivery.objects.filter(delivery_id=delivery_id).exists():
        return JsonResponse({"ok": True, "duplicate": True, "delivery_id": delivery_id})
    return handler(delivery_id=delivery_id, event=event, payload=payload, body=request.body)


def _signature_problem(request) -> JsonResponse | None:
    """A 4xx when the body is not signed with our webhook secret; checked before anything is read or stored."""
    signature = request.headers.get("X-Hub-Signature-256", "")
    if not signature:
        return _detail("Missing X-Hub-Signature-256 header.", 400)
    secret = settings.GITHUB_WEBHOOK_SECRET.encode()
    expected = "sha256=" + hmac.new(secret, request.body, hashlib.sha256).hexdigest()
    # Without a configured secret nothing can be verified: fail closed.
    if not secret or not hmac.compare_digest(expected, signature):
        return _detail("Bad signature.", 401)
    return None


def _from_upstream(payload: dict[str, Any]) -> bool:
    full_name = (payload.get("repository") or {}).get("full_name") or ""
    return full_name.lower() == settings.UPSTREAM_REPO.lower()


def _detail(message: str, status: int) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def _accepted(result: services.DeliveryAccepted) -> JsonResponse:
    if result.duplicate:
        return JsonResponse({"ok": True, "duplicate": True, "delivery_id": result.delivery_id})
    body = {"ok": True, "delivery_id": result.delivery_id, "dispatches": result.dispatches}
    return JsonResponse(body, status=202 if result.dispatches else 200)


def _dispatch(**delivery) -> JsonResponse:
    return _accepted(services.delivery_accept(**delivery, dispatch=True))


def _label(**delivery) -> JsonResponse:
    # Labels are recorded for check-run decisions and never re-run downstream CI; a ciflow/oot/<device> label
    # backfills check runs for jobs that already reported, and removing it stops new ones.
    result = services.delivery_accept(**delivery, dispatch=False)
    if not result.duplicate:
        services.pull_request_labels_apply(payload=delivery["payload"])
    return _accepted(result)


def _rerun(*, delivery_id: str, event: str, payload: dict[str, Any], body: bytes) -> JsonResponse:
    result = services.rerun_request_accept(delivery_id=delivery_id, event=event, payload=payload)
    if not result.queued:
        return JsonResponse({"ignored": True, "reason": result.reason})
    return JsonResponse({"ok": True, "delivery_id": delivery_id, "rerun": "queued"}, status=202)


def _push(**delivery) -> JsonResponse:
    if not services.push_is_relayed(payload=delivery["payload"]):
        return JsonResponse({"ignored": True})
    return _dispatch(**delivery)


# (event, action) → handler; (event, None) matches any action of an event without its own entry.
HANDLERS: dict[tuple[str, str | None], Callable[..., JsonResponse]] = {
    ("pull_request", "opened"): _dispatch,
    ("pull_request", "reopened"): _dispatch,
    ("pull_request", "synchronize"): _dispatch,
    # Closed is relayed so downstream can cancel; recording it stops check runs for the PR.
    ("pull_request", "closed"): _dispatch,
    ("pull_request", "labeled"): _label,
    ("pull_request", "unlabeled"): _label,
    # The "Re-run" buttons of our check runs on the PR: the failed jobs of those downstream runs run again.
    ("check_run", "rerequested"): _rerun,
    ("check_suite", "rerequested"): _rerun,
    ("push", None): _push,
}
