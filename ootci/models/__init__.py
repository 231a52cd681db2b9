"""The shared domain's models, one module per area; everything is importable from ``ootci.models``.

- ``core``: the allowlist (Backend, LevelChange), upstream pull requests and deliveries, dispatches, job results.
- ``reports``: per-test results (TestReport, TestCase).
- ``failures``: the log classifier's rules and each failed job's classification.
"""

from ootci.models.core import (
    REPO_PATTERN,
    Backend,
    CallbackRejection,
    Delivery,
    Dispatch,
    DispatchQuerySet,
    Event,
    JobResult,
    LevelChange,
    PullRequest,
    default_events,
    lost_cutoff,
    validate_repo,
)
from ootci.models.failures import FailureClass, FailureRule, JobFailure
from ootci.models.reports import TestCase, TestReport

__all__ = [
    "REPO_PATTERN",
    "Backend",
    "CallbackRejection",
    "Delivery",
    "Dispatch",
    "DispatchQuerySet",
    "Event",
    "FailureClass",
    "FailureRule",
    "JobFailure",
    "JobResult",
    "LevelChange",
    "PullRequest",
    "TestCase",
    "TestReport",
    "default_events",
    "lost_cutoff",
    "validate_repo",
]
