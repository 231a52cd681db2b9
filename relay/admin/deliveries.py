"""Relay administration: webhook deliveries and their dispatches, read-only, with "redispatch" for failures."""

import json

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.utils.text import Truncator

from ootci.admin.base import ReadOnlyAdmin, ReadOnlyInline
from ootci.models import CallbackRejection, Delivery, Dispatch
from relay.github import outbox


class LostFilter(admin.SimpleListFilter):
    """Dispatches the HUD counts as lost (``Dispatch.objects.lost``): the list behind the relay strip's number."""

    title = "lost (no callback)"
    parameter_name = "lost"

    def lookups(self, request, model_admin):
        return [("1", "lost")]

    def queryset(self, request, queryset):
        return queryset & Dispatch.objects.lost() if self.value() == "1" else queryset


class WaitingFilter(admin.SimpleListFilter):
    """Pending dispatches waiting out a GitHub outage or rate limit (``retry_at`` set): the relay strip's number."""

    title = "waiting for retry"
    parameter_name = "waiting"

    def lookups(self, request, model_admin):
        return [("1", "waiting for retry")]

    def queryset(self, request, queryset):
        if self.value() != "1":
            return queryset
        return queryset.filter(status=Dispatch.Status.PENDING, retry_at__isnull=False)


class DispatchInline(ReadOnlyInline):
    model = Dispatch
    fields = ["backend", "status", "attempts", "last_error", "payload_trimmed", "sent_at", "retry_at"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "delivery_id",
        "event",
        "action",
        "pull_request",
        "head_sha_short",
        "received_at",
        "queued",
        "failed",
    ]
    list_filter = ["event", "action", "received_at"]
    search_fields = ["delivery_id", "head_sha", "ref", "=pull_request__number"]
    list_select_related = ["pull_request"]
    date_hierarchy = "received_at"
    inlines = [DispatchInline]
    exclude = ["payload"]
    readonly_fields = ["payload_pretty"]

    def get_queryset(self, request):
        failed = Count("dispatches", filter=Q(dispatches__status=Dispatch.Status.FAILED))
        return super().get_queryset(request).annotate(n_dispatches=Count("dispatches"), n_failed=failed)

    @admin.display(description="head")
    def head_sha_short(self, obj: Delivery) -> str:
        return obj.head_sha[:10]

    @admin.display(description="dispatches", ordering="n_dispatches")
    def queued(self, obj: Delivery) -> int:
        return obj.n_dispatches

    @admin.display(description="failed", ordering="n_failed")
    def failed(self, obj: Delivery) -> int:
        return obj.n_failed

    @admin.display(description="payload")
    def payload_pretty(self, obj: Delivery) -> str:
        return json.dumps(obj.payload, indent=2)[:20000]


@admin.register(Dispatch)
class DispatchAdmin(ReadOnlyAdmin):
    list_display = [
        "delivery",
        "backend",
        "pr",
        "status",
        "attempts",
        "error",
        "payload_trimmed",
        "created_at",
        "sent_at",
        "retry_at",
    ]
    list_filter = [LostFilter, WaitingFilter, "status", "payload_trimmed", "delivery__event", "backend"]
    search_fields = ["delivery__delivery_id", "backend__repo", "=delivery__pull_request__number"]
    list_select_related = ["delivery__pull_request", "backend"]
    raw_id_fields = ["delivery"]
    actions = ["redispatch"]

    @admin.display(description="PR", ordering="delivery__pull_request__number")
    def pr(self, obj: Dispatch) -> str:
        pr = obj.delivery.pull_request
        return f"#{pr.number}" if pr else "—"

    @admin.display(description="last error")
    def error(self, obj: Dispatch) -> str:
        return Truncator(obj.last_error).chars(120)

    def has_redispatch_permission(self, request) -> bool:
        return request.user.has_perm("ootci.change_dispatch")

    @admin.action(description="Redispatch the selected failed dispatches", permissions=["redispatch"])
    def redispatch(self, request, queryset) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        count = outbox.dispatches_redispatch(dispatch_ids=ids)
        skipped = len(ids) - count
        messages.success(request, f"{count} dispatch(es) queued again.")
        if skipped:
            messages.warning(request, f"{skipped} selected dispatch(es) were not failed and were left alone.")


@admin.register(CallbackRejection)
class CallbackRejectionAdmin(ReadOnlyAdmin):
    """Refused callbacks: the list behind the relay strip's "callbacks rejected"."""

    list_display = ["received_at", "repo", "status_code", "detail"]
    list_filter = ["status_code", "received_at"]
    search_fields = ["repo", "detail"]
    date_hierarchy = "received_at"
