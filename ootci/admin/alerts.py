"""Admin for on-call alerting: the rules and each backend's opt-in channels (edited), the incidents and the
notifications sent for them (read only)."""

from django.contrib import admin

from ootci.admin.base import ReadOnlyInline, RecordAdmin
from ootci.models import AlertRule, Incident, Notification, NotificationChannel


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["kind", "backend", "enabled", "threshold", "window_minutes", "resolve_after", "cooldown_minutes"]
    list_filter = ["kind", "enabled"]
    list_select_related = ["backend"]


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    list_display = ["backend", "kind", "target", "enabled"]
    list_filter = ["kind", "enabled"]
    search_fields = ["backend__repo", "target"]
    list_select_related = ["backend"]


class NotificationInline(ReadOnlyInline):
    model = Notification
    fields = ["channel", "target", "status", "attempts", "last_error", "external_id", "updated_at"]


@admin.register(Incident)
class IncidentAdmin(RecordAdmin):
    list_display = ["opened_at", "state", "backend", "what", "resolved_at"]
    list_filter = ["state", "rule__kind"]
    search_fields = ["backend__repo", "what", "fingerprint"]
    list_select_related = ["backend"]
    inlines = [NotificationInline]


@admin.register(Notification)
class NotificationAdmin(RecordAdmin):
    list_display = ["updated_at", "incident", "channel", "status", "attempts", "last_error"]
    list_filter = ["status", "channel__kind"]
    list_select_related = ["incident", "channel__backend"]
