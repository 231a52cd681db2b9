"""Why jobs failed, as the HUD shows it: each failed job's failure line (written by relay.reports.logs) and the
failures page's signatures, ranked by the jobs they affected.

Read from the database (``ootci.models.JobFailure``) whatever store answers the figures: a classification is one
row per failed job, read by job id, and the failures page groups a few thousand rows at most.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ootci.models import JobFailure, JobResult

EXAMPLES = 5  # example jobs shown per signature
SIGNATURES = 100  # signatures listed on the failures page


@dataclass(frozen=True)
class FailureLine:
    """One failed job's classification: its class, why (``source``), and the log line that explains it."""

    job_id: int
    failure_class: str  # infra | build | test | lint ("" until classified)
    source: str  # a JobFailure.Source: relay, step, rule, test_report, callback, none
    source_text: str
    rule_name: str
    line: str
    line_number: int | None
    context: tuple[str, ...]
    line_url: str
    failed_step: str
    problem: str
    verdict: str = ""  # ootci.verdicts: the job's verdict ("" until known)
    exonerated: str = ""  # why its check run concluded neutral, when it did
    auto_retry: str = ""  # the relay's automatic re-run of it (infra), or why none


@dataclass(frozen=True)
class ExampleJob:
    job_id: int
    backend_repo: str
    job_name: str
    head_sha: str
    finished_at: datetime

    @property
    def org(self) -> str:
        return self.backend_repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.backend_repo.split("/", 1)[-1]


@dataclass
class Signature:
    """A failure line with what varies masked, and every classified job of the window whose line it is."""

    signature: str
    failure_class: str
    rule_name: str
    jobs: int = 0
    backends: list[str] = field(default_factory=list)
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    examples: list[ExampleJob] = field(default_factory=list)
    # Seen on several backends at the same upstream SHA: the cause is probably upstream, not any backend's.
    probably_upstream: bool = False
    upstream_shas: list[str] = field(default_factory=list)


def failure_lines(job_ids: Iterable[int]) -> dict[int, FailureLine]:
    """The classification of each of these jobs that has one, by job id."""
    ids = set(job_ids)
    if not ids:
        return {}
    found = JobFailure.objects.filter(job_id__in=ids).select_related("job", "job__exoneration")
    return {f.job_id: _line(f) for f in found}


def _line(f: JobFailure) -> FailureLine:
    return FailureLine(
        job_id=f.job_id,
        failure_class=f.failure_class,
        source=f.source,
        source_text=JobFailure.Source(f.source).label,
        rule_name=f.rule_name,
        line=f.line,
        line_number=f.line_number,
        context=tuple(f.context),
        line_url=f.line_url,
        failed_step=f.failed_step,
        problem=f.problem,
        verdict=f.job.verdict,
        exonerated=f.job.exoneration.rule if hasattr(f.job, "exoneration") else "",
        auto_retry=f.job.auto_retry_note,
    )


def auto_retries(jobs: Iterable) -> set[int]:
    """The ids of the attempts among ``jobs`` (with ``id``, ``run_id``, ``run_attempt``, ``backend_id``) that are
    the relay's automatic re-run of an infra failure: the attempt before them was re-run automatically."""
    later = [j for j in jobs if j.run_attempt > 1]
    if not later:
        return set()
    keys = {(j.backend_id, j.run_id, j.run_attempt - 1) for j in later}
    rerun = JobResult.objects.filter(auto_retry_at__isnull=False, run_id__in={k[1] for k in keys})
    found = {(b, r, a) for b, r, a in rerun.values_list("backend_id", "run_id", "run_attempt")}
    return {j.id for j in later if (j.backend_id, j.run_id, j.run_attempt - 1) in found}


def signatures(*, since: datetime, backend_ids: Iterable[int]) -> list[Signature]:
    """The window's failure signatures (jobs finished since ``since``, of these backends), most jobs first.

    A job counts once, under its latest classification; jobs without a matched line have no signature.
    """
    rows = (
        JobFailure.objects.filter(job__finished_at__gte=since, job__backend_id__in=list(backend_ids))
        .exclude(signature="")
        .values(
            "signature",
            "failure_class",
            "rule_name",
            "job_id",
            "job__backend__repo",
            "job__job_name",
            "job__head_sha",
            "job__finished_at",
        )
        .order_by("-job__finished_at", "-job_id")
    )
    found: dict[str, Signature] = {}
    backends_by_sha: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        key, repo, sha, at = row["signature"], row["job__backend__repo"], row["job__head_sha"], row["job__finished_at"]
        sig = found.get(key)
        if sig is None:  # newest first: the first row names the class and rule, as the latest job shows them
            sig = found[key] = Signature(key, row["failure_class"], row["rule_name"], last_seen=at)
        sig.jobs += 1
        sig.first_seen = at
        if repo not in sig.backends:
            sig.backends.append(repo)
        if len(sig.examples) < EXAMPLES:
            sig.examples.append(ExampleJob(row["job_id"], repo, row["job__job_name"], sha, at))
        if sha:
            backends_by_sha[key][sha].add(repo)
    for key, sig in found.items():
        sig.backends.sort(key=str.lower)
        sig.upstream_shas = sorted(sha for sha, repos in backends_by_sha[key].items() if len(repos) > 1)
        sig.probably_upstream = bool(sig.upstream_shas)
    ranked = sorted(found.values(), key=lambda s: (-s.jobs, -len(s.backends), s.signature))
    return ranked[:SIGNATURES]
