"""Where breaks show (issue 28): GET /api/oot/<org>/<repo>/breaks/ and its schema entry, the breaks page with its
bisection button for maintainers only, the failing-tests view of the run, the test page."""

import pytest
from django.contrib.auth.models import Permission, User

from ootci.models import BisectStep, Break, BreakTest, Suspect
from tests.hud import builders

pytestmark = pytest.mark.django_db

GOOD, BAD = "a0" * 20, "af" * 20
TEST = "test_x.py::TestX::t1"


@pytest.fixture
def broken(make_backend):
    backend = make_backend("acme/npu", "L2", bisect=True)
    good = builders.job(backend, name="test-1", event_type="nightly", head_sha=GOOD, finished=builders.ago(hours=30))
    bad = builders.job(
        backend,
        name="test-1",
        conclusion="failure",
        event_type="nightly",
        head_sha=BAD,
        finished=builders.ago(hours=5),
        run_url="https://github.com/acme/npu/actions/runs/5",
    )
    builders.report_with(good, {"test_x.TestX::t1": "passed"})
    builders.report_with(bad, {"test_x.TestX::t1": ("failed", 0, "Traceback\nAssertionError: boom")})
    brk = Break.objects.create(upstream_repo="pytorch/pytorch", good_sha=GOOD, bad_sha=BAD, commits=["c1" * 20, BAD])
    BreakTest.objects.create(
        brk=brk, backend=backend, test_id=TEST, message="Traceback\nAssertionError: boom", job=bad, good_job=good
    )
    evidence = [
        {
            "kind": "pr_run_failed",
            "text": "acme/npu: its PR-time run failed it",
            "url": "https://x/run/9",
            "line": "AssertionError: boom",
        }
    ]
    Suspect.objects.create(
        brk=brk,
        sha="c1" * 20,
        position=0,
        rank=1,
        tier="strong",
        pr_number=11,
        title="Fix ops",
        url="https://github.com/pytorch/pytorch/pull/11",
        evidence=evidence,
    )
    Suspect.objects.create(brk=brk, sha=BAD, position=1, rank=2, tier="untested", pr_number=15, title="Docs")
    return brk


def test_the_api_lists_each_break_with_runs_tests_and_ranked_suspects(client, broken):
    response = client.get("/api/oot/acme/npu/breaks/")
    assert response.status_code == 200
    (b,) = response.json()
    assert (b["id"], b["state"], b["good_sha"], b["bad_sha"], b["commits"]) == (broken.pk, "open", GOOD, BAD, 2)
    assert [(s["rank"], s["tier"], s["pr_number"]) for s in b["suspects"]] == [(1, "strong", 11), (2, "untested", 15)]
    assert b["suspects"][0]["evidence"][0]["url"] == "https://x/run/9"
    assert b["tests"][0] | {"fixed": None} == b["tests"][0] and b["tests"][0]["line"] == "AssertionError: boom"
    assert {r["role"] for r in b["runs"]} == {"failing", "previous"}
    assert b["bisection"] == {"state": "", "note": "", "culprit": "", "backend": "", "steps": []}


def test_the_api_refuses_a_bad_state_and_an_unknown_backend(client, broken):
    response = client.get("/api/oot/acme/npu/breaks/?state=maybe")
    assert response.status_code == 400 and "state must be one of" in response.json()["detail"]
    assert client.get("/api/oot/acme/npu/breaks/?state=closed").json() == []
    response = client.get("/api/oot/nobody/here/breaks/")
    assert response.status_code == 404 and response.json()["detail"]


def test_the_schema_describes_the_breaks_api(client):
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/oot/{org}/{repo}/breaks/"]["get"]
    assert operation["operationId"] == "oot_backend_breaks"
    assert "Break" in schema["components"]["schemas"] and "Suspect" in schema["components"]["schemas"]


def test_the_page_shows_the_suspects_and_the_bisect_button_only_to_maintainers(client, broken):
    page = client.get("/oot/acme/npu/breaks/").content.decode()
    assert "Fix ops" in page and "strong" in page and "https://x/run/9" in page
    assert "Bisect on acme/npu" not in page and "sign in" in page
    user = User.objects.create_user("mia")
    user.user_permissions.add(Permission.objects.get(codename="change_dispatch"))
    client.force_login(user)
    page = client.get("/oot/acme/npu/breaks/").content.decode()
    assert f'action="/api/oot/acme/npu/breaks/{broken.pk}/bisect/"' in page


def test_the_page_shows_the_bisection_steps(client, broken):
    BisectStep.objects.create(brk=broken, backend=broken.tests.get().backend, sha="c1" * 20, state="bad")
    Break.objects.filter(pk=broken.pk).update(bisection="found", culprit_sha="c1" * 20, bisect_note="c1 fails first")
    page = client.get("/oot/acme/npu/breaks/").content.decode()
    assert "found" in page and "c1 fails first" in page and "c1c1c1c" in page and "Bisect on" not in page


def test_the_failing_tests_view_of_the_run_and_the_test_page_show_the_break(client, broken):
    page = client.get("/oot/acme/npu/?view=failing-tests").content.decode()
    assert "Breaks at this run" in page and "Fix ops" in page
    page = client.get(f"/oot/tests/{TEST}/").content.decode()
    assert "Breaks of this test" in page and "Fix ops" in page
