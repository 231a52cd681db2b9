"""Model instances from the rows of a hand-written statement, mapped as ``Model.objects.raw()`` maps them.

The hot statements of a callback are written out (the ORM took longer to compile them than PostgreSQL to run them),
but ``raw()`` still worked out which column is which field and each field's converters on every call, a tenth of a
callback's CPU: here that plan is made once per model and column list, then reused.
"""

from typing import Any

from django.db import connections
from django.db.models import Model

_plans: dict[tuple, tuple] = {}


def rows_as(model: type[Model], sql: str, params: list[Any], *, using: str = "default") -> list[Model]:
    """``list(model.objects.raw(sql, params))``: columns that are not the model's become attributes."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        columns = tuple(column[0] for column in cursor.description)
        rows = cursor.fetchall()
    key = (model, columns, using)
    plan = _plans.get(key) or _plans.setdefault(key, _plan(model, columns, connection))
    names, positions, converters, extra = plan
    found = []
    for row in rows:
        values = list(row)
        for pos, col, functions in converters:
            for convert in functions:
                values[pos] = convert(values[pos], col, connection)
        instance = model.from_db(using, names, [values[pos] for pos in positions])
        for column, pos in extra:
            setattr(instance, column, values[pos])
        found.append(instance)
    return found


def _plan(model: type[Model], columns: tuple[str, ...], connection) -> tuple:
    by_column = {field.column: field for field in model._meta.concrete_fields}
    fields = [field for field in model._meta.fields if field.column in columns]
    if model._meta.pk not in fields:
        raise ValueError(f"the statement must select {model.__name__}'s primary key")
    converters = []
    for pos, column in enumerate(columns):
        if (field := by_column.get(column)) is not None:
            col = field.get_col(model._meta.db_table)
            if functions := connection.ops.get_db_converters(col) + col.get_db_converters(connection):
                converters.append((pos, col, functions))
    extra = [(column, pos) for pos, column in enumerate(columns) if column not in by_column]
    return [f.attname for f in fields], [columns.index(f.column) for f in fields], converters, extra
