"""CI identities in the admin: a backend's Buildkite pipelines (edited on the backend's page, or in their own list)
and the audit trail of every change to them. Every save and delete goes through ``ootci.identities``, which writes the
IdentityChange row; the relay reads the map again within OIDC_IDENTITY_MAP_SECONDS, no restart needed."""

from django.contrib import admin

from ootci.admin.base import ReadOnlyInline, RecordAdmin
from ootci.identities import pipeline_remove, pipeline_save
from ootci.models import BuildkitePipeline, IdentityChange


class BuildkitePipelineInline(admin.TabularInline):
    model = BuildkitePipeline
    fields = ["organization_id", "pipeline_id", "required_claims"]
    extra = 0
    verbose_name_plural = "Buildkite pipelines"


def pipelines_saved(request, formset, *, reason: str) -> None:
    """Save a backend page's pipeline formset change by change, each with its audit row."""
    saved = formset.save(commit=False)
    for pipeline in formset.deleted_objects:
        pipeline_remove(pipeline=pipeline, user=request.user, reason=reason)
    for pipeline in saved:
        pipeline_save(pipeline=pipeline, user=request.user, reason=reason)


class IdentityChangeInline(ReadOnlyInline):
    model = IdentityChange
    fields = ["changed_at", "identity", "action", "summary", "actor", "reason"]
    verbose_name_plural = "CI identity history"


@admin.register(BuildkitePipeline)
class BuildkitePipelineAdmin(admin.ModelAdmin):
    list_display = ["key", "backend", "required_claims", "updated_at"]
    search_fields = ["backend__repo", "organization_id", "pipeline_id"]
    list_select_related = ["backend"]
    autocomplete_fields = ["backend"]
    fields = ["backend", "organization_id", "pipeline_id", "required_claims"]

    def save_model(self, request, obj: BuildkitePipeline, form, change: bool) -> None:
        pipeline_save(pipeline=obj, user=request.user, reason="edited in the admin")

    def delete_model(self, request, obj: BuildkitePipeline) -> None:
        pipeline_remove(pipeline=obj, user=request.user, reason="deleted in the admin")

    def delete_queryset(self, request, queryset) -> None:
        for pipeline in queryset.select_related("backend"):
            pipeline_remove(pipeline=pipeline, user=request.user, reason="deleted in the admin")


@admin.register(IdentityChange)
class IdentityChangeAdmin(RecordAdmin):
    list_display = ["changed_at", "backend", "identity", "action", "summary", "actor", "reason"]
    list_filter = ["action", "provider"]
    search_fields = ["backend__repo", "identity", "actor", "reason"]
    list_select_related = ["backend"]
    date_hierarchy = "changed_at"
