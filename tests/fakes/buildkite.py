"""A fake Buildkite over real HTTP: its OIDC issuer (a JWK set and tokens shaped like Buildkite's) and the agent API
endpoint that ``buildkite-agent oidc request-token`` calls, so that the fake ``buildkite-agent`` executable
(``tests/fakes/buildkite_agent/buildkite-agent``) mints tokens for the reporter scripts run as subprocesses.

``FakeBuildkite.job(...)`` registers a running job (its build, branch, organization and pipeline); a token request
for it answers a token with Buildkite's default claims (slugs, build, branch, step) plus the optional claims the
request asks for (``--claim organization_id,pipeline_id``), as the real agent API does. ``issuer.token(...)`` mints one
directly, with every claim bendable, like ``FakeOidcIssuer.token``.
"""

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.oidc import AUDIENCE, JWKS_PATH, FakeOidcIssuer, SigningKey

ISSUER = "https://agent.buildkite.com"
AGENT = Path(__file__).parent / "buildkite_agent"  # a folder holding the fake `buildkite-agent`, for PATH
REPORTER = Path(__file__).parent / "buildkite_reporter" / "report_callback_buildkite.sh"
AGENT_TOKEN = "fake-agent-access-token"
# Claims Buildkite adds only when a token request asks for them.
OPTIONAL_CLAIMS = ("organization_id", "pipeline_id", "cluster_id", "queue_id", "queue_key")


@dataclass
class Job:
    """A running Buildkite job: what its tokens claim and what the agent sets in its environment."""

    organization_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    pipeline_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    organization_slug: str = "vllm"
    pipeline_slug: str = "ci"
    branch: str = "main"
    build_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    build_number: int = 4711
    commit: str = "5e4d1f0c9b8a7e6d5c4b3a29181716151413121a"
    step_key: str = "torch-nightly"
    label: str = ":pytorch: torch nightly tests"
    retry_count: int = 0
    job_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def build_url(self) -> str:
        return f"https://buildkite.com/{self.organization_slug}/{self.pipeline_slug}/builds/{self.build_number}"

    def claims(self, requested: tuple[str, ...] = ()) -> dict[str, Any]:
        claims = {
            "sub": f"organization:{self.organization_slug}:pipeline:{self.pipeline_slug}:ref:refs/heads/{self.branch}"
            f":commit:{self.commit}:step:{self.step_key}",
            "organization_slug": self.organization_slug,
            "pipeline_slug": self.pipeline_slug,
            "build_number": self.build_number,
            "build_branch": self.branch,
            "build_tag": "",
            "build_commit": self.commit,
            "build_source": "schedule",
            "step_key": self.step_key,
            "job_id": self.job_id,
            "agent_id": str(uuid.uuid5(uuid.NAMESPACE_URL, self.job_id)),
            "runner_environment": "self-hosted",
        }
        optional = {"organization_id": self.organization_id, "pipeline_id": self.pipeline_id}
        return claims | {name: optional[name] for name in requested if name in optional}

    def environment(self) -> dict[str, str]:
        """What the agent exports to the job's command (the reporter reads these)."""
        return {
            "BUILDKITE": "true",
            "BUILDKITE_JOB_ID": self.job_id,
            "BUILDKITE_BUILD_ID": self.build_id,
            "BUILDKITE_BUILD_NUMBER": str(self.build_number),
            "BUILDKITE_BUILD_URL": self.build_url,
            "BUILDKITE_BRANCH": self.branch,
            "BUILDKITE_COMMIT": self.commit,
            "BUILDKITE_ORGANIZATION_SLUG": self.organization_slug,
            "BUILDKITE_PIPELINE_SLUG": self.pipeline_slug,
            "BUILDKITE_STEP_KEY": self.step_key,
            "BUILDKITE_LABEL": self.label,
            "BUILDKITE_RETRY_COUNT": str(self.retry_count),
        }


class FakeBuildkite(FakeOidcIssuer):
    """Buildkite's issuer (tokens name ``https://agent.buildkite.com`` unless told) and agent API, on one server."""

    def __init__(self):
        super().__init__()
        self.jobs: dict[str, Job] = {}
        self.token_requests: list[dict] = []
        self.agent_key: SigningKey | None = None  # set: the agent API signs with it (a forged or unpublished key)

    @property
    def issuer(self) -> str:
        return ISSUER

    @property
    def jwks_url(self) -> str:
        return self.url + self.prefix + JWKS_PATH

    @property
    def agent_endpoint(self) -> str:
        return self.url + self.prefix + "/v3"

    def job(self, **fields) -> Job:
        job = Job(**fields)
        self.jobs[job.job_id] = job
        return job

    def token(
        self,
        *,
        job: Job | None = None,
        requested: tuple[str, ...] = ("organization_id", "pipeline_id"),
        audience: str = AUDIENCE,
        issuer: str | None = None,
        expires_in: int = 300,
        issued_ago: int = 0,
        key: SigningKey | None = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        drop: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        """A token as Buildkite mints it for ``job`` (a new job of a new pipeline when not given)."""
        identity = (job or Job()).claims(requested)
        return self.signed(
            identity | claims,
            audience,
            issuer,
            expires_in,
            issued_ago,
            key=key,
            kid=kid,
            algorithm=algorithm,
            drop=drop,
        )

    def _handler(self):
        jwks_handler = super()._handler()
        fake = self

        class Handler(jwks_handler):
            def do_POST(self):
                # The agent API: POST /v3/jobs/<job id>/oidc/tokens {"audience", "lifetime", "claims"} → {"token"}
                parts = self.path.removeprefix(fake.prefix + "/v3/").split("/")
                if len(parts) != 4 or parts[0] != "jobs" or parts[2:] != ["oidc", "tokens"]:
                    return self._answer(404, {"message": "Not Found"})
                if self.headers.get("Authorization") != f"Token {AGENT_TOKEN}":
                    return self._answer(401, {"message": "Unauthorized"})
                job = fake.jobs.get(parts[1])
                if job is None:
                    return self._answer(404, {"message": "No job"})
                asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                fake.token_requests.append(asked)
                lifetime = int(asked.get("lifetime") or 0) or 600
                requested = tuple(asked.get("claims") or ())
                audience = asked.get("audience") or f"https://buildkite.com/{job.organization_slug}"
                token = fake.token(
                    job=job, requested=requested, audience=audience, expires_in=lifetime, key=fake.agent_key
                )
                return self._answer(201, {"token": token})

        return Handler

    def agent_env(self, job: Job) -> dict[str, str]:
        """The environment of ``job``'s command: Buildkite's variables and the agent's endpoint and access token."""
        return job.environment() | {
            "BUILDKITE_AGENT_ENDPOINT": self.agent_endpoint,
            "BUILDKITE_AGENT_ACCESS_TOKEN": AGENT_TOKEN,
        }
