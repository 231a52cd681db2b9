"""What a production deployment sees: ``check --deploy`` on production settings, and the published OpenAPI schema."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]


def test_check_deploy_on_production_settings_reports_nothing():
    env = {name: value for name, value in os.environ.items() if not name.startswith(("DJANGO_", "Q_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        DJANGO_ALLOWED_HOSTS="oot-ci.example.org",
        DATABASE_URL=os.environ["DATABASE_URL"],  # PostgreSQL, as tests/settings.py defaults it
        # Stores that survive a host (relay/checks.py): an object store for reports and the journal.
        TEST_REPORTS_URL="s3://ootci-reports/reports",
        ARCHIVE_URL="s3://ootci-archive/webhooks",
        REDIS_URL="",
    )
    assert env["DATABASE_URL"].startswith("postgres")

    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    output = check.stdout + check.stderr
    assert check.returncode == 0, output
    assert output.strip() == "System check identified no issues (0 silenced).", output


def schema_of(client, path: str) -> tuple[dict, dict]:
    """The POST operation of ``path`` in /api/schema/, and the schema of its JSON request body (refs resolved)."""
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"][path]["post"]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return operation, schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_the_schema_shows_the_callback_body_and_answers(client):
    operation, body = schema_of(client, "/github/callback")

    assert operation["requestBody"]["required"] is True
    assert {"delivery_id", "workflow"} <= set(body["required"])
    assert {"event_type", "delivery_id", "callback_token", "workflow"} <= set(body["properties"])
    assert set(operation["responses"]) == {"200", "400", "401", "403", "409", "413", "422", "429", "503"}


def test_the_schema_shows_the_ingest_body_and_answers(client):
    operation, body = schema_of(client, "/api/crcr/results")

    assert operation["requestBody"]["required"] is True
    assert set(body["required"]) == {"trusted", "untrusted"}
    assert [p["name"] for p in operation["parameters"]] == ["x-hud-internal-bot"]
    assert set(operation["responses"]) == {"200", "400", "401", "404", "413"}
