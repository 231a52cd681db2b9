"""The shared domain's models, one module per area; everything is importable from ``ootci.models``.

- ``core``: the allowlist (Backend, LevelChange).
- ``identities``: CI identities that are not a repository claim (BuildkitePipeline) and their audit (IdentityChange).
- ``runs``: upstream pull requests and deliveries, dispatches, job results, refused callbacks.
- ``reports``: per-test results (TestReport, TestCase), their daily roll-up per test (TestDay) and each
  backend's last results per test (TestRecent).
- ``failures``: the log classifier's rules and each failed job's classification.
- ``governance``: level reviews, gate notices and temporary downgrades.
- ``alerts``: alert rules, incidents, notification channels and notifications, the PR comment rows.
- ``disabled``: the disabled-test registry (DisabledTest), served to each backend's CI.
- ``ledger``: the skip ledger (LedgerRun, LedgerFile): what each baseline run covers, by test file, and its diff.
- ``breaks``: tests newly failing on a baseline run, their suspects, bisection steps and the commit cache.
- ``broker``: tasks the broker could not take while Redis was down (DeferredTask).
"""

from ootci.events import Event
from ootci.models.alerts import AlertRule, Incident, Notification, NotificationChannel, PrComment
from ootci.models.breaks import BISECT_EVENT, BisectStep, Break, BreakTest, CompareRange, Suspect, UpstreamCommit
from ootci.models.broker import DeferredTask
from ootci.models.core import (
    REPO_PATTERN,
    Backend,
    LevelChange,
    default_events,
    reserved_org_problem,
    validate_repo,
)
from ootci.models.disabled import DisabledTest
from ootci.models.failures import Exoneration, FailureClass, FailureRule, JobFailure
from ootci.models.governance import GateNotice, LevelReview, TemporaryDowngrade, allowlisted_level
from ootci.models.identities import BuildkitePipeline, IdentityChange, claims_unmet, required_claims_problem
from ootci.models.ledger import LedgerFile, LedgerRun
from ootci.models.reports import TestCase, TestDay, TestRecent, TestReport
from ootci.models.runs import (
    CallbackRejection,
    Delivery,
    Dispatch,
    DispatchQuerySet,
    JobResult,
    PullRequest,
    lost_cutoff,
)

__all__ = [
    "BISECT_EVENT",
    "BisectStep",
    "Break",
    "BreakTest",
    "CompareRange",
    "Suspect",
    "UpstreamCommit",
    "Exoneration",
    "AlertRule",
    "Incident",
    "Notification",
    "NotificationChannel",
    "PrComment",
    "REPO_PATTERN",
    "Backend",
    "BuildkitePipeline",
    "CallbackRejection",
    "DeferredTask",
    "Delivery",
    "DisabledTest",
    "Dispatch",
    "DispatchQuerySet",
    "Event",
    "FailureClass",
    "FailureRule",
    "JobFailure",
    "JobResult",
    "GateNotice",
    "IdentityChange",
    "LedgerFile",
    "LedgerRun",
    "LevelChange",
    "LevelReview",
    "PullRequest",
    "TestCase",
    "TestDay",
    "TestRecent",
    "TestReport",
    "TemporaryDowngrade",
    "allowlisted_level",
    "claims_unmet",
    "default_events",
    "lost_cutoff",
    "required_claims_problem",
    "reserved_org_problem",
    "validate_repo",
]
