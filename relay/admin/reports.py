"""Test reports in the admin: each with its parse state and reason, read-only, with a "re-parse" action."""

from django.contrib import admin, messages

from ootci.admin.base import ReadOnlyAdmin
from ootci.models import TestReport
from relay.reports import reparse


@admin.register(TestReport)
class TestReportAdmin(ReadOnlyAdmin):
    list_display = ["id", "job", "source", "state", "cases", "failed", "errors", "reruns", "size", "received_at"]
    list_filter = ["state", "source", "job__backend"]
    search_fields = ["digest", "job__backend__repo", "job__run_id", "reason"]
    list_select_related = ["job__backend"]
    raw_id_fields = ["job"]
    actions = ["reparse"]

    def has_reparse_permission(self, request) -> bool:
        return request.user.has_perm("ootci.change_testreport")

    @admin.action(description="Re-parse the selected reports from the stored bytes", permissions=["reparse"])
    def reparse(self, request, queryset) -> None:
        count = reparse.reports_reparse(report_ids=list(queryset.values_list("pk", flat=True)))
        messages.success(request, f"{count} report(s) queued for parsing again.")
