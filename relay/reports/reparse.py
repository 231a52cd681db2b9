"""Parsing stored test reports again (the admin's action, ``manage.py reparse_test_reports``): apart from the pull
and parse (``relay.reports.pull``), so that the admin reaches it without the check runs behind the parse."""

from django.db import transaction
from django_q.tasks import async_task

from ootci import case_days, case_recent
from ootci.models import TestReport


def reports_reparse(*, report_ids: list[int] | None = None, states: tuple[str, ...] = ()) -> int:
    """Mark reports pending again and queue their parse: the given ids, or every report in ``states``."""
    rows = TestReport.objects.all()
    if report_ids is not None:
        rows = rows.filter(pk__in=report_ids)
    if states:
        rows = rows.filter(state__in=states)
    with transaction.atomic():
        ids = list(rows.select_for_update().values_list("pk", flat=True))  # a parse ending meanwhile waits
        parsed = list(rows.filter(pk__in=ids, state=TestReport.State.PARSED).values_list("pk", flat=True))
        counted, recent = case_days.case_days_keys(parsed), case_recent.recent_keys(parsed)
        # A parsed report's cases may have been copied (ClickHouse): the copy drops the earlier parse's once this one
        # ends.
        TestReport.objects.filter(pk__in=parsed).update(replaced=True)
        TestReport.objects.filter(pk__in=ids).update(state=TestReport.State.PENDING, reason="", parse_claimed_at=None)
        case_recent.recent_recount(recent)  # their cases stop counting until parsed again
        case_days.case_days_recount(counted)
        for pk in ids:
            transaction.on_commit(lambda pk=pk: async_task("relay.tasks.report_parse", pk), robust=True)
    return len(ids)
