"""The test search and the test page in the browser, on the hand-built histories of tests/hud/histories.py."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.test_hud_pages import SIZES, serious
from tests.hud import histories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def history(transactional_db, make_backend, settings, tmp_path):
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    return histories.build(make_backend)


def test_the_header_search_finds_the_test_and_its_grid_links_to_the_jobs(page, live_server, console_errors, history):
    page.goto(live_server.url + "/oot/")
    page.get_by_label("Search tests by id").fill("TESTOPS::TEST_ADD")
    page.keyboard.press("Enter")

    found = page.locator("table.tests-found tbody tr")
    expect(found).to_have_count(2)  # test_add, test_addmm: any case
    expect(found.first).to_contain_text(histories.ADD)
    found.first.get_by_role("link").click()

    expect(page.locator("h1")).to_have_text(histories.ADD)
    grid = page.locator("table.test-grid")
    expect(grid.locator("tbody tr")).to_have_count(3)
    expect(grid.locator("tbody tr").first).to_contain_text("acme/npu")
    rerun = history.jobs["npu", "4", 2]
    cell = grid.locator(f'td.cell.test > a[href$="/oot/acme/npu/jobs/{rerun.id}/"]')
    expect(cell).to_have_text("X2↻")  # two results at that SHA, the latest after pytest reruns
    expect(grid.locator("thead th.jobcol").nth(1)).to_contain_text("#12")
    expect(page.locator("main")).to_contain_text("never passed in 7d")
    cell.click()

    expect(page).to_have_url(re.compile(rf"/oot/acme/npu/jobs/{rerun.id}/$"))
    expect(page.get_by_role("link", name=histories.ADD, exact=True)).to_be_visible()  # back to the test
    assert console_errors == []


def test_the_test_pages_are_accessible_and_fit_a_phone(page, live_server, console_errors, screenshots, history):
    pages = {"tests": "/oot/tests/?q=add", "test": f"/oot/tests/{histories.ADD}/", "tests-short": "/oot/tests/?q=ad"}
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        for name, path in pages.items():
            assert page.goto(live_server.url + path).status == 200
            expect(page.locator("main h1")).to_be_visible()
            page.screenshot(path=str(screenshots / f"{name}-{size}.png"), full_page=True)
            assert serious(page) == [], f"{path} at {size}"
            width = page.evaluate("document.documentElement.scrollWidth")
            assert size == "desktop" or width <= viewport["width"], f"{path} is {width} px wide at {size}"
    assert console_errors == []
