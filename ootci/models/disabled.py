"""The disabled-test registry: per backend, the upstream tests its CI skips, served to that CI in the format of
PyTorch's ``DISABLED_TESTS_FILE`` (``ootci.disabled.registry``) and edited in the admin.

A test is named one of two ways, kept as written in ``name``:

- PyTorch's exact name ``test_x (__main__.TestClass)``, what PyTorch's own file holds and what its test runner
  reads: it matches a TestCase named ``test_x`` whose classname's last dotted part is ``TestClass``;
- a generic id ``file::Class::name`` (as TestCase.test_id, the device made generic): it matches that test_id.
"""

import re
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

# PyTorch's runner splits on whitespace and takes the class as the last dotted part of what is in the brackets.
PYTORCH_NAME = re.compile(r"^(?P<test>[^\s()]+) \((?P<suite>[\w.]+)\)$")
NAME_CAP = 1000


class Kind(models.TextChoices):
    PYTORCH = "pytorch", "PyTorch name: test_x (__main__.TestClass)"
    GENERIC = "generic", "generic id: file::Class::name"


def name_parse(name: str) -> tuple[str, str, str]:
    """(kind, test, class) of a disabled test's name; ValueError saying why when it is neither form."""
    if not name or len(name) > NAME_CAP:
        raise ValueError(f"a name has 1 to {NAME_CAP} characters")
    found = PYTORCH_NAME.match(name)
    if found:
        return Kind.PYTORCH, found["test"], found["suite"].rpartition(".")[2]
    if "::" in name and not any(c.isspace() for c in name):
        return Kind.GENERIC, "", ""
    raise ValueError("neither PyTorch's 'test_x (__main__.TestClass)' nor a generic id 'file::Class::name'")


class DisabledTestQuerySet(models.QuerySet):
    def active(self, now: datetime | None = None) -> "DisabledTestQuerySet":
        """Entries in force: no expiry, or one still ahead."""
        return self.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now()))

    def expired(self, now: datetime | None = None) -> "DisabledTestQuerySet":
        return self.filter(expires_at__lte=now or timezone.now())


class DisabledTest(models.Model):
    """One upstream test a backend's CI skips: why, the tracking issue, on which platforms (PyTorch's platform
    names; empty means everywhere), who added it and until when."""

    # Two indexes only (the key, and backend + name that every read starts from): a 32,000-entry import writes them.
    backend = models.ForeignKey(
        "ootci.Backend", on_delete=models.CASCADE, related_name="disabled_tests", db_index=False
    )
    name = models.CharField(max_length=NAME_CAP, help_text="test_x (__main__.TestClass), or file::Class::name")
    kind = models.CharField(max_length=10, choices=Kind.choices, editable=False)
    test_name = models.CharField(max_length=NAME_CAP, blank=True, editable=False, help_text="PyTorch name: test_x")
    class_name = models.CharField(max_length=500, blank=True, editable=False, help_text="PyTorch name: TestClass")
    reason = models.TextField(blank=True)
    issue_url = models.CharField(max_length=500, blank=True, help_text="Tracking issue (http or https URL)")
    platforms = models.JSONField(default=list, blank=True, help_text="PyTorch platform names; empty: everywhere")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor = models.CharField(max_length=150, blank=True, help_text="Who added it: a user or a command")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: until removed")

    objects = DisabledTestQuerySet.as_manager()

    class Meta:
        ordering = ["backend", "name"]
        constraints = [models.UniqueConstraint(fields=["backend", "name"], name="disabledtest_unique_name")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            self.name_set(self.name)
        except ValueError as exc:
            raise ValidationError({"name": str(exc)}) from None

    def name_set(self, name: str) -> None:
        """Sets ``name`` and the parts matching reads from it (ValueError when it is neither form)."""
        self.kind, self.test_name, self.class_name = name_parse(name)
        self.name = name

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
