"""The disabled-test registry in the admin: entries searched, filtered and edited (who is the signed-in user), bulk
expiry actions, and the suggestions page (disable, re-enable, expired; ``ootci.disabled.suggestions``) where an
admin applies one suggestion at a time. Every change is in the admin's history (LogEntry)."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from ootci.disabled import registry, suggestions
from ootci.models import Backend, DisabledTest

EXTENSION = timedelta(days=30)


class DisabledTestForm(forms.ModelForm):
    platforms = forms.CharField(
        required=False, help_text="PyTorch platform names, comma-separated (linux, win, rocm…); empty: everywhere"
    )

    class Meta:
        model = DisabledTest
        fields = ["backend", "name", "reason", "issue_url", "platforms", "expires_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["platforms"] = ", ".join(self.instance.platforms)

    def clean_platforms(self) -> list[str]:
        names = [p.strip() for p in self.cleaned_data["platforms"].split(",") if p.strip()]
        if not all(registry.PLATFORM.match(p) for p in names):
            raise forms.ValidationError("Platform names are letters, digits, _ . and -.")
        return names

    def clean_issue_url(self) -> str:
        issue = self.cleaned_data["issue_url"].strip()
        if issue and not issue.startswith(("https://", "http://")):
            raise forms.ValidationError("An http(s) URL, or empty.")
        return issue


class ExpiryFilter(admin.SimpleListFilter):
    title = "expiry"
    parameter_name = "expiry"

    def lookups(self, request, model_admin):
        return [("active", "in force"), ("expired", "expired"), ("none", "no expiry")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.active()
        if self.value() == "expired":
            return queryset.expired()
        if self.value() == "none":
            return queryset.filter(expires_at__isnull=True)
        return queryset


@admin.register(DisabledTest)
class DisabledTestAdmin(admin.ModelAdmin):
    form = DisabledTestForm
    list_display = ["name", "backend", "kind", "issue", "platforms_text", "reason", "actor", "created_at", "expires"]
    list_filter = ["backend", ExpiryFilter, "kind"]
    search_fields = ["name", "reason", "issue_url"]
    list_select_related = ["backend"]
    readonly_fields = ["kind", "actor", "created_at", "updated_at"]
    actions = ["extend_expiry", "clear_expiry", "expire_now"]
    change_list_template = "admin/ootci/disabledtest/change_list.html"
    list_per_page = 100

    @admin.display(description="issue")
    def issue(self, obj: DisabledTest):
        if not obj.issue_url:
            return ""
        return format_html('<a href="{}">{}</a>', obj.issue_url, obj.issue_url.rsplit("/", 1)[-1])

    @admin.display(description="platforms")
    def platforms_text(self, obj: DisabledTest) -> str:
        return ", ".join(obj.platforms) or "all"

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, obj: DisabledTest) -> str:
        if obj.expires_at is None:
            return "never"
        return f"{obj.expires_at:%Y-%m-%d %H:%M}{' (expired)' if obj.expired else ''}"

    def save_model(self, request, obj: DisabledTest, form, change: bool) -> None:
        if not change:
            obj.user, obj.actor = request.user, request.user.get_username()
        super().save_model(request, obj, form, change)

    @admin.action(description="Extend expiry by 30 days (from now when none or past)", permissions=["change"])
    def extend_expiry(self, request, queryset) -> None:
        now = timezone.now()
        entries = list(queryset)
        for entry in entries:
            entry.expires_at, entry.updated_at = max(entry.expires_at or now, now) + EXTENSION, now
        DisabledTest.objects.bulk_update(entries, ["expires_at", "updated_at"])
        self._logged(request, entries, "Extended expiry by 30 days")

    @admin.action(description="Clear expiry (in force until removed)", permissions=["change"])
    def clear_expiry(self, request, queryset) -> None:
        entries = list(queryset)
        queryset.update(expires_at=None, updated_at=timezone.now())
        self._logged(request, entries, "Cleared expiry")

    @admin.action(description="Expire now (left out of the served file, kept here)", permissions=["change"])
    def expire_now(self, request, queryset) -> None:
        entries = list(queryset)
        now = timezone.now()
        queryset.update(expires_at=now, updated_at=now)
        self._logged(request, entries, "Expired now")

    def _logged(self, request, entries: list[DisabledTest], what: str) -> None:
        if entries:
            LogEntry.objects.log_actions(request.user.pk, entries, CHANGE, change_message=what, single_object=False)
        self.message_user(request, f"{what}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}.")

    def get_urls(self):
        view = self.admin_site.admin_view(self.suggestions)
        return [path("suggestions/", view, name="ootci_disabledtest_suggestions"), *super().get_urls()]

    def suggestions(self, request: HttpRequest) -> HttpResponse:
        """GET: each backend's suggestions (or one backend's, ?backend=id). POST: apply one, then back here."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self.suggestion_apply(request)
        backends = Backend.objects.order_by("repo")
        if "backend" in request.GET:
            backends = backends.filter(pk=_id(request.GET["backend"]))
        sections = [
            {
                "backend": backend,
                "disable": suggestions.disable_candidates(backend),
                "reenable": suggestions.reenable_candidates(backend),
                "expired": suggestions.expired(backend),
            }
            for backend in backends
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Disabled-test suggestions",
            "opts": self.model._meta,
            "sections": sections,
            "rules": suggestions,
        }
        return TemplateResponse(request, "admin/ootci/disabledtest/suggestions.html", context)

    def suggestion_apply(self, request: HttpRequest) -> HttpResponse:
        """One suggestion, applied by an admin who pressed its button (audited in the admin history), then back."""
        what = request.POST.get("apply")
        if what == "disable":
            self.suggested_disable(request)
        elif what in ("reenable", "remove", "extend"):
            entry = get_object_or_404(DisabledTest, pk=_id(request.POST.get("entry")))
            allowed = self.has_change_permission if what == "extend" else self.has_delete_permission
            if not allowed(request, entry):
                raise PermissionDenied
            if what == "extend":
                self.extend_expiry(request, DisabledTest.objects.filter(pk=entry.pk))
            else:
                self.log_deletions(request, [entry])
                entry.delete()
                self.message_user(request, f"Removed {entry.name} from {entry.backend.repo}'s list.", messages.SUCCESS)
        else:
            self.message_user(request, f"Unknown suggestion {what!r}.", messages.ERROR)
        return HttpResponseRedirect(f"{reverse('admin:ootci_disabledtest_suggestions')}?{request.GET.urlencode()}")

    def suggested_disable(self, request: HttpRequest) -> None:
        if not self.has_add_permission(request):
            raise PermissionDenied
        backend = get_object_or_404(Backend, pk=_id(request.POST.get("backend")))
        entry = DisabledTest(backend=backend, reason=request.POST.get("reason", ""), user=request.user)
        entry.actor = request.user.get_username()
        try:
            entry.name_set(request.POST.get("name", ""))
        except ValueError as exc:
            self.message_user(request, f"Not disabled: {exc}", messages.ERROR)
            return
        if backend.disabled_tests.filter(name=entry.name).exists():
            self.message_user(request, f"{entry.name} is disabled already.", messages.WARNING)
            return
        entry.save()
        self.log_addition(request, entry, "Disabled from a suggestion")
        self.message_user(request, f"Disabled {entry.name} on {backend.repo}.", messages.SUCCESS)


def _id(value: str | None) -> int:
    """A row id from the request; 0 (found nowhere) unless ASCII digits that fit a bigint (``isdigit`` alone passes
    "²", which ``int`` refuses)."""
    value = value or ""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0
