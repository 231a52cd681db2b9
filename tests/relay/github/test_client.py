"""relay.github.client against the fake GitHub: App authentication and how GitHub's answers are classified."""

import pytest

from relay.github import client as github
from tests.fakes.github import Reply, app_key_generate

pytestmark = pytest.mark.django_db


def test_it_authenticates_as_the_app_installation(fake_github):
    github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={"x": 1})
    lookup, mint, dispatch = fake_github.requests
    assert (lookup.method, lookup.path) == ("GET", "/repos/org/a/installation")
    assert lookup.headers["authorization"].startswith("Bearer ")  # the App JWT
    assert mint.path == f"/app/installations/{fake_github.installation_id('org')}/access_tokens"
    assert dispatch.headers["authorization"].split()[1] in fake_github.tokens
    assert dispatch.json == {"event_type": "push", "client_payload": {"x": 1}}


def test_a_wrong_app_key_is_refused_by_github(fake_github, settings):
    settings.GITHUB_APP_PRIVATE_KEY = app_key_generate().private_pem
    with pytest.raises(github.GitHubError) as raised:
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={})
    assert raised.value.status == 401


def test_it_does_not_throttle_itself(fake_github):
    for i in range(5):
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={"i": i})
    # PyGithub's default throttle would space these writes at least 1 s apart.
    arrivals = [r.at for r in fake_github.dispatches()]
    assert len(arrivals) == 5
    assert all(later - earlier < 1 for earlier, later in zip(arrivals, arrivals[1:], strict=False))


@pytest.mark.parametrize(
    ("reply", "retryable"),
    [(Reply(500), True), (Reply(502), True), (Reply(422, {"message": "bad"}), False), (Reply(403), False)],
)
def test_failures_say_whether_trying_again_may_help(fake_github, reply, retryable):
    fake_github.script("POST", "/repos/org/a/dispatches", reply)
    with pytest.raises(github.GitHubError) as raised:
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={})
    assert raised.value.status == reply.status
    assert raised.value.retryable is retryable
    assert not isinstance(raised.value, github.RateLimited)


def test_a_primary_rate_limit_says_when_it_resets(fake_github):
    fake_github.script("POST", "/repos/org/a/dispatches", Reply.rate_limited(reset_in=100))
    with pytest.raises(github.RateLimited) as raised:
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={})
    assert 95 <= raised.value.wait_seconds <= 102


def test_a_secondary_rate_limit_says_how_long_to_wait(fake_github):
    fake_github.script("POST", "/repos/org/a/dispatches", Reply.retry_after(7, status=403))
    with pytest.raises(github.RateLimited) as raised:
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={})
    assert raised.value.wait_seconds == 7


def test_an_unreachable_github_is_retryable(fake_github, settings):
    fake_github.stop()
    with pytest.raises(github.GitHubError) as raised:
        github.repository_dispatch_create(repo="org/a", event_type="push", client_payload={})
    assert raised.value.retryable
    assert "unreachable" in str(raised.value)
