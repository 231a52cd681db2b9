"""What the admin modules share: read-only admins and inlines of rows the app writes, never a person."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Listed and shown, never added or changed by hand: editing one would break the app's bookkeeping."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class RecordAdmin(ReadOnlyAdmin):
    """A read-only audit or decision record: not deleted either."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """Rows shown under their parent, every field read-only (set ``fields``)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False
