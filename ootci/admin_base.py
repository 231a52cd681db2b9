"""What the admin modules share: the read-only admin of a record that is written by the app, never by hand."""

from django.contrib import admin


class RecordAdmin(admin.ModelAdmin):
    """Listed and shown, never added, changed or deleted in the admin: audit rows and what the app decided."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
