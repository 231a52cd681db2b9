"""Test reports end to end over real HTTP: uploaded with the job's OIDC token, or pulled by us from the run's
GitHub Actions artifact (the fake GitHub: listing, 302, zip), stored raw (folder or moto S3), parsed by the task."""

import gzip
import io
import os
import threading
import time
import uuid
from datetime import timedelta

import pytest
import requests
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from ootci.models import Backend, JobResult, TestCase, TestReport
from relay.reliability import archive
from relay.reports import artifacts, pull
from tests.fakes.github import Reply
from tests.hud import builders
from tests.ootci.reports.test_junit import BILLION_LAUGHS
from tests.relay.reliability.test_archive import s3  # noqa: F401 - the moto S3 server fixture
from tests.relay.report_files import junit_xml, zipped

RUN_ID = "24033272679"  # the run of the recorded completed callback
QUERY = {"workflow": "npu-ci", "job": "test-npu-float32", "run_id": RUN_ID, "run_attempt": 1}


@pytest.fixture
def store(settings, tmp_path):
    settings.TEST_REPORTS_URL = (tmp_path / "reports").as_uri()
    return tmp_path / "reports"


def completed(ci, dispatch=None, **workflow) -> JobResult:
    dispatch = dispatch or ci.dispatch()
    response = ci.post(ci.body("pull_request.completed.failure", dispatch, **workflow))
    assert response.status_code == 200, response.text
    return JobResult.objects.get(backend=ci.backend, delivery_id=dispatch.delivery.delivery_id)


def upload(ci, job: JobResult, data: bytes, *, token=None, content_type="application/xml", headers=None, **query):
    params = {**QUERY, "delivery_id": job.delivery_id, **query}
    sent = {"Authorization": f"Bearer {token or ci.issuer.token(repository=ci.repo)}", "Content-Type": content_type}
    url = ci.url.replace("/github/callback", "/github/test-report")
    return requests.post(url, params=params, data=data, headers={**sent, **(headers or {})}, timeout=30)


def test_an_uploaded_report_is_stored_parsed_and_counted_on_its_job(downstream, store):
    ci = downstream(device="npu")
    job = completed(ci, artifact_url="")
    data = junit_xml(passed=40, failed=3, reruns=1)

    response = upload(ci, job, data)

    assert response.status_code == 202, response.text
    report = TestReport.objects.get(pk=response.json()["report_id"])
    assert (report.state, report.source, report.cases, report.failed, report.reruns) == ("parsed", "upload", 43, 3, 3)
    assert (store / report.store_key).read_bytes() == data
    assert report.store_key.startswith(f"reports/{archive.key_part(ci.repo)}/{RUN_ID}/1/")
    assert TestCase.objects.filter(job=job, status="passed").count() == 40  # the passes are kept, for history
    cases = list(TestCase.objects.filter(job=job).exclude(status="passed").order_by("name"))
    assert [c.test_id for c in cases] == [
        f"test_ops.py::TestCommon{{DEVICE}}::test_mul_{{device}}_int{i}" for i in range(3)
    ]
    assert cases[0].status == "failed" and cases[0].reruns == 1 and "AssertionError: 0 != 1" in cases[0].message
    job.refresh_from_db()
    assert (job.passed, job.failed, job.skipped) == (40, 3, 0)
    assert job.failed_tests[0] == "test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int0"
    # The reporter sending its completed callback again (its own counts) is still a repeat, not a conflict.
    again = ci.post(ci.body("pull_request.completed.failure", job.dispatch, artifact_url=""))
    assert again.status_code == 200 and again.json()["duplicate"] is True


def test_the_same_bytes_again_are_accepted_once_and_different_ones_conflict(downstream, store):
    ci = downstream()
    job = completed(ci, artifact_url="")
    first = upload(ci, job, junit_xml())
    again = upload(ci, job, junit_xml())
    other = upload(ci, job, junit_xml(passed=9))
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json() == first.json()
    assert other.status_code == 409 and "already has a different test report" in other.json()["detail"]
    assert TestReport.objects.count() == 1


def test_a_gzip_encoded_zip_is_accepted(downstream, store):
    ci = downstream()
    job = completed(ci, artifact_url="")
    body = gzip.compress(zipped({"a/one.xml": junit_xml(passed=5, failed=0), "b/two.xml": junit_xml(passed=1)}))
    response = upload(ci, job, body, content_type="application/zip", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 202, response.text
    report = TestReport.objects.get()
    assert (report.state, report.cases, report.content_encoding) == ("parsed", 7, "gzip")


def test_an_upload_for_another_repos_job_attempt_is_refused_with_no_rows(downstream, store):
    owner, intruder = downstream(), downstream()
    job = completed(owner, artifact_url="")
    response = upload(intruder, job, junit_xml())
    assert response.status_code == 403 and "another repository" in response.json()["detail"]
    assert not TestReport.objects.exists() and not any(store.rglob("*.*"))


@pytest.mark.parametrize(
    ("change", "status", "detail"),
    [
        ({"run_id": "999"}, 404, "No job attempt"),
        ({"run_id": ""}, 400, "run_id"),
        ({"content_type": "text/plain"}, 400, "Content-Type must be one of"),
        ({"data": b"just some text"}, 422, "not a JUnit XML file"),
        ({"data": b""}, 400, "empty"),
        ({"token": "not-a-jwt"}, 401, ""),
    ],
)
def test_a_bad_upload_is_refused_with_a_detail(downstream, store, change, status, detail):
    ci = downstream()
    job = completed(ci, artifact_url="")
    data = change.pop("data", junit_xml())
    response = upload(ci, job, data, **change)
    assert response.status_code == status, response.text
    assert detail in response.json()["detail"]
    assert not TestReport.objects.exists()


def test_a_hostile_upload_is_kept_but_refused_by_the_parser_with_its_reason(downstream, store):
    ci = downstream()
    job = completed(ci, artifact_url="")
    response = upload(ci, job, BILLION_LAUGHS)
    assert response.status_code == 202
    report = TestReport.objects.get()
    assert report.state == "refused" and "declares entities" in report.reason
    assert not TestCase.objects.exists()
    job.refresh_from_db()
    assert (job.passed, job.failed) == (8430, 2)  # the callback's own counts stay


def test_a_completed_callback_pulls_the_named_artifact_through_the_302_without_our_token(
    downstream, store, fake_github
):
    ci = downstream()
    artifact_id = fake_github.artifact_add(ci.repo, int(RUN_ID), name="anything", data=zipped({"r.xml": junit_xml()}))
    url = f"https://github.com/{ci.repo}/actions/runs/{RUN_ID}/artifacts/{artifact_id}"

    job = completed(ci, artifact_url=url)

    report = TestReport.objects.get(job=job)
    assert (report.source, report.artifact_id, report.state, report.cases) == ("artifact", artifact_id, "parsed", 4)
    storage = fake_github.requests_to("GET", rf"/storage/artifacts/{artifact_id}")
    assert len(storage) == 1 and storage[0].status == 200 and "authorization" not in storage[0].headers
    assert not fake_github.requests_to("GET", r"/repos/.*/actions/runs/\d+/artifacts")  # no listing needed
    # The pull runs twice safely: nothing new.
    assert pull.job_reports_pull(job_id=job.pk) == {"pulled": 0}


def test_without_an_artifact_url_the_runs_matching_artifacts_are_pulled(downstream, store, fake_github):
    ci = downstream()
    run = int(RUN_ID)
    fake_github.artifact_add(ci.repo, run, name="test-reports-test-npu-float32", data=zipped({"a.xml": junit_xml()}))
    fake_github.artifact_add(ci.repo, run, name="test-reports-other-job", data=zipped({"b.xml": junit_xml()}))
    fake_github.artifact_add(ci.repo, run, name="wheel-test-npu-float32", data=b"not a report")

    job = completed(ci, artifact_url="")

    assert list(TestReport.objects.filter(job=job).values_list("artifact_name", "state")) == [
        ("test-reports-test-npu-float32", "parsed")
    ]


def shards_started(ci, fake_github, names: list[str]):
    """A run attempt's shards in progress, each with its report uploaded as an artifact of the run."""
    dispatch = ci.dispatch()
    for name in names:
        fake_github.artifact_add(ci.repo, int(RUN_ID), name=f"test-reports-{name}", data=zipped({"r.xml": junit_xml()}))
        assert ci.post(ci.body("pull_request.in_progress", dispatch, job_name=name, run_id=RUN_ID)).status_code == 200
    return dispatch


def shard_completed(ci, dispatch, name: str, conclusion: str = "success") -> None:
    run = {"run_id": RUN_ID, "conclusion": conclusion, "artifact_url": ""}
    assert ci.post(ci.body("pull_request.completed.failure", dispatch, job_name=name, **run)).status_code == 200


def listings(fake_github) -> int:
    return len(fake_github.requests_to("GET", rf"/repos/.*/actions/runs/{RUN_ID}/artifacts"))


def pulled_jobs(ci) -> list[str]:
    return sorted(TestReport.objects.filter(job__backend=ci.backend).values_list("job__job_name", flat=True))


def test_a_run_whose_shards_finish_apart_is_listed_once_by_its_last_job(downstream, store, fake_github):
    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2", "shard-3"])

    for name in ("shard-1", "shard-2"):  # minutes apart: each after the listing a job before it could have shared
        shard_completed(ci, dispatch, name)
    assert listings(fake_github) == 0 and pulled_jobs(ci) == []  # they wait for the run's last job
    shard_completed(ci, dispatch, "shard-3")

    assert listings(fake_github) == 1
    assert pulled_jobs(ci) == ["shard-1", "shard-2", "shard-3"]
    assert set(TestReport.objects.values_list("state", flat=True)) == {"parsed"}


def test_follow_ups_that_run_after_the_whole_burst_list_the_run_once(downstream, store, fake_github, monkeypatch):
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    from relay import tasks

    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2", "shard-3"])
    monkeypatch.setattr(Conf, "SYNC", False)  # the worker lags: every shard completes before a follow-up runs
    for name in ("shard-1", "shard-2", "shard-3"):
        shard_completed(ci, dispatch, name)
    get_broker().purge_queue()
    monkeypatch.setattr(Conf, "SYNC", True)

    follow_ups = [tasks.job_completed(job.pk) for job in JobResult.objects.filter(backend=ci.backend).order_by("pk")]

    assert listings(fake_github) == 1  # the first found its run done and listed it for all three
    assert pulled_jobs(ci) == ["shard-1", "shard-2", "shard-3"]
    assert len(follow_ups) == 3


def test_a_failed_shard_is_pulled_at_once_while_its_run_goes_on(downstream, store, fake_github):
    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2", "shard-3"])

    shard_completed(ci, dispatch, "shard-1")
    shard_completed(ci, dispatch, "shard-2", "failure")
    assert pulled_jobs(ci) == ["shard-2"]  # its failing tests now; shard-1 still waits for shard-3

    shard_completed(ci, dispatch, "shard-3")
    assert pulled_jobs(ci) == ["shard-1", "shard-2", "shard-3"]
    assert TestReport.objects.count() == 3  # shard-2's report once, though the last job's listing shows it too
    assert listings(fake_github) == 2


def test_a_shard_the_sweeper_times_out_ends_its_run_and_the_waiting_reports_are_pulled(downstream, store, fake_github):
    from relay.reliability import sweeper

    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2"])
    shard_completed(ci, dispatch, "shard-1")
    JobResult.objects.filter(job_name="shard-2").update(started_at=timezone.now() - timedelta(days=1))
    assert pulled_jobs(ci) == []

    assert len(sweeper.jobs_sweep().timed_out) == 1

    assert pulled_jobs(ci) == ["shard-1", "shard-2"]  # the zombie's own report too, if it uploaded one
    assert listings(fake_github) == 1


def test_a_run_whose_last_follow_up_was_lost_is_listed_by_the_sweeper(downstream, store, fake_github, monkeypatch):
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    from relay.reliability import sweeper

    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2"])
    monkeypatch.setattr(Conf, "SYNC", False)
    for name in ("shard-1", "shard-2"):
        shard_completed(ci, dispatch, name)
    get_broker().purge_queue()  # a worker killed with the follow-ups in hand: none of them ran
    monkeypatch.setattr(Conf, "SYNC", True)
    assert pulled_jobs(ci) == [] and listings(fake_github) == 0

    assert sweeper.jobs_sweep(now=timezone.now() + timedelta(minutes=5)).timed_out == []
    assert listings(fake_github) == 0  # not yet: a follow-up may still be on its way
    sweeper.jobs_sweep(now=timezone.now() + timedelta(minutes=15))

    assert pulled_jobs(ci) == ["shard-1", "shard-2"] and listings(fake_github) == 1
    sweeper.jobs_sweep(now=timezone.now() + timedelta(minutes=15))
    assert listings(fake_github) == 1  # served: the next sweep leaves it


def test_a_run_listed_by_its_last_job_is_left_by_the_sweeper(downstream, store, fake_github):
    from relay.reliability import sweeper

    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2"])
    for name in ("shard-1", "shard-2"):
        shard_completed(ci, dispatch, name)
    TestReport.objects.all().delete()  # as for a run whose artifacts hold no report: nothing pulled
    assert listings(fake_github) == 1

    sweeper.jobs_sweep(now=timezone.now() + timedelta(minutes=15))

    assert listings(fake_github) == 1


def test_a_run_github_cannot_list_is_asked_again_later(downstream, store, fake_github):
    from django_q.models import Schedule

    ci = downstream()
    dispatch = shards_started(ci, fake_github, ["shard-1", "shard-2"])
    shard_completed(ci, dispatch, "shard-1")
    fake_github.script("GET", f"/repos/{ci.repo}/actions/runs/{RUN_ID}/artifacts", Reply(502), Reply(502))

    shard_completed(ci, dispatch, "shard-2")

    assert pulled_jobs(ci) == []  # the follow-up and the task it queued at once both met a 502
    retry = Schedule.objects.get(func="relay.tasks.run_reports_pull")
    job_id, attempt = eval(retry.args)  # django-q2 keeps a schedule's args as a tuple's repr
    assert (JobResult.objects.get(pk=job_id).job_name, attempt) == ("shard-2", 2)
    from relay import tasks

    assert tasks.run_reports_pull(job_id, attempt) == "2 of 2 to pull"
    assert pulled_jobs(ci) == ["shard-1", "shard-2"]


@pytest.mark.parametrize("where", ["other-org/other-repo/actions/runs/24033272679", "{repo}/actions/runs/1"])
def test_an_artifact_url_naming_another_repo_or_run_is_never_fetched(downstream, store, fake_github, where):
    ci = downstream()
    url = f"https://github.com/{where.format(repo=ci.repo)}/artifacts/77"
    job = completed(ci, artifact_url=url)
    assert job.artifact_url == url  # it stays a link
    assert not fake_github.requests_to("GET", r"/repos/.*/actions/artifacts/77/zip")
    assert not fake_github.requests_to("GET", r"/repos/other-org/.*")
    assert not TestReport.objects.exists()


@pytest.mark.parametrize(
    "url, named",
    [
        ("https://github.com/Ascend/Pytorch-NPU/actions/runs/24033272679/artifacts/77", 77),  # case as GitHub's
        (
            "https://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/12345678901234567890",
            12345678901234567890,
        ),
        ("https://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/123456789012345678901", None),
        ("https://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/77/zip", None),
        ("https://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/", None),
        ("https://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/\u0667", None),  # not 0-9
        ("https://github.com/ascend/pytorch-npu/actions/runs/240332726790/artifacts/77", None),
        ("https://github.com/ascend/pytorch-npu-x/actions/runs/24033272679/artifacts/77", None),
        ("http://github.com/ascend/pytorch-npu/actions/runs/24033272679/artifacts/77", None),
        ("", None),
    ],
)
def test_only_an_artifact_of_the_jobs_own_run_is_named(url, named):
    backend = Backend(repo="ascend/pytorch-npu")
    job = JobResult(backend=backend, run_id=RUN_ID, artifact_url=url)
    assert artifacts.artifact_id_named(job) == named


@pytest.mark.parametrize(
    "artifact, job, named",
    [
        ("test-reports-shard-1", "shard-1", True),
        ("test-reports-shard-10", "shard-1", False),  # another shard's report
        ("test-reports-shard-1-linux.2xlarge", "shard-1", True),
        ("test-reports-reshard-1", "shard-1", False),
        ("shard-1_test-reports", "shard-1", True),
        ("test-reports-shard-10-shard-1", "shard-1", True),  # the second occurrence is whole
        ("test-reports", "", True),  # a job reported without a name: a one-job workflow's every report
    ],
)
def test_a_job_takes_the_artifacts_that_name_it_as_a_whole_word(artifact, job, named):
    assert artifacts.names_job(artifact, job) is named


def test_a_run_listing_is_kept_in_redis_and_in_the_process_that_took_it():
    key = f"relay:run-artifacts:test:{uuid.uuid4().hex}"
    calls = []

    def fetch() -> list[int]:
        calls.append(len(calls) + 1)
        return [calls[-1]]

    before = timezone.now() - timedelta(seconds=5)  # a job that completed before the listing (and the clocks' margin)
    assert artifacts.run_listing(key=key, done=before, fetch=fetch) == [1]
    artifacts._copies.pop(key)  # another process: Redis has it
    assert artifacts.run_listing(key=key, done=before, fetch=fetch) == [1]
    cache.delete(key)  # evicted from Redis: this process has a copy
    assert artifacts.run_listing(key=key, done=before, fetch=fetch) == [1]
    assert calls == [1]
    assert artifacts.run_listing(key=key, done=timezone.now(), fetch=fetch) == [2]  # completed after it: listed anew
    assert cache.get(key)["items"] == [2] and artifacts._copies[key]["items"] == [2]


def test_reports_go_to_s3_and_a_failed_read_is_reparsed_later(downstream, settings, s3, fake_github):  # noqa: F811
    s3.create_bucket(Bucket="reports")
    settings.TEST_REPORTS_URL = "s3://reports/raw"
    ci = downstream()
    job = completed(ci, artifact_url="")
    response = upload(ci, job, junit_xml(passed=2, failed=2))
    report = TestReport.objects.get(pk=response.json()["report_id"])
    assert report.state == "parsed"
    assert s3.get_object(Bucket="reports", Key=f"raw/{report.store_key}")["Body"].read() == junit_xml(
        passed=2, failed=2
    )
    TestReport.objects.filter(pk=report.pk).update(state="failed", reason="store was down")
    TestCase.objects.all().delete()

    call_command("reparse_test_reports")

    report.refresh_from_db()
    assert (report.state, report.reason, TestCase.objects.count()) == ("parsed", "", 4)


def test_raw_reports_past_retention_are_deleted_and_parsed_rows_stay(downstream, store, settings):
    from datetime import timedelta

    from django.utils import timezone

    ci = downstream()
    job = completed(ci, artifact_url="")
    upload(ci, job, junit_xml())
    settings.TEST_REPORTS_RETENTION_DAYS = 30
    assert pull.reports_clean() == 0
    assert pull.reports_clean(now=timezone.now() + timedelta(days=31)) == 1
    assert not any(p.is_file() for p in store.rglob("*"))
    assert TestCase.objects.count() == 4  # junit_xml(): three passes, one failure


def test_an_upload_names_the_attempt_by_a_fresh_delivery(downstream, store):
    ci = downstream()
    completed(ci, artifact_url="")
    response = upload(ci, JobResult(delivery_id=str(uuid.uuid4())), junit_xml())
    assert response.status_code == 404


def test_the_l4_check_run_lists_the_failed_tests_of_the_parsed_report(downstream, store, fake_github):
    ci = downstream("L4", device="npu")
    data = zipped({"r.xml": junit_xml(passed=30, failed=3)})
    artifact_id = fake_github.artifact_add(ci.repo, int(RUN_ID), name="test-reports", data=data)
    url = f"https://github.com/{ci.repo}/actions/runs/{RUN_ID}/artifacts/{artifact_id}"
    downstream_says = {"passed": 8430, "failed": 1, "skipped": 20, "failed_tests": ["what the downstream chose"]}

    completed(ci, artifact_url=url, test_results=downstream_says)

    last = fake_github.requests_to("PATCH", r"/repos/[^/]+/[^/]+/check-runs/\d+")[-1].json["output"]
    assert "| 30 | 3 | 0 |" in last["summary"]
    assert last["text"].startswith("### Failed tests\n")
    listed = [line for line in last["text"].splitlines() if line.startswith("- ")]
    assert listed == [f"- `test_ops.py::TestCommon{{DEVICE}}::test_mul_{{device}}_int{i}`" for i in range(3)]
    assert "what the downstream chose" not in last["text"]


def test_a_report_uploaded_before_the_completed_callback_keeps_its_counts(downstream, store):
    # The usual order for CI that is not GitHub Actions: in_progress, the upload (parsed at once), then completed with
    # the reporter's own counts. The report's counts win: the completion must not replace them.
    ci = downstream(device="npu")
    dispatch = ci.dispatch()
    assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
    job = JobResult.objects.get(backend=ci.backend, delivery_id=dispatch.delivery.delivery_id)
    assert upload(ci, job, junit_xml(passed=40, failed=3)).status_code == 202

    callback_counts = {"passed": 8000, "failed": 1, "skipped": 0, "failed_tests": ["callback::only"]}
    job = completed(ci, dispatch, artifact_url="", test_results=callback_counts)

    assert (job.status, job.passed, job.failed, job.skipped) == ("completed", 40, 3, 0)
    assert job.failed_tests[0] == "test_ops.py::TestCommon{DEVICE}::test_mul_{device}_int0"


@pytest.mark.django_db(transaction=True)
def test_a_parse_holds_no_lock_or_transaction_while_it_reads_the_store(make_backend, store):
    # The stored report is a FIFO: the parse blocks reading it until this test writes. Meanwhile the report's row
    # must be free (a callback, a re-parse or the admin would otherwise wait behind a 50 MB read).
    job = builders.job(make_backend("acme/npu"), name="test-1", conclusion="failure")
    report, _ = pull.report_store(job=job, received=pull.spooled(io.BytesIO(b"<x/>"), limit=10**6), source="upload")
    path = store / report.store_key
    path.unlink()
    os.mkfifo(path)
    TestReport.objects.filter(pk=report.pk).update(state="pending", reason="")  # its first parse ran on commit
    outcome = []

    def parse():
        try:
            outcome.append(pull.report_parse(report_id=report.pk))
        finally:
            connection.close()

    reader = threading.Thread(target=parse)
    reader.start()
    deadline = time.monotonic() + 10
    while not TestReport.objects.filter(pk=report.pk, parse_claimed_at__isnull=False).exists():
        assert time.monotonic() < deadline, "the parse never claimed the report"
        time.sleep(0.05)
    with transaction.atomic():
        TestReport.objects.select_for_update(nowait=True).get(pk=report.pk)  # raises if the parse held the row
    assert pull.report_parse(report_id=report.pk) == "busy"  # a second parse leaves it to the first
    with path.open("wb") as fifo:
        fifo.write(junit_xml(passed=3, failed=1))
    reader.join(timeout=30)

    assert outcome == ["parsed"]
    report.refresh_from_db()
    assert (report.state, report.failed, report.parse_claimed_at) == ("parsed", 1, None)


@pytest.mark.django_db(transaction=True)
def test_an_upload_racing_the_completed_callback_keeps_the_reports_counts(downstream, store):
    # Two writers at once, in either order: the report's counts win over the callback's however they interleave.
    ci = downstream(device="npu")
    callback_counts = {"passed": 8000, "failed": 1, "skipped": 0, "failed_tests": ["callback::only"]}
    for _ in range(3):
        dispatch = ci.dispatch()
        assert ci.post(ci.body("pull_request.in_progress", dispatch)).status_code == 200
        job = JobResult.objects.get(backend=ci.backend, delivery_id=dispatch.delivery.delivery_id)
        completion = ci.body("pull_request.completed.failure", dispatch, artifact_url="", test_results=callback_counts)
        go, answers = threading.Barrier(2), {}
        sends = {
            "upload": lambda job=job: upload(ci, job, junit_xml(passed=40, failed=3)),
            "callback": lambda body=completion: ci.post(body),
        }

        def send(name, go=go, answers=answers, sends=sends):
            go.wait()
            answers[name] = sends[name]().status_code

        threads = [threading.Thread(target=send, args=(name,)) for name in sends]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert answers == {"upload": 202, "callback": 200}
        job.refresh_from_db()
        assert (job.status, job.passed, job.failed) == ("completed", 40, 3)
