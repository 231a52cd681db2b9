"""The room rules of contracts.toml hold for the project, and each rule fails when broken."""

import shutil
import subprocess
import sys

import pytest

from tests import contracts
from tests.contracts import ROOT


def test_the_rooms_keep_their_rules():
    assert contracts.violations() == []


@pytest.fixture
def tree(tmp_path):
    """A copy of the rooms and the contracts, to break."""
    for name in ("ootci", "relay", "hud", "config"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    shutil.copy(ROOT / "contracts.toml", tmp_path)
    return tmp_path


BROKEN = {
    "relay imports hud": ("relay/endpoints/broken.py", "from hud.figures import queries\n", "import no ['hud']"),
    "hud imports relay": ("hud/web/broken.py", "from relay.github import client\n", "import no ['relay']"),
    "ootci imports hud": ("ootci/broken.py", "from hud.stores import base\n", "import no"),
    "a store imports a feature": ("hud/stores/broken.py", "from hud.failing import classes\n", "a layer above"),
    "clickhouse outside its store": ("hud/figures/broken.py", "import clickhouse_connect\n", "only"),
    "PyGithub outside relay.github": ("relay/reports/broken.py", "from github import Github\n", "only relay.github"),
    "boto3 outside the blob store": ("hud/stores/db/broken.py", "import boto3\n", "only ootci.reports.blobs"),
    "a task named by string": ("ootci/broken.py", 'TASK = "relay.tasks.job_completed"\n', "by string"),
    "a function named like a test": ("hud/history/broken.py", "def test_it():\n    pass\n", "starts with test"),
    "a cycle": ("ootci/levels_again.py", "from ootci import broken_too\n", "import cycle"),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_each_rule_fails_when_a_module_breaks_it(tree, case):
    path, source, said = BROKEN[case]
    (tree / path).write_text(source)
    if case == "a cycle":
        (tree / "ootci/broken_too.py").write_text("from ootci import levels_again\n")
    found = contracts.violations(tree)
    assert any(said in line for line in found), found


def test_a_module_over_the_limit_fails(tree):
    (tree / "relay/long.py").write_text("x = 1\n" * 401)
    assert any(line.startswith("relay/long.py:1: 401 lines") for line in contracts.violations(tree))


def test_a_chain_deeper_than_the_limit_fails(tree):
    for i in range(9):  # hud.web.c0 -> c1 -> … -> c8: nine modules
        (tree / f"hud/web/c{i}.py").write_text(f"from hud.web import c{i + 1}\n" if i < 8 else "")
    assert any("import chain of 9 modules" in line for line in contracts.violations(tree))


def test_pytest_collects_nothing_outside_tests():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
        + ["relay", "hud", "ootci", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 5, run.stdout + run.stderr  # 5: no tests collected
    assert "no tests collected" in run.stdout
