"""Fixtures of the roll-up tests (test_case_days, test_case_recent): a report store and a backend."""

import pytest


@pytest.fixture
def store(settings, tmp_path):
    """The intermediate store the reports' bytes go to (TEST_REPORTS_URL), a temporary folder."""
    settings.TEST_REPORTS_URL = tmp_path.as_uri()
    return tmp_path


@pytest.fixture
def npu(make_backend):
    return make_backend("acme/npu", "L2", device="npu")
