"""One verdict everywhere: the PR page and the check run / PR comment (ootci.baseline) give each failing test the same
word; the job page, its JSON and the matrix show the job's verdict, its exoneration and the relay's own re-run; the
readiness page counts what the verdicts did."""

import pytest
from django.utils import timezone

from hud.failing import queries as failing_queries
from hud.stores import allowlisted
from ootci import baseline
from ootci.models import JobFailure, JobResult
from tests.hud import builders
from tests.hud.failing.test_classes import build_pr, history, npu, xpu  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def test_the_pr_page_and_the_check_run_give_each_failing_test_the_same_verdict(history, npu, xpu):  # noqa: F811
    build_pr(history, npu, xpu)

    page = failing_queries.failing_tests(allowlisted.backend("acme/npu"), pr=7)
    jobs = list(JobResult.objects.filter(backend=npu, pr_number=7).select_related("backend"))
    found = baseline.jobs_verdicts(baseline.latest_attempts(JobResult.objects.filter(pk__in=[j.pk for j in jobs])))

    from_jobs = {t.test_id: t.verdict for v in found.values() for t in v.tests}
    assert {t.test_id: t.verdict for t in page.tests} == from_jobs
    assert sorted(from_jobs.values()) == ["broken-baseline", "flaky", "flaky", "new", "new", "new"]


@pytest.fixture
def failed(make_backend):
    backend = make_backend(repo="acme/hpu", level="L4", device="hpu")
    first = builders.job(backend, name="ut", conclusion="failure", event_type="pull_request", pr_number=9, run_id="5")
    JobFailure.objects.create(job=first, failure_class="infra", line="No space left on device")
    JobResult.objects.filter(pk=first.pk).update(
        failure_class="infra", verdict="infra", auto_retry_at=timezone.now(), auto_retry_note="re-run automatically"
    )
    again = builders.job(
        backend, name="ut", event_type="pull_request", pr_number=9, run_id="5", run_attempt=2, created_at=timezone.now()
    )
    return backend, JobResult.objects.get(pk=first.pk), again


def test_the_job_json_and_page_carry_the_verdict_and_the_relays_re_run(client, failed):
    backend, first, again = failed
    baseline.exoneration_record(first, baseline.jobs_verdicts([first])[first.pk], "every failure is infra", {})

    data = client.get(f"/api/oot/acme/hpu/jobs/{first.pk}/").json()
    assert (data["verdict"], data["exonerated"], data["auto_retry"]) == (
        "infra",
        "every failure is infra",
        "re-run automatically",
    )
    html = client.get(f"/oot/acme/hpu/jobs/{first.pk}/").content.decode()
    assert 'data-verdict="infra"' in html and "check run neutral: every failure is infra" in html
    assert client.get("/api/oot/pr/9/").json()["job_verdicts"] == {str(first.pk): "infra"}
    matrix = client.get("/oot/acme/hpu/?event=pull_request").content.decode()
    assert "<sup>2 auto</sup>" in matrix and "re-run automatically: infra" in matrix


def test_the_readiness_page_counts_exonerations_and_the_relays_re_runs(client, failed):
    backend, first, again = failed
    baseline.exoneration_record(first, baseline.jobs_verdicts([first])[first.pk], "every failure is infra", {})

    html = client.get("/oot/acme/hpu/readiness/").content.decode()

    table = html[html.index("data-impact") :]
    assert "infra 1" in table
    cells = [c.split(">")[-1] for c in table.split("</td>")[:5]]
    assert cells[0] == "1" and cells[2] == "1"  # one exonerated, one re-run by the relay
    assert "1 (100" in table  # which ended green
