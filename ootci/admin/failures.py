"""The log classifier's rules in the admin: edited; a bad regex is refused by the model's check, shown on its field.
Each failed job's classification, with its "re-classify" action, is the relay's (``relay.admin.failures``)."""

from django.contrib import admin

from ootci.admin.base import RecordAdmin
from ootci.models import Exoneration, FailureRule


@admin.register(FailureRule)
class FailureRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "failure_class", "priority", "backend", "enabled", "updated_at"]
    list_filter = ["failure_class", "backend", "enabled"]
    search_fields = ["name", "regex", "notes"]
    list_select_related = ["backend"]
    fields = ["name", "regex", "failure_class", "priority", "backend", "enabled", "notes"]


@admin.register(Exoneration)
class ExonerationAdmin(RecordAdmin):
    """Check runs concluded neutral rather than failure, with the tests, the rule and the evidence (ootci.verdicts)."""

    list_display = ["job", "backend", "verdict", "rule", "created_at"]
    list_filter = ["verdict", "backend"]
    readonly_fields = ["job", "backend", "verdict", "rule", "tests", "evidence", "created_at"]
