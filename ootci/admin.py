"""Allowlist administration: backends, their level moves (audited) and the audit trail itself."""

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.template.response import TemplateResponse

from ootci import levels
from ootci.models import Backend, Event, JobResult, LevelChange

admin.site.site_header = "OOT CI administration"
admin.site.site_title = "OOT CI"
admin.site.index_title = "Allowlist and relay"


class BackendForm(forms.ModelForm):
    oncalls = forms.CharField(
        required=False, help_text="GitHub handles, comma-separated", widget=forms.TextInput(attrs={"size": 60})
    )
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, initial=[Event.PULL_REQUEST, Event.PUSH]
    )
    reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the level changes; recorded in the level history",
    )

    class Meta:
        model = Backend
        fields = ["repo", "level", "device", "oncalls", "events", "enabled", "notes"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["oncalls"] = ", ".join(self.instance.oncalls)

    def clean_oncalls(self) -> list[str]:
        return [h.strip().lstrip("@") for h in self.cleaned_data["oncalls"].split(",") if h.strip()]

    def clean_repo(self) -> str:
        return self.cleaned_data["repo"].strip().strip("/")


class LevelChangeInline(admin.TabularInline):
    model = LevelChange
    extra = 0
    can_delete = False
    fields = ["changed_at", "from_level", "to_level", "actor", "reason"]
    readonly_fields = fields
    verbose_name_plural = "level history"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), help_text="Recorded in the history")


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin):
    form = BackendForm
    list_display = ["repo", "level", "device", "oncalls_text", "enabled", "updated_at"]
    list_filter = ["level", "device", "enabled"]
    search_fields = ["repo", "device", "notes"]
    inlines = [LevelChangeInline]
    actions = ["promote", "demote"]

    @admin.display(description="on-calls")
    def oncalls_text(self, obj: Backend) -> str:
        return ", ".join(obj.oncalls)

    def save_model(self, request, obj: Backend, form, change: bool) -> None:
        reason = form.cleaned_data.get("reason", "")
        if change and "level" not in form.changed_data:
            super().save_model(request, obj, form, change)
            return
        level = obj.level
        with transaction.atomic():
            if change:
                obj.level = form.initial["level"]  # moved below, with its audit row
                super().save_model(request, obj, form, change)
            obj.change_level(level, user=request.user, reason=reason or ("" if change else "added"))

    @admin.action(description="Promote selected backends one level")
    def promote(self, request, queryset):
        return self._move(request, queryset, levels.promoted, "promote")

    @admin.action(description="Demote selected backends one level")
    def demote(self, request, queryset):
        return self._move(request, queryset, levels.demoted, "demote")

    def _move(self, request, queryset, step, verb: str):
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return TemplateResponse(
                request,
                "admin/ootci/backend/change_level.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"{verb.capitalize()} backends",
                    "opts": self.model._meta,
                    "verb": verb,
                    "action": verb,
                    "form": form,
                    "moves": [(b, step(b.level)) for b in queryset],
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                },
            )
        moved, stuck = 0, []
        for backend in queryset:
            to = step(backend.level)
            if to is None or (to == levels.Level.L3 and not backend.device):
                stuck.append(backend.repo)
                continue
            backend.change_level(to, user=request.user, reason=form.cleaned_data["reason"])
            moved += 1
        if moved:
            self.message_user(request, f"{verb.capitalize()}d {moved} backend(s).", messages.SUCCESS)
        if stuck:
            self.message_user(
                request,
                f"Not moved (already at the end of the scale, or L3 without a device): {', '.join(stuck)}",
                messages.WARNING,
            )
        return None


@admin.register(LevelChange)
class LevelChangeAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "backend", "from_level", "to_level", "actor", "reason"]
    list_filter = ["to_level", "from_level"]
    search_fields = ["backend__repo", "actor", "reason"]
    list_select_related = ["backend"]
    date_hierarchy = "changed_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(JobResult)
class JobResultAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "backend",
        "event_type",
        "pr_number",
        "workflow_name",
        "job_name",
        "run_attempt",
        "status",
        "conclusion",
    ]
    list_filter = ["event_type", "status", "conclusion", "backend"]
    search_fields = ["backend__repo", "head_sha", "job_name", "workflow_name", "run_id"]
    list_select_related = ["backend"]
    raw_id_fields = ["dispatch"]
    date_hierarchy = "created_at"
