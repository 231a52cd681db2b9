"""A planted upstream history and a backend's runs on it, for the breaks tests."""

from tests.hud import builders
from tests.hud.failing_history import pushed

UP = "pytorch/pytorch"
GOOD, BAD = "a0" * 20, "af" * 20
TESTS = ["t1", "t2", "t3"]
TRACE = 'Traceback:\n  File "/opt/conda/lib/python3.12/site-packages/torch/_ops.py", line 3\nAssertionError: boom'


def sha(n: int) -> str:
    return f"{n:02x}" * 20


def report(job, statuses: dict[str, str], capture, message: str = TRACE):
    cases = {f"test_x.TestX::{t}": (s, 0, message if s == "failed" else "") for t, s in statuses.items()}
    with capture(execute=True):
        builders.report_with(job, cases)


def nightly(backend, sha_: str, statuses: dict[str, str], capture, *, hours: float):
    conclusion = "failure" if "failed" in statuses.values() else "success"
    job = builders.job(
        backend,
        name="test-1",
        conclusion=conclusion,
        event_type="nightly",
        head_sha=sha_,
        finished=builders.ago(hours=hours),
        run_url=f"https://github.com/{backend.repo}/actions/runs/{int(hours)}",
    )
    report(job, statuses, capture)
    return job


def pr_run(backend, number: int, statuses: dict[str, str], capture, *, hours: float):
    head = f"{number:040x}"
    pr = builders.pull_request(number, head)
    pushed(pr, base=GOOD, sha=head, hours=hours + 1)
    conclusion = "failure" if "failed" in statuses.values() else "success"
    job = builders.job(
        backend,
        name="test-1",
        conclusion=conclusion,
        event_type="pull_request",
        pr_number=number,
        head_sha=head,
        finished=builders.ago(hours=hours),
        run_url=f"https://github.com/{backend.repo}/actions/runs/9{number}",
    )
    report(job, statuses, capture)
    return job


def green() -> dict[str, str]:
    return dict.fromkeys(TESTS, "passed")
