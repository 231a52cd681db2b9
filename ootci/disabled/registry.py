"""A backend's disabled tests in PyTorch's ``DISABLED_TESTS_FILE`` format: parse and validate a whole file, diff it
against the registry, apply the diff in one transaction, and export the list its CI reads.

The format (``.pytorch-disabled-tests.json``, what PyTorch's test runner reads)::

    {"test_add_npu_float32 (__main__.TestBinaryUfuncsPRIVATEUSE1)": ["https://github.com/org/repo/issues/1", ["linux"]],
     "test_sort (__main__.TestSortAndSelect)": ["", []]}

Keys are PyTorch names or generic ids (``ootci.models.disabled``); an empty platform list means every platform.
Importing sets the issue and platforms; the reason, who and expiry of an entry already there are kept. The file is
the backend's whole list: entries missing from it are removed unless the import keeps others.
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone
from psycopg.types.json import Jsonb

from ootci.models import Backend, DisabledTest
from ootci.models.disabled import name_parse

BATCH = 2000
PLATFORM = re.compile(r"^[A-Za-z0-9_.-]{1,50}$")
ISSUE_CAP = 500

Entry = tuple[str, tuple[str, ...]]  # (issue URL, platforms)
# The stored platform list as JSON text: most are empty, and decoding 32,000 of them is most of a diff's time.
PLATFORMS_TEXT = Cast("platforms", output_field=TextField())


class DisabledFileError(ValueError):
    """The file is not a valid disabled-tests file; ``problems`` names every bad entry (the first 20)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class Plan:
    """What applying a file would change for one backend; ``lines`` is the human-readable diff."""

    backend: Backend
    add: dict[str, Entry] = field(default_factory=dict)
    change: dict[str, Entry] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.add or self.change or self.remove)

    @property
    def summary(self) -> str:
        return f"{len(self.add)} to add, {len(self.change)} to change, {len(self.remove)} to remove"


def parse(text: str) -> dict[str, Entry]:
    """Every entry of a file, or DisabledFileError listing the bad ones: nothing is used from a bad file."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DisabledFileError([f"not JSON: {exc}"]) from None
    if not isinstance(data, dict):
        raise DisabledFileError(['not a JSON object {"test_x (__main__.TestClass)": [issue_url, [platforms]], …}'])
    entries, problems = {}, []
    for name, value in data.items():
        try:
            name_parse(name)
            entries[name] = _entry(value)
        except ValueError as exc:
            problems.append(f"{json.dumps(name)}: {exc}")
    if problems:
        more = len(problems) - 20
        raise DisabledFileError(problems[:20] + ([f"… and {more} more"] if more > 0 else []))
    return entries


def _entry(value) -> Entry:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], list)):
        raise ValueError("the value must be [issue_url, [platforms]]")
    issue, platforms = value
    if issue and not (issue.startswith(("https://", "http://")) and len(issue) <= ISSUE_CAP and " " not in issue):
        raise ValueError(f"the issue must be empty or an http(s) URL of at most {ISSUE_CAP} characters")
    if not all(isinstance(p, str) and PLATFORM.match(p) for p in platforms):
        raise ValueError("platforms must be names such as linux, win, rocm")
    return issue, tuple(platforms)


def plan(backend: Backend, entries: dict[str, Entry], *, keep_others: bool = False) -> Plan:
    """The diff between ``entries`` and the backend's registry, sorted by name."""
    rows = backend.disabled_tests.values_list("name", "issue_url", PLATFORMS_TEXT)
    there = {name: (issue, _platforms(text)) for name, issue, text in rows}
    result = Plan(backend=backend)
    for name in sorted(entries.keys() | (set() if keep_others else there.keys())):
        new, old = entries.get(name), there.get(name)
        if old is None:
            result.add[name] = new
            result.lines.append(f"+ {name}{_shown(new)}")
        elif new is None:
            result.remove.append(name)
            result.lines.append(f"- {name}")
        elif new != old:
            result.change[name] = new
            result.lines.append(f"~ {name}{_shown(old)} →{_shown(new) or ' (none)'}")
    return result


def _platforms(text: str) -> tuple[str, ...]:
    return () if text == "[]" else tuple(json.loads(text))


def _shown(entry: Entry) -> str:
    issue, platforms = entry
    return "".join([f" {issue}" if issue else "", f" [{', '.join(platforms)}]" if platforms else ""])


def apply(plan: Plan, *, actor: str, reason: str, progress: Callable[[int, int], None] | None = None) -> None:
    """Applies ``plan`` in one transaction, in batches; ``progress(done, total)`` is called after each batch."""
    total, done = len(plan.add) + len(plan.change) + len(plan.remove), 0
    now = timezone.now()

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    with transaction.atomic():
        for names in _batches(plan.remove):
            plan.backend.disabled_tests.filter(name__in=names).delete()
            step(len(names))
        for names in _batches(sorted(plan.add)):
            rows = [_row(plan.backend, name, plan.add[name], actor=actor, reason=reason, now=now) for name in names]
            _insert(rows)
            step(len(names))
        for names in _batches(sorted(plan.change)):
            _update(plan.backend, {name: plan.change[name] for name in names}, now=now)
            step(len(names))


def _batches(names: list[str]):
    for start in range(0, len(names), BATCH):
        yield names[start : start + BATCH]


COLUMNS = ("backend_id", "name", "kind", "test_name", "class_name", "reason", "issue_url", "platforms", "actor")


def _row(backend: Backend, name: str, entry: Entry, *, actor: str, reason: str, now: datetime) -> tuple:
    """The values of a new entry: COLUMNS, then created_at and updated_at."""
    kind, test, klass = name_parse(name)
    return (backend.pk, name, kind, test, klass, reason, entry[0], list(entry[1]), actor, now, now)


def _insert(rows: list[tuple]) -> None:
    """New entries by COPY on PostgreSQL: bulk_create spends seconds building model instances and statements for
    32,000 rows, COPY a fraction of one. Elsewhere (SQLite) bulk_create."""
    if connection.vendor != "postgresql":
        fields = (*COLUMNS, "created_at", "updated_at")
        DisabledTest.objects.bulk_create([DisabledTest(**dict(zip(fields, row, strict=True))) for row in rows])
        return
    table = DisabledTest._meta.db_table
    sql = f"COPY {table} ({', '.join(COLUMNS)}, created_at, updated_at) FROM STDIN"
    with connection.cursor() as cursor, cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row((*row[:7], Jsonb(row[7]), *row[8:]))


def _update(backend: Backend, entries: dict[str, Entry], *, now: datetime) -> None:
    """New issue and platforms of existing entries, one statement run for many (bulk_update's CASE expressions cost
    seconds a thousand rows to build); the rest of each entry (id, reason, who, expiry) stays."""
    table, platforms = DisabledTest._meta.db_table, DisabledTest._meta.get_field("platforms")
    sql = f"UPDATE {table} SET issue_url = %s, platforms = %s, updated_at = %s WHERE backend_id = %s AND name = %s"
    params = [
        (issue, platforms.get_db_prep_save(list(names), connection), now, backend.pk, name)
        for name, (issue, names) in entries.items()
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def export_json(*, backend_id: int, now: datetime | None = None) -> str:
    """The backend's entries in force (expired ones left out) as the JSON text of PyTorch's format, sorted by name.
    Written as text from the stored platforms' JSON: decoding and encoding 32,000 lists would take most of a second."""
    rows = DisabledTest.objects.filter(backend_id=backend_id).active(now).order_by("name")
    rows = rows.values_list("name", "issue_url", PLATFORMS_TEXT)
    items = ",".join(f"{json.dumps(name)}:[{json.dumps(issue)},{platforms}]" for name, issue, platforms in rows)
    return f"{{{items}}}"
