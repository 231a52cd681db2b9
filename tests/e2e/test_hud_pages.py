import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import User
from django.core.management import call_command
from playwright.sync_api import expect

from tests.hud import scenario

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture
def history(transactional_db):
    return scenario.build()


def demo_pages() -> dict[str, str]:
    from ootci.models import JobResult

    failed = JobResult.objects.filter(conclusion="failure", backend__repo="ascend/pytorch-npu").first()
    pr = JobResult.objects.filter(conclusion="failure", pr_number__isnull=False).first().pr_number
    return {
        "overview": "/oot/",
        "backend": "/oot/ascend/pytorch-npu/",
        "backend-failing": "/oot/riscv/pytorch-rvv/?failing=1&days=30",
        "backend-l1": "/oot/example/hello-backend/",
        "pull-request": f"/oot/pr/{pr}/",
        "job": f"/oot/ascend/pytorch-npu/jobs/{failed.id}/",
        "metrics": "/oot/metrics/",
        "allowlist": "/oot/allowlist/",
        "readiness": "/oot/riscv/pytorch-rvv/readiness/",
        "failures": "/oot/failures/?days=30",
        "api": "/oot/api/",
        "not-found": "/oot/no/such-backend/",
    }


def serious(page) -> list[str]:
    """axe-core's serious and critical violations on the page (rule id: first offending element). Swagger UI's own
    markup (third-party, on the API page) is left out: it nests buttons and greys its method labels."""
    found = Axe().run(page, context={"exclude": [["#swagger-ui"]]}).response["violations"]
    return [f"{v['id']}: {v['nodes'][0]['html'][:120]}" for v in found if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("size", SIZES)  # one test per size: the two workers of the suite share the walk
def test_every_page_is_accessible_fits_and_keeps_to_the_csp(size, page, live_server, console_errors, screenshots):
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    pages = demo_pages()
    viewport = SIZES[size]
    page.set_viewport_size(viewport)
    for name, path in pages.items():
        response = page.goto(live_server.url + path)
        assert response.status == (404 if name == "not-found" else 200), path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        expect(page.locator("main h1").first).to_be_visible()
        if (
            name == "api"
        ):  # the one page that fetches after its load (Swagger UI, the schema); the others are served whole
            page.wait_for_load_state("networkidle")
        page.screenshot(path=str(screenshots / f"{name}-{size}.png"), full_page=True)
        assert serious(page) == [], f"{path} at {size}"
        width = page.evaluate("document.documentElement.scrollWidth")
        if size == "phone" or name == "overview":
            assert width <= viewport["width"], f"{path} is {width} px wide at {size}"
    if size == "desktop":
        page.emulate_media(color_scheme="dark")
        for name in ("overview", "backend", "pull-request", "job", "metrics"):
            page.goto(live_server.url + pages[name])
            page.screenshot(path=str(screenshots / f"{name}-dark.png"), full_page=True)
            assert serious(page) == [], f"{pages[name]} in dark mode"
    # The 404 page's own status is the one console error a browser reports for it.
    assert [e for e in console_errors if "404" not in e] == []


def test_the_admin_keeps_working_under_the_csp(page, live_server, console_errors, screenshots, history):
    User.objects.create_superuser("root", "root@example.com", "a-long-test-password")
    page.goto(live_server.url + "/admin/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("a-long-test-password")
    page.get_by_role("button", name="Log in").click()
    page.goto(live_server.url + "/admin/ootci/backend/")
    page.locator("input.action-select").first.check()  # the admin's actions.js, a script from its static files
    expect(page.locator(".action-counter")).to_contain_text("1 of 1 selected")
    page.screenshot(path=str(screenshots / "admin-backends-desktop.png"), full_page=True)
    page.goto(live_server.url + f"/admin/ootci/backend/{history.backend.id}/change/")
    expect(page.locator("#id_repo")).to_have_value("acme/npu")
    assert console_errors == []


def test_the_tooltip_is_inside_the_viewport_and_its_link_works(page, live_server, history):
    page.set_viewport_size({"width": 700, "height": 400})
    page.goto(live_server.url + "/oot/acme/npu/")
    cells = page.locator("table.matrix tbody td.cell > a")
    cell = cells.last  # the rightmost column: its tooltip has to flip left

    cell.hover()
    tip = page.locator(".tip.open")
    expect(tip).to_have_count(1)
    box = tip.bounding_box()
    assert box["x"] >= 0 and box["y"] >= 0
    assert box["x"] + box["width"] <= 700 and box["y"] + box["height"] <= 400
    tip.get_by_role("link", name="details ›").hover()
    tip.get_by_role("link", name="details ›").click()
    expect(page).to_have_url(re.compile(r"/oot/acme/npu/jobs/\d+/$"))


def test_the_matrix_header_sticks_while_its_rows_scroll(page, live_server, history):
    page.set_viewport_size({"width": 1000, "height": 220})
    page.goto(live_server.url + "/oot/acme/npu/")
    wrap = page.locator(".matrix-wrap")
    header = page.locator("table.matrix thead th.t")

    wrap.evaluate("box => { box.scrollTop = box.scrollHeight; }")

    assert wrap.evaluate("box => box.scrollTop") > 0
    assert abs(header.bounding_box()["y"] - wrap.bounding_box()["y"]) < 3


def test_a_lost_dispatch_badge_is_visible_in_the_matrix(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    badge = page.locator("table.matrix td.title .badge", has_text="lost")
    expect(badge).to_be_visible()
    cell = badge.locator("xpath=..").bounding_box()
    box = badge.bounding_box()
    assert box["x"] + box["width"] <= cell["x"] + cell["width"]


def test_a_tooltip_can_be_pinned_and_escape_unpins_it(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    page.locator(f'td.cell > a[href$="/jobs/{history.test_failure.id}/"]').hover()
    page.locator(".tip.open .pin").click()
    page.mouse.move(5, 5)

    expect(page.locator(".tip.pinned")).to_contain_text("test/test_ops.py::test_a")
    page.keyboard.press("Escape")
    expect(page.locator(".tip.pinned")).to_have_count(0)
    expect(page.locator(".tip.open")).to_have_count(0)


def test_the_matrix_is_one_tab_stop_with_arrow_keys(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")
    links = page.locator("table.matrix tbody td.cell > a")
    assert links.evaluate_all("all => all.filter(a => a.tabIndex === 0).length") == 1
    assert page.locator(".tip a, .tip button").evaluate_all("all => all.every(n => n.tabIndex === -1)")

    links.first.focus()
    expect(page.locator(".tip.open")).to_have_count(1)
    first = page.evaluate("document.activeElement.href")
    page.keyboard.press("ArrowRight")
    second = page.evaluate("document.activeElement.href")
    page.keyboard.press("ArrowLeft")

    assert second != first and "/jobs/" in second
    assert page.evaluate("document.activeElement.href") == first


def test_a_matrix_cell_click_opens_the_job_detail(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    cell = page.locator(f'td.cell > a[href$="/jobs/{history.rerun.id}/"]')
    cell.hover()
    expect(page.locator(".tip.open")).to_contain_text("attempt 2")
    cell.click()

    expect(page).to_have_url(re.compile(rf"/oot/acme/npu/jobs/{history.rerun.id}/$"))
    expect(page.locator("main")).to_contain_text("All attempts of this job")
    expect(page.locator("tr.current")).to_contain_text("this attempt")


def test_a_refresh_keeps_focus_and_open_sections(page, live_server, history):
    page.clock.install()
    page.goto(live_server.url + "/oot/pr/101/")
    page.locator("details.earlier summary").click()
    link = page.locator("#live a[href='/oot/acme/npu/']")
    link.focus()

    with page.expect_response(lambda r: r.request.headers.get("x-hud-fragment") == "live") as refresh:
        page.clock.run_for(61_000)
    expect(page.locator("#refresh-status")).to_contain_text(re.compile(r"Updated \d\d:\d\d UTC"))

    assert "<html" not in refresh.value.text()  # only the live fragment travels
    expect(page.locator("details.earlier")).to_have_attribute("open", "")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "/oot/acme/npu/"


def test_the_refresh_pauses_while_a_tooltip_is_pinned(page, live_server, history):
    page.clock.install()
    page.goto(live_server.url + "/oot/acme/npu/")
    page.locator(f'td.cell > a[href$="/jobs/{history.test_failure.id}/"]').hover()
    page.locator(".tip.open .pin").click()

    page.clock.run_for(61_000)

    expect(page.locator("#refresh-status")).to_contain_text("Paused while a tooltip is pinned")


def test_changing_the_window_updates_the_url(page, live_server, history):
    page.goto(live_server.url + "/oot/")

    page.get_by_role("group", name="Window").get_by_role("link", name="30d").click()

    expect(page).to_have_url(re.compile(r"/oot/\?days=30$"))
    expect(page.locator(f'tr[data-repo="{history.backend.repo}"]')).to_contain_text("42.9%")
    page.get_by_role("group", name="Event").get_by_role("link", name="Nightly").click()
    expect(page).to_have_url(re.compile(r"days=30&event=nightly"))


def test_the_job_filter_and_hide_green_live_in_the_url(page, live_server, history):
    page.goto(live_server.url + "/oot/acme/npu/")

    page.get_by_label("Show only jobs whose name contains").fill("lint")
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(r"job=lint"))
    expect(page.locator("table.matrix th.jobcol")).to_have_count(1)
    page.get_by_role("link", name="Hide green jobs").click()
    expect(page).to_have_url(re.compile(r"job=lint&hide_green=1|hide_green=1&job=lint"))
