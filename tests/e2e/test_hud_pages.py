import re

import pytest
from playwright.sync_api import expect

from tests.hud import scenario

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def history(transactional_db):
    return scenario.build()


def test_every_page_loads_without_console_errors(page, live_server, history, console_errors, screenshots):
    pages = {
        "overview": "/oot/",
        "backend": "/oot/acme/npu/",
        "pull-request": "/oot/pr/101/",
        "job": f"/oot/acme/npu/jobs/{history.test_failure.id}/",
        "metrics": "/oot/metrics/",
    }
    for name, path in pages.items():
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        expect(page.locator("main h1")).to_be_visible()
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)
    assert console_errors == []


def test_a_matrix_cell_click_opens_the_job_detail(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    cell = page.locator(f'td.cell > a[href$="/jobs/{history.rerun.id}/"]')
    cell.hover()
    expect(page.locator("td.cell:hover .tip")).to_contain_text("attempt 2")
    cell.click()

    expect(page).to_have_url(re.compile(rf"/oot/acme/npu/jobs/{history.rerun.id}/$"))
    expect(page.locator("main")).to_contain_text("All attempts of this job")


def test_a_tooltip_can_be_pinned_and_escape_unpins_it(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    page.locator(f'td.cell > a[href$="/jobs/{history.test_failure.id}/"]').hover()
    page.locator("td.cell:hover .tip .pin").click()
    page.mouse.move(5, 5)

    expect(page.locator(".tip.pinned")).to_contain_text("test/test_ops.py::test_a")
    page.keyboard.press("Escape")
    expect(page.locator(".tip.pinned")).to_have_count(0)


def test_changing_the_window_updates_the_url(page, live_server, history):
    page.goto(live_server.url + "/oot/")

    page.get_by_role("group", name="Window").get_by_role("link", name="30d").click()

    expect(page).to_have_url(re.compile(r"/oot/\?days=30$"))
    expect(page.locator(f'tr[data-repo="{history.backend.repo}"]')).to_contain_text("42.9%")
    page.get_by_role("group", name="Event").get_by_role("link", name="Nightly").click()
    expect(page).to_have_url(re.compile(r"days=30&event=nightly"))
