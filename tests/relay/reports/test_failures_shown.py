"""A classified failure on the HUD: matrix tooltip, job page (context and GitHub line link), PR page, failures page
and its JSON; a signature seen on two backends at one upstream SHA is marked probably upstream."""

from ootci.models import JobResult
from tests.relay.conftest import completed_failure

LINE = "ld: error: undefined symbol: at::native::copy_stub"


def test_the_failure_line_shows_on_matrix_job_and_pr_pages(downstream, failing_run, client):
    ci = downstream()
    gh_job = failing_run(ci.repo)
    completed_failure(ci)
    job = JobResult.objects.get()
    org, name = ci.repo.split("/")

    matrix = client.get(f"/oot/{org}/{name}/").content.decode()
    page = client.get(f"/oot/{org}/{name}/jobs/{job.pk}/").content.decode()
    pr = client.get("/oot/pr/4242/").content.decode()

    badge = '<span class="badge fc build" title="class decided by: log rule">build</span>'
    for html in (matrix, page, pr):
        assert badge in html and f'<code class="failure-line">{LINE}</code>' in html
    link = f"https://github.com/{ci.repo}/actions/runs/24033272679/job/{gh_job}#step:3:3"
    assert f'<a href="{link}">line 5 on GitHub ›</a>' in page
    assert "linker undefined reference" in page
    assert "python test/run_test.py\nbuilding\n<mark>" in page  # the context lines before the failure line
    assert 'class="failure-row"' in pr


def test_an_unclassified_success_shows_no_failure_line(downstream, failing_run, client):
    ci = downstream()
    failing_run(ci.repo)
    completed_failure(ci, conclusion="success")
    org, name = ci.repo.split("/")
    job = JobResult.objects.get()

    page = client.get(f"/oot/{org}/{name}/jobs/{job.pk}/").content.decode()

    assert "Why it failed" not in page and "failure-line" not in client.get(f"/oot/{org}/{name}/").content.decode()


def test_the_failures_page_ranks_signatures_and_marks_upstream_causes(downstream, failing_run, client):
    npu, xpu = downstream(repo="ascend/pytorch-npu"), downstream(repo="intel/pytorch-xpu")
    for ci in (npu, xpu):
        failing_run(ci.repo)
        completed_failure(ci)

    html = client.get("/oot/failures/").content.decode()
    data = client.get("/api/oot/failures/?days=30").json()

    assert '<span class="badge bad"' in html and "probably upstream</span>" in html
    assert 'aria-current="page">Failures</a>' in html
    (sig,) = data["signatures"]
    assert sig["signature"] == "ld: error: undefined symbol: at::native::copy_stub"
    assert (sig["jobs"], sig["probably_upstream"]) == (2, True)
    assert sig["backends"] == ["ascend/pytorch-npu", "intel/pytorch-xpu"]
    assert {e["backend_repo"] for e in sig["examples"]} == {"ascend/pytorch-npu", "intel/pytorch-xpu"}
    assert sig["first_seen"] <= sig["last_seen"] and data["days"] == 30


def test_the_failures_page_is_empty_outside_the_window(db, client):
    assert "No classified failures in the last 24 hours" in client.get("/oot/failures/?days=1").content.decode()
    assert client.get("/api/oot/failures/?days=abc").json() == {"days": 7, "signatures": []}


def test_an_l4_check_run_shows_the_failure_class_and_line(downstream, failing_run, fake_github):
    ci = downstream("L4", device="npu")
    gh_job = failing_run(ci.repo)

    completed_failure(ci)

    patches = fake_github.requests_to("PATCH", r"/repos/.*/check-runs/\d+")
    summary = patches[-1].json["output"]["summary"]
    link = f"https://github.com/{ci.repo}/actions/runs/24033272679/job/{gh_job}#step:3:3"
    assert "**Failure class: build** (log rule `linker undefined reference`)" in summary
    assert f"[line 5]({link}): `{LINE}`" in summary
