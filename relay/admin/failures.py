"""Each failed job's classification in the admin: read-only, with a "re-classify" action that fetches the log again
and runs the rules over it (the rules themselves are edited in ``ootci.admin.failures``)."""

from django.contrib import admin, messages
from django.db import transaction
from django_q.tasks import async_task

from ootci.admin.base import RecordAdmin
from ootci.models import JobFailure


@admin.register(JobFailure)
class JobFailureAdmin(RecordAdmin):
    list_display = ["job", "failure_class", "source", "rule_name", "line_shown", "failed_step", "classified_at"]
    list_filter = ["failure_class", "source", "job__backend"]
    search_fields = ["line", "signature", "rule_name", "job__backend__repo", "job__run_id"]
    list_select_related = ["job__backend"]
    actions = ["reclassify"]

    @admin.display(description="line")
    def line_shown(self, failure: JobFailure) -> str:
        line = failure.line if len(failure.line) <= 120 else failure.line[:119] + "…"
        return f"{failure.line_number}: {line}" if failure.line_number else line

    def has_reclassify_permission(self, request) -> bool:
        return request.user.has_perm("ootci.change_jobresult")

    @admin.action(description="Re-classify the selected jobs", permissions=["reclassify"])
    def reclassify(self, request, queryset) -> None:
        job_ids = list(queryset.values_list("job_id", flat=True))
        for job_id in job_ids:
            transaction.on_commit(lambda job_id=job_id: async_task("relay.tasks.job_log_classify", job_id), robust=True)
        messages.success(request, f"{len(job_ids)} job(s) queued for classification again.")
