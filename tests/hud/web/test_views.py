import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.hud import scenario

pytestmark = pytest.mark.django_db


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def get(client, url, status=200):
    response = client.get(url)
    assert response.status_code == status, response.content[:500]
    return response.content.decode()


def test_the_overview_shows_the_hand_counted_figures(client):
    s = scenario.build()

    html = get(client, "/oot/")

    row = text(html.split(f'data-repo="{s.backend.repo}"')[1].split("</tr>")[0])
    # repo, running, pass rate + band, successes, test and infra failures (lost), total, queue p50 / p90, run p50
    assert "acme/npu npu · 1 running 33.3% poor 2 1 3 (1 lost) 6 2.5m / 3.7m 4.2m" in row
    # the L3 gates over 14 days; the missed ones are marked by more than colour
    gates = "queue 2.5 min · overrun 0 % · ✗ missed: E2E p50 12.5 h · ✗ missed: timeout 14.29 %"
    assert f"not yet eligible for L3: 2 gate(s) not met {gates}" in row
    assert "How we count" in html
    assert "Lost (no callback)" in html and "Waiting for retry" in html


def test_the_overview_follows_the_window_and_event_parameters(client):
    scenario.build()

    assert "42.9%" in get(client, "/oot/?days=30")
    assert "100.0%" in get(client, "/oot/?event=push")
    assert "0.0%" in get(client, "/oot/?event=nightly")


@pytest.mark.parametrize("query", ["?days=abc", "?days=3", "?event=bogus", "?days=-1&event=", "?page=x&failing=maybe"])
def test_bad_parameters_fall_back_to_defaults(client, query):
    scenario.build()

    assert "33.3%" in get(client, f"/oot/{query}")
    assert "33.3%" in get(client, f"/oot/acme/npu/{query}")


def test_the_backend_page_shows_cards_and_the_matrix(client):
    s = scenario.build()

    html = get(client, "/oot/acme/npu/")

    assert "@ann" in html and "L2" in html
    assert "33.3%" in html and "2/6 jobs" in html
    assert "16.7%" in html  # timeout rate
    assert "#101" in html and "#103" in html and "#102" not in html
    assert "1 lost" in html
    assert f"/oot/acme/npu/jobs/{s.rerun.id}/" in html
    assert "attempt 2" in html


def test_the_backend_page_matches_repos_ignoring_case(client):
    scenario.build()

    assert "acme/npu" in get(client, "/oot/ACME/Npu/")


def test_failing_only_hides_green_rows(client, make_backend):
    s = scenario.build()

    html = get(client, "/oot/acme/npu/?event=push&failing=1")

    assert "Nothing failed" in html
    assert s.backend


def test_push_and_nightly_views_are_keyed_by_sha(client):
    s = scenario.build()

    nightly = get(client, "/oot/acme/npu/?event=nightly")

    assert "nightly / full" in nightly and "ffffff" in nightly and "#101" not in nightly
    assert f"/oot/acme/npu/jobs/{s.nightly.id}/" in nightly


def test_an_empty_matrix_says_what_to_do(client, make_backend):
    make_backend("new/npu")

    html = get(client, "/oot/new/npu/")

    assert "No pull-request results in the last 7 days" in html
    assert "Results appear as soon as new/npu" in html


def test_the_pr_page_shows_each_backend_and_a_summary(client):
    s = scenario.build()

    html = get(client, "/oot/pr/101/")

    assert "Fix index_put" in html and "ciflow/oot/npu" in html and "aaaaaaa" in html
    assert "2/7 passed" in html and "3 failed" in html and "1 running" in html
    assert "1 earlier attempt" in html
    assert "test failure" in html and "infrastructure failure" in html
    assert s.backend.repo in html


def test_the_pr_page_shows_waiting_and_lost_backends(client):
    scenario.build()

    assert "Waiting: dispatched" in get(client, "/oot/pr/104/")
    assert "never called back" in get(client, "/oot/pr/103/")


def test_the_job_page_shows_every_field_and_attempt(client):
    s = scenario.build()

    html = get(client, f"/oot/acme/npu/jobs/{s.test_failure.id}/")

    assert "test/test_ops.py::test_a" in html
    assert "10 passed, 1 failed, 0 skipped" in html
    assert "All attempts of this job" in html
    rerun = get(client, f"/oot/acme/npu/jobs/{s.rerun.id}/")
    assert rerun.count('class="cell ') >= 3  # header letter + two attempt rows


def test_the_metrics_page_draws_gaps_and_a_table(client):
    scenario.build()

    html = get(client, "/oot/metrics/?days=14")

    assert "<svg" in html and "no runs" in html
    assert "Day (UTC)" in html


@pytest.mark.parametrize(
    "url", ["/oot/nobody/nothing/", "/oot/pr/424242/", "/oot/acme/npu/jobs/999999/", "/oot/nobody/nothing/jobs/1/"]
)
def test_unknown_backends_prs_and_jobs_are_404(client, url):
    scenario.build()

    get(client, url, status=404)


def test_a_job_of_another_backend_is_404(client, make_backend):
    s = scenario.build()
    make_backend("other/npu")

    get(client, f"/oot/other/npu/jobs/{s.rerun.id}/", status=404)


def test_the_pr_box_jumps_to_the_pr_page(client):
    assert client.get("/oot/pr/?number=%23101")["Location"] == "/oot/pr/101/"
    assert client.get("/oot/pr/?number=abc")["Location"] == "/oot/"


def test_an_empty_allowlist_says_how_to_add_backends(client, db):
    html = get(client, "/oot/")

    assert "No backends yet" in html and "import_allowlist" in html
    assert "No backends shown on the HUD yet" in get(client, "/oot/metrics/")


def test_the_navigation_links_every_page_and_the_admin(client, db):
    html = get(client, "/oot/")

    for href in (
        'href="/oot/"',
        'href="/oot/metrics/"',
        'href="/admin/"',
        'href="/oot/api/"',
        'href="/oot/allowlist/"',
    ):
        assert href in html
    assert "/oot/pr/" in html


@pytest.mark.parametrize(
    ("url", "queries"),
    [
        # the allowlist; the figures' statement and their lost dispatches; the readiness statement, its lost
        # dispatches and the gate notices; relay health (dispatches, deliveries, rejections); silent backends (the
        # backends, their newest nightly/periodic results, the last PR dispatches of each backend that gets them (one
        # backend here), which of those were answered)
        ("/oot/", 13),
        ("/oot/?days=30&event=push", 13),
        # the allowlist; the readiness statement, its lost dispatches; the gate notices; what the verdicts did (the
        # exonerations by verdict, the relay's re-runs); whether it is silent (4); its coverage (the ledger's runs)
        ("/oot/acme/npu/readiness/", 11),
        # the allowlist; the cards (2); the lost dispatches' SHAs; the store's SHA rows and those of the lost SHAs;
        # the cells; the PR titles; the failed cells' failure lines (hud.failing.lines, one query however many); which
        # re-run attempts the relay started (only when a cell is a re-run: here one is); whether it is silent (4);
        # where the cells ran (their environments), the hardware share (two index-only counts), the sick runners
        ("/oot/acme/npu/", 18),
        # + the first failing tests of its failing jobs, + their failure lines; + its head's jobs and their failing
        # cases (hud.failing.classes, which looks for baselines only when a test fails)
        ("/oot/pr/101/", 8),
        ("/oot/acme/npu/jobs/{job}/", 7),  # + its test reports, + its failure line, + its environment
        ("/oot/failures/", 2),
        ("/oot/metrics/", 3),
    ],
)
def test_query_counts_are_pinned(client, url, queries):
    s = scenario.build()
    for n in range(5):  # more rows must not mean more queries
        scenario_extra(s, n)

    with CaptureQueriesContext(connection) as captured:
        get(client, url.format(job=s.rerun.id))

    assert len(captured) == queries, [q["sql"][:120] for q in captured]


def scenario_extra(s, n):
    from tests.hud.builders import ago, dispatch, job, pull_request

    pr = pull_request(200 + n, f"{n}" * 40)
    job(s.backend, name=f"extra-{n}", dispatch_=dispatch(s.backend, sha=pr.head_sha, at=ago(hours=3), pr=pr))


def test_every_page_renders_the_demo_data(client, db):
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115

    overview = get(client, "/oot/")
    assert "ascend/pytorch-npu" in overview and "holds L4" in overview
    assert "example/hello-backend" in overview
    backend = get(client, "/oot/ascend/pytorch-npu/")
    assert "npu-ci / build" in backend
    assert "nightly / full-suite" in get(client, "/oot/ascend/pytorch-npu/?event=nightly&days=30")
    from ootci.models import JobResult, PullRequest

    pr = PullRequest.objects.order_by("-number").first()
    assert pr.title in get(client, f"/oot/pr/{pr.number}/")
    job = JobResult.objects.filter(backend__repo="ascend/pytorch-npu").first()
    assert job.job_name in get(client, f"/oot/ascend/pytorch-npu/jobs/{job.id}/")
    assert "ascend/pytorch-npu" in get(client, "/oot/metrics/?days=90")


def test_a_refresh_gets_only_the_live_fragment(client):
    scenario.build()

    for url in ("/oot/", "/oot/acme/npu/", "/oot/pr/101/", "/oot/metrics/"):
        response = client.get(url, headers={"X-HUD-Fragment": "live"})
        fragment = response.content.decode()
        assert response.status_code == 200
        assert "<html" not in fragment and 'aria-label="Main"' not in fragment
        assert "X-HUD-Fragment" in response["Vary"]
        assert text(fragment) and text(fragment) in text(get(client, url))


def test_an_unchanged_page_is_answered_304(client):
    scenario.build()

    first = client.get("/oot/acme/npu/", headers={"X-HUD-Fragment": "live"})
    again = client.get("/oot/acme/npu/", headers={"X-HUD-Fragment": "live", "If-None-Match": first["ETag"]})

    assert first["ETag"] and again.status_code == 304 and again.content == b""


def test_pages_are_compressed(client):
    scenario.build()

    response = client.get("/oot/acme/npu/", headers={"Accept-Encoding": "gzip"})

    assert response["Content-Encoding"] == "gzip"
    assert len(response.content) < len(get(client, "/oot/acme/npu/")) / 3


def test_pages_and_the_admin_send_a_strict_csp(client):
    for url in ("/oot/", "/admin/login/"):
        policy = client.get(url)["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "style-src 'self';" in policy and "unsafe-inline" not in policy


def test_no_template_has_an_inline_script_or_style():
    from pathlib import Path

    for template in (Path(__file__).resolve().parents[3] / "templates").rglob("*.html"):
        source = template.read_text()
        assert "style=" not in source and "<style" not in source, template
        assert re.search(r"<script(?![^>]*\bsrc=)", source) is None, template


def test_the_job_filter_and_hide_green_pick_columns(client):
    scenario.build()

    lint = get(client, "/oot/acme/npu/?job=LINT")
    assert lint.count('class="jobcol"') == 1 and "ci / lint" in lint
    hidden = get(client, "/oot/acme/npu/?hide_green=1")
    assert "ci / docs" not in hidden and "ci / test" in hidden
    assert "Clear the job filter" in get(client, "/oot/acme/npu/?job=nothing-like-this")


def test_shards_are_grouped_under_one_header(client, make_backend):
    from tests.hud.builders import job

    backend = make_backend("shard/npu")
    for n in (1, 2, 3):
        job(backend, name=f"test (default, {n}, 3)", event_type="nightly")

    html = get(client, "/oot/shard/npu/?event=nightly")

    assert 'colspan="3" class="group">ci / test (default)</th>' in html
    assert "<span>1/3</span>" in html and "<span>3/3</span>" in html


def test_the_pr_page_puts_failing_backends_first_with_their_first_failed_tests(client, make_backend):
    from tests.hud.builders import ago, dispatch, job

    s = scenario.build()
    green = make_backend("aaa/green")  # sorts first by name, but it passed
    job(
        green,
        name="build",
        dispatch_=dispatch(green, sha="a" * 40, at=ago(days=3), pr=s.test_failure.dispatch.delivery.pull_request),
    )

    html = get(client, "/oot/pr/101/")

    assert html.index("acme/npu") < html.index("aaa/green")
    assert 'class="group failing"' in html
    assert "First failed tests of ci / test" in html and "test/test_ops.py::test_a" in html


def test_the_job_page_marks_the_current_attempt_and_says_how_long_a_job_runs(client):
    from ootci.models import JobResult

    s = scenario.build()

    html = get(client, f"/oot/acme/npu/jobs/{s.first_attempt.id}/")
    assert html.count("this attempt") == 1 and 'aria-current="true"' in html
    running = JobResult.objects.get(backend=s.backend, status="in_progress")
    page = text(get(client, f"/oot/acme/npu/jobs/{running.id}/"))
    assert "running for 1.5h" in page
    assert 'data-refresh="60"' in get(client, f"/oot/acme/npu/jobs/{running.id}/")


def test_the_404_page_uses_the_hud_layout_and_says_what_is_missing(client, db):
    html = get(client, "/oot/nobody/nothing/", status=404)

    assert "nobody/nothing is not an allowlisted backend" in html
    assert 'href="/oot/allowlist/"' in html and 'class="nav"' in html


def test_the_allowlist_page_lists_backends_and_offers_downloads(client):
    scenario.build()

    html = get(client, "/oot/allowlist/")

    assert "acme/npu" in html and "@ann" in html
    assert 'download="allowlist.yml"' in html and 'download="allowlist.json"' in html
    assert client.get("/api/oot/allowlist/?format=json").json()
    assert "acme/npu" in client.get("/api/oot/allowlist/?format=yaml").content.decode()


def test_the_api_page_serves_swagger_ui_from_our_static_files(client, db):
    html = get(client, "/oot/api/")

    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower()


def test_an_l1_backend_page_says_it_sends_nothing_back(client, make_backend):
    make_backend("quiet/npu", level="L1")

    assert "sends no results back" in get(client, "/oot/quiet/npu/")
