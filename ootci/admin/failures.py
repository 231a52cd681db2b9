"""The log classifier's rules in the admin: edited; a bad regex is refused by the model's check, shown on its field.
Each failed job's classification, with its "re-classify" action, is the relay's (``relay.admin.failures``)."""

from django.contrib import admin

from ootci.models import FailureRule


@admin.register(FailureRule)
class FailureRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "failure_class", "priority", "backend", "enabled", "updated_at"]
    list_filter = ["failure_class", "backend", "enabled"]
    search_fields = ["name", "regex", "notes"]
    list_select_related = ["backend"]
    fields = ["name", "regex", "failure_class", "priority", "backend", "enabled", "notes"]
