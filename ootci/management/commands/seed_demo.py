"""A realistic, deterministic demo data set, so every page has something true to show.

Running it again replaces the demo rows (all keyed ``demo-…``) with a fresh copy relative to now:
the row counts and the allowlist stay the same, and nothing outside the demo rows is touched.
"""

import random
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, models, transaction
from django.db.models import QuerySet
from django.utils import timezone

from ootci import case_days, case_recent, ledger, levels
from ootci.demo import AUTHORS, BACKENDS, DAYS, OPS, PR_COUNT, REPORTS, TESTS, TITLES, TRACEBACK, sha
from ootci.models import (
    Backend,
    CallbackRejection,
    Delivery,
    Dispatch,
    JobResult,
    PullRequest,
    TestCase,
    TestReport,
)


def jobs_deleted(jobs: QuerySet) -> None:
    """``jobs.delete()``, the job results themselves in one statement: the ORM deletes them 100 at a time, and each
    statement runs the roll-up triggers (ootci 0033, 0045) once: 70 of them were half of a re-seed's time. The rows
    that point at them are deleted or unlinked first, as their ``on_delete`` says (the ORM's delete for theirs)."""
    for relation in JobResult._meta.get_fields(include_hidden=True):
        if not (relation.auto_created and not relation.concrete):
            continue
        pointing = relation.related_model._base_manager.filter(**{f"{relation.field.name}__in": jobs})
        if relation.on_delete is models.CASCADE:
            pointing.delete()
        elif relation.on_delete is models.SET_NULL:
            pointing.update(**{relation.field.name: None})
        else:
            raise NotImplementedError(f"{relation.related_model.__name__}.{relation.field.name}: {relation.on_delete}")
    jobs._raw_delete(jobs.db)


def statistics_fresh() -> None:
    """ANALYZE the app's tables, before a demo is replaced: in a new database, never analyzed (a test's), the roll-up
    triggers were planned for tables a few rows long, and replacing a demo seeded in the same transaction took 21 s
    instead of 6. Only the app's tables, and only with a demo in them: a database-wide ANALYZE waits on the shared
    catalogs, and one of empty tables plans for them being empty."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE %s", ["ootci_%"]
        )
        tables = [row[0] for row in cursor.fetchall()]
        cursor.execute(f"ANALYZE {', '.join(connection.ops.quote_name(t) for t in tables)}")


class Command(BaseCommand):
    help = "Load the demo data set: a dozen backends, a few hundred PRs and 30 days of job results."

    def handle(self, *args, **options):
        self.rng, self.places = random.Random(54), random.Random(29)
        self.now = timezone.now().replace(microsecond=0)
        self.upstream = settings.UPSTREAM_REPO
        self.run_id = 7_000_000_000
        with transaction.atomic():
            self.clear()
            backends = self.backends()
            self.jobs, self.dispatches = [], []
            self.pull_requests(backends)
            self.pushes_and_nightlies(backends)
            Dispatch.objects.bulk_create(self.dispatches, batch_size=2000)
            JobResult.objects.bulk_create(self.jobs, batch_size=2000)
            self.reports_seeded()
            for job in self.baseline_reported:  # the skip ledger, as each report's parse records it
                ledger.ledger_record(job_id=job.pk)
            self.rejections()
        self.stdout.write(
            f"Demo data: {len(backends)} backends, "
            f"{PullRequest.objects.filter(title__startswith='[demo]').count()} PRs, "
            f"{Delivery.objects.filter(delivery_id__startswith='demo-').count()} deliveries, "
            f"{len(self.dispatches)} dispatches, {len(self.jobs)} job results."
        )

    def clear(self) -> None:
        if connection.vendor == "postgresql" and JobResult.objects.filter(delivery_id__startswith="demo-").exists():
            statistics_fresh()
        reports = TestReport.objects.filter(job__delivery_id__startswith="demo-", state=TestReport.State.PARSED)
        parsed = list(reports.values_list("pk", flat=True))
        counted, recent = case_days.case_days_keys(parsed), case_recent.recent_keys(parsed)
        jobs_deleted(JobResult.objects.filter(delivery_id__startswith="demo-"))
        case_recent.recent_recount(recent)  # the failing tests' history, without the demo's cases
        case_days.case_days_recount(counted)  # the test search's roll-up, without the demo's cases
        Delivery.objects.filter(delivery_id__startswith="demo-").delete()
        PullRequest.objects.filter(title__startswith="[demo]").delete()
        CallbackRejection.objects.filter(detail__startswith="[demo]").delete()

    def backends(self) -> dict[str, tuple[Backend, tuple]]:
        result = {}
        for repo, level, device, oncalls, jobs, fail, infra, queue in BACKENDS:
            backend = Backend.objects.filter(repo__iexact=repo).first()
            if backend is None:
                backend = Backend(repo=repo, device=device, oncalls=oncalls, notes="Demo backend from seed_demo.")
                at = self.now - timedelta(days=DAYS + 10)
                backend.change_level(level, actor="seed_demo", reason="demo data", at=at)
            result[repo] = (backend, (jobs, fail, infra, queue))
        return result

    def pull_requests(self, backends) -> None:
        rng = self.rng
        for i in range(PR_COUNT):
            number = 160_000 + i
            opened = self.now - timedelta(days=DAYS) + timedelta(seconds=i * DAYS * 86400 / PR_COUNT)
            labels = [f"ciflow/oot/{d}" for d in ("mps", "rvv", "rocm") if rng.random() < 0.25]
            recent = opened > self.now - timedelta(days=3)
            state = PullRequest.State.OPEN if recent or rng.random() < 0.3 else rng.choice(["closed", "merged"])
            title = rng.choice(TITLES).format(rng.choice(OPS))
            pr = PullRequest.objects.create(
                upstream_repo=self.upstream,
                number=number,
                title=f"[demo] {title}",
                author=rng.choice(AUTHORS),
                labels=labels,
                state=state,
                html_url=f"https://github.com/{self.upstream}/pull/{number}",
                created_at=opened,
                updated_at=opened,
            )
            pushes = 1 + (rng.random() < 0.4) + (rng.random() < 0.15)
            for attempt in range(pushes):
                at = min(opened + timedelta(hours=attempt * rng.uniform(2, 20)), self.now - timedelta(minutes=5))
                head = sha("pr", number, attempt)
                action = "opened" if attempt == 0 else "synchronize"
                delivery = Delivery.objects.create(
                    delivery_id=f"demo-pr-{number}-{attempt}",
                    event="pull_request",
                    action=action,
                    upstream_repo=self.upstream,
                    head_sha=head,
                    pull_request=pr,
                    received_at=at,
                    payload={"action": action, "number": number, "pull_request": {"head": {"sha": head}}},
                )
                pr.head_sha = head
                self.fan_out(delivery, backends, labels, "pull_request", number, head, at)
            pr.save(update_fields=["head_sha"])

    def pushes_and_nightlies(self, backends) -> None:
        for day in range(DAYS):
            at = self.now - timedelta(days=DAYS - day) + timedelta(hours=3)
            head = sha("main", day)
            delivery = Delivery.objects.create(
                delivery_id=f"demo-push-{day}",
                event="push",
                upstream_repo=self.upstream,
                head_sha=head,
                ref="refs/heads/main",
                received_at=at,
                payload={"ref": "refs/heads/main", "after": head},
            )
            self.fan_out(delivery, backends, [], "push", None, head, at)
            for backend, (_, fail, infra, _) in backends.values():
                if backend.level != "L1" and self.rng.random() < 0.8:
                    self.job(
                        backend,
                        None,
                        f"demo-{head}",
                        "nightly",
                        None,
                        head,
                        ("nightly", "full-suite"),
                        1,
                        at + timedelta(hours=20),
                        0,
                        fail * 1.5,
                        infra,
                    )

    def fan_out(self, delivery, backends, labels, event, pr_number, head, at) -> None:
        rng = self.rng
        age = self.now - at
        for backend, (jobs, fail, infra, queue) in backends.values():
            wanted = event == "pull_request" and levels.wants_check_run(backend.level, backend.device, labels)
            lost = age > timedelta(hours=8) and rng.random() < infra / 4
            pending = age < timedelta(minutes=20) and rng.random() < 0.5
            dispatch = Dispatch(
                delivery=delivery,
                backend=backend,
                created_at=at,
                status=Dispatch.Status.FAILED if lost and rng.random() < 0.3 else Dispatch.Status.SENT,
                attempts=1,
                sent_at=at + timedelta(seconds=rng.uniform(0.2, 2)),
            )
            if dispatch.status == Dispatch.Status.FAILED:
                dispatch.sent_at, dispatch.attempts = None, 5
                dispatch.last_error = "422 Unprocessable Entity: the GitHub App is not installed on this repository"
            self.dispatches.append(dispatch)
            if lost or pending or backend.level == "L1":
                continue
            workflow, names = jobs
            for name in names:
                self.job(
                    backend,
                    dispatch,
                    delivery.delivery_id,
                    event,
                    pr_number,
                    head,
                    (workflow, name),
                    1,
                    dispatch.sent_at,
                    queue,
                    fail,
                    infra,
                    wanted,
                )

    def job(
        self,
        backend,
        dispatch,
        delivery_id,
        event,
        pr_number,
        head,
        names,
        attempt,
        sent_at,
        queue,
        fail,
        infra,
        wanted=False,
        run_id: str = "",
    ) -> None:
        rng = self.rng
        if not run_id:
            self.run_id += rng.randint(1, 40)
            run_id = str(self.run_id)
        queued = rng.lognormvariate(0, 0.6) * queue if attempt == 1 and queue else None
        started = sent_at + timedelta(seconds=queued or rng.uniform(5, 30))
        duration = rng.lognormvariate(0, 0.3) * {"build": 1500, "nightly": 7200}.get(names[0], 2400)
        completed = started + timedelta(seconds=duration)
        roll = rng.random()
        if completed > self.now:
            conclusion = ""
        elif roll < fail:
            conclusion = "failure"
        elif roll < fail + infra:
            conclusion = rng.choice(["failure", "cancelled", "timed_out", "cancelled"])
        elif roll < fail + infra + 0.02:
            conclusion = "skipped"
        else:
            conclusion = "success"
        failed_tests = rng.sample(TESTS, rng.randint(1, 3)) if conclusion == "failure" and roll < fail else []
        passed = None if conclusion in ("", "skipped", "cancelled") else rng.randint(3000, 9000)
        self.jobs.append(
            JobResult(
                backend=backend,
                dispatch=dispatch,
                delivery_id=delivery_id,
                event_type=event,
                upstream_repo=self.upstream,
                pr_number=pr_number,
                head_sha=head,
                workflow_name=names[0],
                job_name=names[1],
                run_id=run_id,
                run_attempt=attempt,
                check_run_id=str(int(run_id) * 3 + attempt),
                status="completed" if conclusion else "in_progress",
                conclusion=conclusion,
                started_at=started if not (conclusion and rng.random() < 0.02) else None,
                completed_at=completed if conclusion else None,
                queue_time=queued,
                execution_time=duration if conclusion else None,
                passed=passed,
                failed=len(failed_tests) if passed is not None else None,
                skipped=rng.randint(50, 400) if passed is not None else None,
                failed_tests=failed_tests,
                run_url=f"https://github.com/{backend.repo}/actions/runs/{run_id}",
                artifact_url=f"https://github.com/{backend.repo}/actions/runs/{run_id}/artifacts"
                if failed_tests
                else "",
                level=backend.level,
                upstream_check_run_id=int(run_id) * 7 + attempt if wanted else None,
                one_shot=False,
                relay_decided=conclusion == "timed_out" and rng.random() < 0.5,
                created_at=started,
                environment=self.environment(backend),
            )
        )
        if conclusion in ("failure", "cancelled") and attempt == 1 and rng.random() < 0.35:
            # A re-run of the failed job: same run, next attempt, no queue time (RFC-0050 §re-run).
            retry_at = completed + timedelta(minutes=rng.uniform(10, 120))
            if retry_at < self.now:
                self.job(
                    backend,
                    dispatch,
                    delivery_id,
                    event,
                    pr_number,
                    head,
                    names,
                    2,
                    retry_at,
                    0,
                    fail / 2,
                    infra / 2,
                    wanted,
                    run_id=run_id,
                )

    def environment(self, backend) -> dict:
        """Where a demo job ran: one of four runners of its device (its own random stream: results stay the same)."""
        device = backend.device or "cpu"
        runner = f"{device}-{self.places.randrange(4):02d}"
        return {"device": device, "device_count": 8, "runner": runner, "runner_labels": [device, "linux"]}

    def reports_seeded(self) -> None:
        """Parsed reports for the latest completed jobs that reported counts: thousands of cases each, of which the
        named TESTS are stored: the job's failed tests with messages, the others passed (a few on a rerun). As the
        parser would write them (the raw bytes are not in the demo store: a re-parse of a demo report fails, and
        says so)."""
        rng = self.rng
        jobs = sorted((j for j in self.jobs if j.passed is not None and j.pk), key=lambda j: j.created_at)[-REPORTS:]
        reports, cases = [], []
        for job in jobs:
            flaky = rng.sample(TESTS, 1) if rng.random() < 0.3 else []
            report = TestReport(
                job=job,
                source=TestReport.Source.ARTIFACT,
                artifact_name=f"test-reports-{job.job_name}",
                digest=sha("report", job.pk),
                size=job.passed * 40,
                content_type="application/zip",
                store_key=f"demo/{job.pk}",
                state=TestReport.State.PARSED,
                cases=job.passed + job.failed + job.skipped,
                passed=job.passed,
                failed=job.failed,
                skipped=job.skipped,
                reruns=len(flaky) + 2 * len(job.failed_tests),
                duration=round(job.execution_time or 0, 3),
                received_at=job.completed_at or job.created_at,
                parsed_at=job.completed_at or job.created_at,
            )
            reports.append(report)
            for name in job.failed_tests:
                file, klass, test = name.split("::")
                mismatched = f"Mismatched elements: {rng.randint(1, 90)} / 100"
                message = f"AssertionError: Tensor-likes are not close!\n\n{mismatched}"
                cases.append((report, job, file, klass, test, "failed", 2, message + "\n" + TRACEBACK))
            for name in TESTS:  # the rest of the named tests passed: the test pages show each one's history
                file, klass, test = name.split("::")
                if name not in job.failed_tests:
                    cases.append((report, job, file, klass, test, "passed", int(name in flaky), ""))
        TestReport.objects.bulk_create(reports, batch_size=2000)
        self.baseline_reported = sorted((j for j in jobs if j.event_type != "pull_request"), key=lambda j: j.created_at)
        TestCase.objects.bulk_create(
            [
                TestCase(
                    report=report,
                    job=job,
                    file=file.removeprefix("test/"),
                    classname=klass,
                    name=test,
                    test_id=f"{file.removeprefix('test/')}::{klass.replace('PRIVATEUSE1', '{DEVICE}')}::{test}",
                    status=status,
                    duration=round(rng.uniform(0.01, 3), 3),
                    reruns=reruns,
                    message=message,
                )
                for report, job, file, klass, test, status, reruns, message in cases
            ],
            batch_size=2000,
        )
        for report in reports:  # the roll-ups, as each report's parse adds to them
            case_recent.recent_add(report)
            case_days.case_days_add(report)

    def rejections(self) -> None:
        details = [
            "[demo] repository sample/unknown-repo is not in the allowlist",
            "[demo] token expired",
            "[demo] no dispatch for this delivery and repository",
        ]
        for i in range(9):
            CallbackRejection.objects.create(
                received_at=self.now - timedelta(hours=i * 17),
                repo="sample/unknown-repo" if i % 3 == 0 else "",
                status_code=403 if i % 3 != 1 else 401,
                detail=details[i % 3],
            )
