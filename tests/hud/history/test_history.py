"""The test search and the test page (and their JSON API) on the hand-built histories of tests/hud/histories.py."""

from html import unescape
from urllib.parse import quote

import pytest

from hud.history import queries as history_queries
from tests.hud import histories
from tests.hud.builders import job, report_with
from tests.hud.histories import ADD, ADDMM, LAYER, S

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(make_backend, settings, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    return histories.build(make_backend)


def by_repo(found) -> dict:
    return {h.backend.repo: h for h in found.backends}


def test_the_grid_has_a_column_per_tested_sha_newest_first_and_the_latest_result_in_each_cell(history):
    found = history_queries.page(generic_id=ADD, days=7)

    assert [(c.sha, c.pr_number) for c in found.columns] == [
        (S["5"], None),
        (S["4"], 12),
        (S["3"], None),
        (S["2"], 11),
        (S["1"], None),
    ]
    rows = by_repo(found)
    npu = [c and (c.letter, c.outcome, c.results, c.reruns) for c in rows["acme/npu"].cells]
    assert npu == [("X", "infra", 1, 0), ("X", "test", 2, 2), ("X", "test", 1, 0), ("O", "success", 1, 0)] + [
        ("O", "success", 1, 0)
    ]
    assert [c and c.letter for c in rows["quiet/mps"].cells] == ["O", None, "X", None, None]
    rerun = rows["acme/npu"].cells[1]
    assert rerun.job_id == history.jobs["npu", "4", 2].id  # the latest attempt at that SHA


def test_each_backend_says_since_when_it_fails_and_its_pass_rate(history):
    rows = by_repo(history_queries.page(generic_id=ADD, days=7))

    npu, xpu, mps = rows["acme/npu"], rows["intel/xpu"], rows["quiet/mps"]
    assert (npu.passed, npu.failed, npu.skipped, npu.pass_rate) == (2, 3, 1, 40.0)
    assert npu.started_failing.first.job_id == history.jobs["npu", "3", 1].id  # the first failure after the last pass
    assert (npu.started_failing.after_pass, npu.started_failing.failures) == (True, 3)
    assert (xpu.pass_rate, xpu.started_failing.after_pass) == (0.0, False)  # never passed in the window
    assert xpu.started_failing.first.sha == S["3"]
    assert (mps.pass_rate, mps.started_failing) == (50.0, None)  # passing now
    assert [h.backend.repo for h in history_queries.page(generic_id=ADD, days=7).backends] == [
        "acme/npu",
        "intel/xpu",
        "quiet/mps",
    ]  # failing now first, then by repo


def test_a_longer_window_finds_the_pass_before_the_failures(history):
    rows = by_repo(history_queries.page(generic_id=ADD, days=30))

    xpu = rows["intel/xpu"]
    assert (xpu.pass_rate, xpu.started_failing.after_pass, xpu.started_failing.first.sha) == (33.3, True, S["3"])
    assert len(history_queries.page(generic_id=ADD, days=30).columns) == 6


def test_the_last_failure_keeps_its_message(history):
    rows = by_repo(history_queries.page(generic_id=ADD, days=7))

    assert rows["acme/npu"].last_failure.status == "error"
    assert rows["acme/npu"].last_failure.message.startswith("RuntimeError: last one")
    assert rows["quiet/mps"].last_failure.moment.sha == S["3"]


def test_search_finds_ids_in_any_case_failing_most_recently_first(history):
    found = history_queries.search(text="ADD", days=7, page=1)

    assert [h.generic_id for h in found.hits] == [ADD, ADDMM, LAYER]
    assert [(h.runs, h.failures) for h in found.hits] == [(9, 6), (1, 1), (1, 0)]
    assert found.hits[2].last_failure is None and not found.has_next


def test_search_pages_fifty_at_a_time_in_code_point_order(history):
    pages = [history_queries.search(text="bulk", days=7, page=n) for n in (1, 2, 3, 4)]

    assert [len(p.hits) for p in pages] == [50, 50, 21, 0]
    assert [p.has_next for p in pages] == [True, True, False, False]
    assert pages[0].hits[0].generic_id == "test_bulk.py::TestBulk::test_zz_fails"
    assert [h.generic_id.rsplit("_", 1)[1] for h in pages[2].hits[-3:]] == ["117", "B", "a"]


def test_the_test_page_shows_the_grid_with_links_to_the_jobs(client, history):
    html = client.get(f"/oot/tests/{quote(ADD)}/").content.decode()

    assert "test_ops.py::TestOps::test_add" in html
    assert f'href="/oot/acme/npu/jobs/{history.jobs["npu", "4", 2].id}/"' in html
    assert "#12 4444444" in html and "40.0%" in html and "never passed in 7d" in html
    assert "RuntimeError: last one" in html


@pytest.mark.parametrize(
    "generic_id",
    [
        "test/nn/test_conv.py::TestConvNN{DEVICE}::test_conv_{device}_float32",
        "test_x.py::TestX::test_y[a/b-c::d {e} 50% ?#&]",
        "tests/ünï.py::Tëst::test_€",
    ],
)
def test_any_generic_id_round_trips_through_its_url(client, make_backend, settings, tmp_path, generic_id):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    npu = make_backend("acme/npu", "L2", device="npu")
    file, klass, name = generic_id.split("::", 2)
    module = file.removesuffix(".py").replace("/", ".")
    report_with(job(npu, name="t"), {f"{module}.{klass}::{name}": "failed"})
    html = client.get(f"/oot/acme/npu/jobs/{npu.job_results.get().id}/").content.decode()
    link = unescape(html.split('title="This test on every backend"')[0].rsplit('href="', 1)[1].split('"')[0])

    page = client.get(link)
    data = client.get("/api" + link).json()

    assert page.status_code == 200 and data["generic_id"] == generic_id
    assert [c["letter"] for c in data["backends"][0]["cells"]] == ["X"]


def test_short_and_empty_searches_ask_for_more_without_searching(client, history):
    assert "Type at least 3 characters" in client.get("/oot/tests/?q=ad").content.decode()
    empty = client.get("/oot/tests/")
    assert empty.status_code == 200 and "Type at least 3 characters" in empty.content.decode()
    assert "test_add" not in empty.content.decode()


def test_the_search_page_links_each_test_and_shrugs_off_bad_input(client, history):
    html = client.get("/oot/tests/?q=addmm&page=abc&days=²").content.decode()
    assert f'href="/oot/tests/{quote(ADDMM, safe="/:")}/"' in html

    huge = client.get("/oot/tests/?q=" + "a" * 5000)
    assert huge.status_code == 400 and "at most 200 characters" in huge.content.decode()
    assert client.get("/oot/tests/?q=nothing-like-it").status_code == 200


def test_the_api_answers_as_the_pages(client, history):
    found = client.get("/api/oot/tests/?q=add").json()
    page = client.get(f"/api/oot/tests/{quote(ADD)}/?days=30").json()

    assert [h["generic_id"] for h in found["hits"]] == [ADD, ADDMM, LAYER]
    assert found["hits"][0]["pass_rate"] == pytest.approx(33.3)
    assert len(page["columns"]) == 6 and page["days"] == 30
    npu = page["backends"][0]
    assert npu["backend"]["repo"] == "acme/npu" and npu["started_failing"]["first"]["sha"] == S["3"]
    assert npu["cells"][-1] == {**npu["cells"][-1], "letter": "O", "status": "passed"}


@pytest.mark.parametrize(
    "query",
    ["q=ad", "q=" + "a" * 201, "q=add&page=abc", "q=add&page=0", "q=add&days=5", "q=add&page=²", ""],
)
def test_the_api_refuses_bad_input_with_a_detail(client, db, query):
    response = client.get(f"/api/oot/tests/?{query}")

    assert response.status_code == 400
    assert response.json()["detail"]


def test_the_test_api_refuses_a_bad_window_and_an_impossible_id(client, db):
    assert client.get("/api/oot/tests/x::y/?days=abc").status_code == 400
    assert client.get("/api/oot/tests/" + "x" * 1001 + "/").status_code == 404
    assert client.get("/api/oot/tests/a%00b/").json() == {"detail": "No test has this id"}


def test_a_nul_in_the_search_or_the_id_is_a_4xx(client, db):
    """PostgreSQL cannot compare text holding NUL: it is refused before any query."""
    search = client.get("/oot/tests/?q=ab%00cd")
    assert search.status_code == 400 and "no NUL character" in search.content.decode()
    assert client.get("/api/oot/tests/?q=ab%00cd").status_code == 400
    assert client.get("/oot/tests/a%00b/").status_code == 404


def test_the_schema_lists_the_test_endpoints(client, db):
    paths = client.get("/api/schema/?format=json").json()["paths"]

    assert "/api/oot/tests/" in paths and "/api/oot/tests/{generic_id}/" in paths
    assert {p["name"] for p in paths["/api/oot/tests/"]["get"]["parameters"]} == {"q", "days", "page"}


def test_job_and_pr_pages_link_failing_tests_to_their_test_page(client, history):
    failed = history.jobs["npu", "4", 2]
    html = client.get(f"/oot/acme/npu/jobs/{failed.id}/").content.decode()

    assert f'<a href="/oot/tests/{quote(ADD, safe="/:")}/" title="This test on every backend">' in html
    pr = client.get("/oot/pr/12/").content.decode()
    assert pr.count(f'<a href="/oot/tests/{quote(ADD, safe="/:")}/"') == 1  # under the failing latest attempt


def test_a_test_without_results_in_the_window_says_so(client, history):
    response = client.get("/oot/tests/no_such.py::T::test_x/")

    assert response.status_code == 200
    assert "No results of this test in the last 7 days" in response.content.decode()
