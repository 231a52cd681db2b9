"""GitHub webhook endpoint: verify, deduplicate, persist, enqueue on commit, answer without waiting for GitHub."""

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ootci.models import Delivery
from relay.endpoints import checked, intake
from relay.github import reruns
from relay.reliability import journal

# Events about the App itself: answered so GitHub shows a green delivery, nothing stored.
ACKNOWLEDGED_EVENTS = frozenset({"ping", "installation", "installation_repositories"})


@csrf_exempt
def webhook(request):
    if request.method != "POST":
        return _detail("Only POST is allowed.", 405)
    try:
        body = checked.request_body(request, max_bytes=checked.WEBHOOK_MAX_BYTES)
        if problem := _signature_problem(request, body):
            return problem
        payload = checked.json_document(body)
    except checked.Unchecked as e:
        return _detail(e.detail, e.status)
    event = request.headers.get("X-GitHub-Event", "")
    if not isinstance(payload, dict):
        return _detail("The body must be a JSON object.", 400)
    if event in ACKNOWLEDGED_EVENTS:
        return JsonResponse({"ok": True, "event": event})
    if problem := _shape_problem(payload, COMMON_SHAPE):
        return _detail(problem, 400)
    handler = HANDLERS.get((event, payload.get("action"))) or HANDLERS.get((event, None))
    if handler is None or not _from_upstream(payload):
        return JsonResponse({"ignored": True})
    if problem := _shape_problem(payload, SHAPES.get(event, {})):
        return _detail(problem, 400)
    delivery_id = request.headers.get("X-GitHub-Delivery", "").strip()
    if not delivery_id or len(delivery_id) > 100:
        return _detail("X-GitHub-Delivery must be a delivery id of at most 100 characters.", 400)
    if problem := checked.webhook_problem(event=event, payload=payload, delivery_id=delivery_id):
        return _detail(problem, 400)
    try:
        if Delivery.objects.filter(delivery_id=delivery_id).exists():
            return JsonResponse({"ok": True, "duplicate": True, "delivery_id": delivery_id})
        return handler(delivery_id=delivery_id, event=event, payload=payload, body=body)
    except journal.DATABASE_DOWN:
        # Signed, so worth keeping: replayed with every check once the database is back (relay.reliability.journal).
        if not journal.journal_taken(kind="webhook", request=request, body=body):
            raise
        return JsonResponse({**journal.journaled_answer(), "delivery_id": delivery_id}, status=202)


def _signature_problem(request, body: bytes) -> JsonResponse | None:
    """A 4xx when the body is not signed with our webhook secret; checked before anything is read or stored."""
    signature = request.headers.get("X-Hub-Signature-256", "")
    if not signature:
        return _detail("Missing X-Hub-Signature-256 header.", 400)
    secret = settings.GITHUB_WEBHOOK_SECRET.encode()
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    # Without a configured secret nothing can be verified: fail closed. (compare_digest takes ASCII text only.)
    if not secret or not signature.isascii() or not hmac.compare_digest(expected, signature):
        return _detail("Bad signature.", 401)
    return None


def _shape_problem(payload: dict[str, Any], shape: dict[str, tuple]) -> str | None:
    """What is wrong with the fields of ``payload`` the handlers read, or None. ``shape`` maps a dotted path
    (``[]`` for every item of a list) to the JSON types allowed there; ``None`` among them allows null or absent.
    """
    for path, allowed in shape.items():
        for where, value in _values_at(payload, path.split(".")):
            if value is None and None in allowed:
                continue
            # JSON true/false are not numbers here, though bool subclasses int in Python.
            if not isinstance(value, tuple(t for t in allowed if t is not None)) or (
                isinstance(value, bool) and bool not in allowed
            ):
                names = " or ".join(JSON_NAMES[t] for t in allowed)
                what = "is missing or null" if value is None else f"must be {names}"
                return f"The payload's {where} {what}."
    return None


def _values_at(node: Any, steps: list[str], where: str = "") -> list[tuple[str, Any]]:
    """(path, value) of every place ``steps`` reaches in ``node``; stops below a container of the wrong type,
    which its own shape entry reports."""
    if not steps:
        return [(where, node)]
    step, rest = steps[0], steps[1:]
    if step == "[]":
        items = node if isinstance(node, list) else []
        return [found for i, item in enumerate(items) for found in _values_at(item, rest, f"{where}[{i}]")]
    if not isinstance(node, dict):
        return []
    return _values_at(node.get(step), rest, f"{where}.{step}" if where else step)


def _from_upstream(payload: dict[str, Any]) -> bool:
    full_name = (payload.get("repository") or {}).get("full_name") or ""
    return full_name.lower() == settings.UPSTREAM_REPO.lower()


def _detail(message: str, status: int) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def _accepted(result: intake.DeliveryAccepted) -> JsonResponse:
    if result.duplicate:
        return JsonResponse({"ok": True, "duplicate": True, "delivery_id": result.delivery_id})
    body = {"ok": True, "delivery_id": result.delivery_id, "dispatches": result.dispatches}
    return JsonResponse(body, status=202 if result.dispatches else 200)


def _dispatch(**delivery) -> JsonResponse:
    return _accepted(intake.delivery_accept(**delivery, dispatch=True))


def _label(**delivery) -> JsonResponse:
    # Labels are recorded for check-run decisions and never re-run downstream CI; a ciflow/oot/<device> label
    # backfills check runs for jobs that already reported, and removing it stops new ones.
    return _accepted(intake.delivery_accept(**delivery, dispatch=False))


def _rerun(*, delivery_id: str, event: str, payload: dict[str, Any], body: bytes) -> JsonResponse:
    result = reruns.rerun_request_accept(delivery_id=delivery_id, event=event, payload=payload)
    if not result.queued:
        return JsonResponse({"ignored": True, "reason": result.reason})
    return JsonResponse({"ok": True, "delivery_id": delivery_id, "rerun": "queued"}, status=202)


def _push(**delivery) -> JsonResponse:
    if not intake.push_is_relayed(payload=delivery["payload"]):
        return JsonResponse({"ignored": True})
    return _dispatch(**delivery)


JSON_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    bool: "true or false",
    None: "null",
}
OPTIONAL_TEXT = (str, None)
# Checked before routing: the fields that decide the route.
COMMON_SHAPE = {"action": OPTIONAL_TEXT, "repository": (dict, None), "repository.full_name": OPTIONAL_TEXT}
# What the handlers of each routed event read (and dispatch hands on); anything else in a payload passes through.
SHAPES: dict[str, dict[str, tuple]] = {
    "pull_request": {
        "repository.full_name": (str,),
        "pull_request": (dict,),
        "pull_request.number": (int,),
        "pull_request.head": (dict,),
        "pull_request.head.sha": (str,),
        "pull_request.head.ref": (str,),
        "pull_request.title": OPTIONAL_TEXT,
        "pull_request.user": (dict, None),
        "pull_request.user.login": OPTIONAL_TEXT,
        "pull_request.labels": (list, None),
        "pull_request.labels.[]": (dict,),
        "pull_request.labels.[].name": (str,),
        "pull_request.state": OPTIONAL_TEXT,
        "pull_request.merged": (bool, None),
        "pull_request.html_url": OPTIONAL_TEXT,
        "pull_request.created_at": OPTIONAL_TEXT,
        "pull_request.updated_at": OPTIONAL_TEXT,
        "label": (dict, None),
        "label.name": OPTIONAL_TEXT,
    },
    "push": {
        "repository.full_name": (str,),
        "repository.default_branch": OPTIONAL_TEXT,
        "ref": (str,),
        "after": OPTIONAL_TEXT,
        "deleted": (bool, None),
        "commits": (list, None),
    },
    "check_run": {
        "repository.full_name": (str,),
        "check_run": (dict,),
        "check_run.head_sha": OPTIONAL_TEXT,
        "sender": (dict, None),
        "sender.login": OPTIONAL_TEXT,
    },
    "check_suite": {
        "repository.full_name": (str,),
        "check_suite": (dict,),
        "check_suite.head_sha": OPTIONAL_TEXT,
        "sender": (dict, None),
        "sender.login": OPTIONAL_TEXT,
    },
}

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
