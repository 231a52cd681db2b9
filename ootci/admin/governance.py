"""Admin for the governance registries: level reviews (with their evidence for PyTorch's allowlist pull request and
the schedule's proposals, which an admin applies with Promote/Demote), temporary downgrades and gate notices."""

from django import forms
from django.contrib import admin
from django.http import HttpResponse

from ootci import governance, levels
from ootci.admin.base import RecordAdmin
from ootci.models import Backend, GateNotice, LevelReview, TemporaryDowngrade


@admin.register(LevelReview)
class LevelReviewAdmin(RecordAdmin):
    list_display = ["created_at", "backend", "kind", "state", "from_level", "to_level", "verdict_text", "actor"]
    list_filter = ["state", "kind", "to_level"]
    search_fields = ["backend__repo", "reason", "actor"]
    list_select_related = ["backend"]
    actions = ["evidence", "dismiss"]

    @admin.action(description="Export evidence (Markdown, for the allowlist pull request)")
    def evidence(self, request, queryset):
        text = "\n".join(governance.evidence_markdown(review) for review in queryset.select_related("backend"))
        response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
        response["Content-Disposition"] = 'inline; filename="level-review-evidence.md"'
        return response

    @admin.action(description="Dismiss selected proposals")
    def dismiss(self, request, queryset):
        n = queryset.filter(state=LevelReview.State.PROPOSED).update(state=LevelReview.State.DISMISSED)
        self.message_user(request, f"Dismissed {n} proposal(s).")


class DowngradeForm(forms.ModelForm):
    class Meta:
        model = TemporaryDowngrade
        fields = ["backend", "effective", "until", "recover_days", "reason"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["backend"].queryset = Backend.objects.filter(level__in=[levels.Level.L3, levels.Level.L4])
        self.fields["effective"].label = "Effective level while it lasts"

    def clean(self) -> dict:
        data = super().clean()
        backend, to = data.get("backend"), data.get("effective")
        if backend and to and levels.rank(to) >= levels.rank(backend.level):
            self.add_error("effective", f"Pick a level below {backend.level}.")
        if not data.get("until") and not data.get("recover_days"):
            raise forms.ValidationError("Give an end: a date, or a number of days of passing gates (or both).")
        return data


@admin.register(TemporaryDowngrade)
class TemporaryDowngradeAdmin(admin.ModelAdmin):
    form = DowngradeForm
    list_display = ["backend", "restore_to", "effective", "until", "recover_days", "started_at", "ended_at"]
    list_filter = ["ended_at"]
    list_select_related = ["backend"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj: TemporaryDowngrade, form, change: bool) -> None:
        data = form.cleaned_data
        obj.pk = governance.downgrade_start(
            backend=data["backend"],
            to=data["effective"],
            reason=data["reason"],
            until=data.get("until"),
            recover_days=data.get("recover_days"),
            user=request.user,
        ).pk


@admin.register(GateNotice)
class GateNoticeAdmin(RecordAdmin):
    list_display = ["backend", "failing_since", "gates"]
    list_select_related = ["backend"]
