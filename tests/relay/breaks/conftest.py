import pytest

from tests.hud.failing_history import History
from tests.relay.breaks.history import BAD, GOOD, UP, sha


@pytest.fixture
def history(django_capture_on_commit_callbacks):
    return History(django_capture_on_commit_callbacks)


@pytest.fixture
def upstream_history(fake_github, settings):
    """GOOD, then five commits up to BAD: #11 (its PR-time run fails t1), #12 (touches torch/_ops.py), #13 (never
    tested), #14 (its PR-time run passes t1), then BAD (#15, touches docs)."""
    settings.UPSTREAM_REPO = UP
    settings.NOTIFY_RETRY_SECONDS = 0
    fake_github.commit_add(UP, GOOD)
    fake_github.commit_add(UP, sha(0xA1), pr=11, files=["torch/nn/functional.py"])
    fake_github.commit_add(UP, sha(0xA2), pr=12, files=["torch/_ops.py"])
    fake_github.commit_add(UP, sha(0xA3), pr=13, files=["aten/x.cpp"])
    fake_github.commit_add(UP, sha(0xA4), pr=14, files=["torch/y.py"])
    fake_github.commit_add(UP, BAD, pr=15, files=["docs/z.md"])
    return fake_github
