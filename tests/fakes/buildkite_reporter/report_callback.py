"""Our stand-in for the reference's CI-neutral callback reporter (report_callback.py of the public
cross-repo-ci-relay-callback action), written to send the same body: the dispatch's client_payload (or, for a
nightly/periodic self-report, one made from the tested SHA) plus ``workflow`` built from the environment, POSTed with
``Authorization: Bearer $OIDC_TOKEN``. A refusal prints the relay's answer to stderr and exits 1.
"""

import json
import os
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def body() -> dict:
    status, delivery_id, event_type = env("STATUS"), env("DELIVERY_ID_OVERRIDE"), env("EVENT_TYPE_OVERRIDE")
    if bool(delivery_id) != bool(event_type):
        sys.exit("DELIVERY_ID_OVERRIDE and EVENT_TYPE_OVERRIDE go together (a nightly/periodic self-report).")
    if status not in ("in_progress", "completed"):
        sys.exit(f"STATUS must be in_progress or completed, not {status!r}.")
    if delivery_id:
        if event_type not in ("nightly", "periodic") or status != "completed":
            sys.exit("A self-report is a completed nightly or periodic run.")
        sent = {
            "event_type": event_type,
            "delivery_id": delivery_id,
            "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": delivery_id},
        }
    else:
        sent = json.loads(os.environ.get("CLIENT_PAYLOAD") or "null")
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    workflow = {
        "schema_version": env("SCHEMA_VERSION", "1"),
        "status": status,
        "conclusion": (env("CONCLUSION") or None) if status == "completed" else None,
        "name": env("WORKFLOW_NAME"),
        "url": env("WORKFLOW_URL"),
        "run_attempt": env("RUN_ATTEMPT"),
        "job_name": env("JOB_NAME"),
        "check_run_id": env("CHECK_RUN_ID") or f"{env('RUN_ID')}-{env('RUN_ATTEMPT')}",
        "run_id": env("RUN_ID"),
        "started_at": now if status == "in_progress" else None,
        "completed_at": now if status == "completed" else None,
    }
    if env("TEST_RESULTS"):
        workflow["test_results"] = json.loads(env("TEST_RESULTS"))
    if env("ARTIFACT_URL"):
        workflow["artifact_url"] = env("ARTIFACT_URL")
    sent["workflow"] = workflow
    return sent


def main() -> int:
    request = urllib.request.Request(
        env("CALLBACK_URL").rstrip("/"),
        data=json.dumps(body()).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {env('OIDC_TOKEN')}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=float(env("MAX_TIME", "10"))) as response:
            print(f"Relay server response HTTP: {response.status}")
            print(response.read().decode(errors="replace"))
    except urllib.error.HTTPError as e:
        print(f"Error: Callback server returned HTTP {e.code}.", file=sys.stderr)
        print(f"Relay server error response body:\n{e.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
