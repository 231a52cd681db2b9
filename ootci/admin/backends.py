"""Allowlist administration: backends, their level moves (reviewed against the gates and audited) and the audit
trail itself. Every path that changes a level asks for a reason and writes a LevelReview with the readiness figures
(``ootci.governance``); the governance registries are in ``ootci.admin.governance``."""

from collections.abc import Iterator
from contextlib import contextmanager

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from ootci import case_days, case_recent, gates, governance, levels
from ootci.admin.base import ReadOnlyInline, RecordAdmin
from ootci.admin.identities import BuildkitePipelineInline, IdentityChangeInline, pipelines_saved
from ootci.models import Backend, BuildkitePipeline, DeferredTask, Event, JobResult, LevelChange, TestReport

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
        help_text="Why the level or the Buildkite pipelines change; required when the level does, recorded in the "
        "level history and its review, and in the CI identity history",
    )
    confirm_jump = forms.BooleanField(
        required=False, label="Confirm a jump of more than one level", help_text="Needed to skip a level"
    )

    class Meta:
        model = Backend
        fields = ["repo", "level", "device", "oncalls", "events", "enabled", "probe", "exonerate", "bisect"]
        fields += ["nightly_cadence_minutes", "periodic_cadence_minutes", "stale_grace_minutes", "notes"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["oncalls"] = ", ".join(self.instance.oncalls)
        for name in ("nightly_cadence_minutes", "stale_grace_minutes"):  # left empty: the model's default
            self.fields[name].required = False

    def _default_if_empty(self, name: str) -> int:
        value = self.cleaned_data.get(name)
        return Backend._meta.get_field(name).default if value is None else value

    def clean_nightly_cadence_minutes(self) -> int:
        return self._default_if_empty("nightly_cadence_minutes")

    def clean_stale_grace_minutes(self) -> int:
        return self._default_if_empty("stale_grace_minutes")

    def clean_oncalls(self) -> list[str]:
        return [h.strip().lstrip("@") for h in self.cleaned_data["oncalls"].split(",") if h.strip()]

    def clean_repo(self) -> str:
        return self.cleaned_data["repo"].strip().strip("/")

    def clean(self) -> dict:
        data = super().clean()
        was, to = self.initial.get("level"), data.get("level")
        if not self.instance.pk or not to or was == to:
            return data
        if not data.get("reason", "").strip():
            self.add_error("reason", "A level change needs a reason.")
        if abs(levels.rank(to) - levels.rank(was)) > 1 and not data.get("confirm_jump"):
            self.add_error("confirm_jump", f"{was} → {to} skips a level: confirm it to go ahead.")
        return data


class LevelChangeInline(ReadOnlyInline):
    model = LevelChange
    fields = ["changed_at", "from_level", "to_level", "actor", "reason"]
    verbose_name_plural = "level history"


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), help_text="Recorded in the history")


class ReadinessChangeList(ChangeList):
    """The backend list with each row's readiness verdict, judged once for the page (the readiness column)."""

    def get_results(self, request) -> None:
        super().get_results(request)
        judged = governance.readiness_now(self.result_list)
        for backend in self.result_list:
            backend.readiness_verdict = judged[backend.pk]


def refused_move(backend: Backend, to: str | None) -> str:
    """Why ``backend`` cannot move to ``to`` ("" if it can): what the save would refuse, said before it is tried."""
    if to is None:
        return "already at the end of the scale"
    if to == levels.Level.L3 and not backend.device:
        return "an L3 backend needs a device (its PR label is ciflow/oot/<device>)"
    return ""


class VerdictFilter(admin.SimpleListFilter):
    title = "readiness"
    parameter_name = "readiness"

    def lookups(self, request, model_admin):
        return list(gates.VERDICTS.items())

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        judged = governance.readiness_now(queryset)
        return queryset.filter(pk__in=[bid for bid, r in judged.items() if r.verdict == self.value()])


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin):
    form = BackendForm
    list_display = ["repo", "level", "device", "oncalls_text", "enabled", "readiness", "hud", "updated_at"]
    list_filter = ["level", VerdictFilter, "device", "enabled", "probe"]
    search_fields = ["repo", "device", "notes"]
    readonly_fields = ["readiness_detail"]
    inlines = [BuildkitePipelineInline, LevelChangeInline, IdentityChangeInline]
    actions = ["promote", "demote"]

    @admin.display(description="on-calls")
    def oncalls_text(self, obj: Backend) -> str:
        return ", ".join(obj.oncalls)

    def get_changelist(self, request, **kwargs):
        return ReadinessChangeList

    def delete_model(self, request, obj) -> None:
        self.delete_queryset(request, Backend.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset) -> None:
        """A deleted backend's jobs go with it, and their parsed cases leave the test search's roll-up."""
        with cases_counted_out(TestReport.objects.filter(job__backend__in=queryset)):
            super().delete_queryset(request, queryset)

    @admin.display(description="readiness")
    def readiness(self, obj: Backend) -> str:
        return obj.readiness_verdict.text

    @admin.display(description="HUD")
    def hud(self, obj: Backend):
        org, name = obj.repo.split("/", 1)
        page = reverse("hud:backend", args=[org, name])
        return format_html('<a href="{}">View on HUD</a> · <a href="{}readiness/">readiness</a>', page, page)

    @admin.display(description="readiness")
    def readiness_detail(self, obj: Backend):
        if not obj.pk:
            return "—"
        r = governance.readiness_now([obj])[obj.pk]
        return format_html(
            "<p><b>{}</b></p>{}{}",
            r.text,
            readiness_table(r),
            self.hud(obj),
        )

    def save_model(self, request, obj: Backend, form, change: bool) -> None:
        reason = form.cleaned_data.get("reason", "")
        if change and "level" not in form.changed_data:
            super().save_model(request, obj, form, change)
            return
        level = obj.level
        with transaction.atomic():
            if not change:
                obj.change_level(level, user=request.user, reason=reason or "added")
                return
            obj.level = form.initial["level"]  # moved below, with its audit row and review
            super().save_model(request, obj, form, change)
            governance.level_change_reviewed(backend=obj, to=level, reason=reason, user=request.user)

    def save_formset(self, request, form, formset, change: bool) -> None:
        if formset.model is BuildkitePipeline:  # each mapping change with its audit row (ootci.identities)
            pipelines_saved(request, formset, reason=form.cleaned_data.get("reason", ""))
        else:
            super().save_formset(request, form, formset, change)

    @admin.action(description="Promote selected backends one level")
    def promote(self, request, queryset):
        return self._move(request, queryset, levels.promoted, "promote")

    @admin.action(description="Demote selected backends one level")
    def demote(self, request, queryset):
        return self._move(request, queryset, levels.demoted, "demote")

    def _move(self, request, queryset, step, verb: str):
        """The confirmation shows each backend's readiness and refuses up front the moves the save would refuse; the
        applied moves get a LevelChange, a LevelReview and an entry in the admin's History."""
        backends = list(queryset)
        judged = governance.readiness_now(backends)
        moves = [(b, step(b.level), refused_move(b, step(b.level)), judged[b.pk]) for b in backends]
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
                    "moves": [(b, to, refused, readiness_table(r), r) for b, to, refused, r in moves],
                    "movable": any(not refused for _, _, refused, _ in moves),
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                },
            )
        moved, stuck = 0, []
        reason = form.cleaned_data["reason"]
        for backend, to, refused, r in moves:
            if refused:
                stuck.append(f"{backend.repo} ({refused})")
                continue
            governance.level_change_reviewed(backend=backend, to=to, reason=reason, user=request.user, readiness=r)
            self.log_change(request, backend, f"{verb.capitalize()}d to {to}: {reason}")
            moved += 1
        if moved:
            self.message_user(request, f"{verb.capitalize()}d {moved} backend(s).", messages.SUCCESS)
        if stuck:
            self.message_user(request, f"Not moved: {'; '.join(stuck)}", messages.WARNING)
        return None


def readiness_table(r: gates.Readiness):
    """The gates of a verdict as a small HTML table (both windows)."""
    rows = [
        format_html(
            "<tr><td>{}</td><td>{} d</td><td>{}</td><td>{}</td><td>&lt; {} {}</td><td>{}</td></tr>",
            purpose,
            days,
            g.gate.label,
            "no data" if g.value is None else f"{g.value:g} {g.gate.unit}",
            f"{g.gate.limit:g}",
            g.gate.unit,
            "no data" if g.passed is None else "pass" if g.passed else "FAIL",
        )
        for purpose, days, results in (
            (f"keeping {r.level}", r.demotion.days, r.demotion_gates),
            (f"promotion to {r.target}", r.promotion.days, r.promotion_gates),
        )
        for g in results
    ]
    return format_html(
        "<table><tr><th>for</th><th>window</th><th>gate</th><th>value</th><th>limit</th><th></th></tr>{}</table>"
        "<p>{} d: {} jobs, success {}, test failures {}, infra failures {}</p>",
        mark_safe("".join(rows)),  # each row is format_html output
        r.promotion.days,
        r.promotion.total,
        _pct(r.promotion.success_rate),
        _pct(r.promotion.failed_tests_rate),
        _pct(r.promotion.infra_failure_rate),
    )


def _pct(value: float | None) -> str:
    return "no data" if value is None else f"{value:g} %"


@admin.register(LevelChange)
class LevelChangeAdmin(RecordAdmin):
    list_display = ["changed_at", "backend", "from_level", "to_level", "actor", "reason"]
    list_filter = ["to_level", "from_level"]
    search_fields = ["backend__repo", "actor", "reason"]
    list_select_related = ["backend"]
    date_hierarchy = "changed_at"


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

    def delete_model(self, request, obj) -> None:
        self.delete_queryset(request, JobResult.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset) -> None:
        """The jobs' parsed cases leave the roll-ups with them (``ootci.case_days``, ``ootci.case_recent``)."""
        with cases_counted_out(TestReport.objects.filter(job__in=queryset)):
            super().delete_queryset(request, queryset)


@contextmanager
def cases_counted_out(reports) -> Iterator[None]:
    """Around a deletion that takes ``reports`` (a queryset) with it: their parsed cases leave the test search's
    roll-up (``ootci.case_days``, kept over every backend) and the failing tests' history (``ootci.case_recent``) in
    the same transaction."""
    with transaction.atomic():
        parsed = reports.filter(state=TestReport.State.PARSED).values_list("pk", flat=True)
        counted, recent = case_days.case_days_keys(list(parsed)), case_recent.recent_keys(list(parsed))
        yield
        case_recent.recent_recount(recent)
        case_days.case_days_recount(counted)


@admin.register(DeferredTask)
class DeferredTaskAdmin(RecordAdmin):
    """Tasks waiting for Redis (ootci.broker): queued again by their schedule, not by hand."""

    list_display = ["deferred_at", "func", "queue"]
    list_filter = ["func"]
    exclude = ["payload"]
