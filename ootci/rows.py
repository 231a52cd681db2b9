"""Model instances from the rows of a hand-written statement, mapped as ``Model.objects.raw()`` maps them, and the
prepared cursor such statements run on.

The hot statements of a callback are written out (the ORM took longer to compile them than PostgreSQL to run them),
but ``raw()`` still worked out which column is which field and each field's converters on every call, a tenth of a
callback's CPU: here that plan is made once per statement, then reused.

On PostgreSQL they run on :func:`prepared_cursor`: the ORM's cursors bind parameters on the client, so PostgreSQL
parsed and planned every statement of every callback again (a job's read joined with its backend and failure: 0.25 ms
of PostgreSQL's time a run, 0.03 ms prepared). A cursor that binds on the server lets psycopg prepare a statement the
``prepare_threshold``-th time a connection runs it (``DATABASE_PREPARED``, config/settings.py).
"""

from typing import Any

from django.db import connections
from django.db.models import Model

_plans: dict[tuple, tuple] = {}


def prepared_cursor(using: str = "default"):
    """A cursor of ``using`` that binds parameters on the server, so its statements are prepared once per connection
    (PostgreSQL with a ``prepare_threshold``); else the ORM's cursor. Wrapped as the ORM's are: errors, query log."""
    connection = connections[using]
    if connection.vendor != "postgresql" or connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        return connection.cursor()
    import psycopg  # PostgreSQL only
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        cursor = psycopg.Cursor(connection.connection)
        # Timestamps read in the connection's time zone, as the ORM's cursors read them.
        if (
            connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT).timezone
            != connection.timezone
        ):
            register_tzloader(connection.timezone, cursor)
    connection.validate_thread_sharing()
    return connection.make_debug_cursor(cursor) if connection.queries_logged else connection.make_cursor(cursor)


def columns(model: type[Model], alias: str = "") -> str:
    """The select list of ``model``'s columns (``alias.``-qualified when given), for ``rows_as``: only what it maps
    (``SELECT *`` also read the columns the database keeps for itself, such as ``newer_finished_at``)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + field.column for field in model._meta.concrete_fields)


def rows_as(
    model: type[Model], sql: str, params: list[Any], *, using: str = "default", related: tuple[str, ...] = ()
) -> list[Model]:
    """``list(model.objects.raw(sql, params))``: columns that are not the model's become attributes. ``related``:
    the foreign keys (or reverse one-to-ones) whose rows the statement joins, selecting their columns as
    ``<key>__<column>`` (``related_columns``): each is mapped the same way and cached on the instance, as
    ``select_related`` does."""
    connection = connections[using]
    key = (model, sql, using, related)
    with prepared_cursor(using) as cursor:
        cursor.execute(sql, params)
        if (plans := _plans.get(key)) is None:  # a statement's columns are its own: described once
            names = tuple(column[0] for column in cursor.description)
            plans = _plans.setdefault(key, _plans_of(model, names, connection, related))
        rows = cursor.fetchall()
    found = []
    for row in rows:
        values = list(row)
        instance = None
        for field, plan in plans:
            if field is None:
                instance = _mapped(plan, values, connection, using)
                continue
            pk = plan[2][plan[1].index(plan[0]._meta.pk.attname)]  # NULL: a LEFT JOIN found none
            one = None if values[pk] is None else _mapped(plan, values, connection, using)
            field.set_cached_value(instance, one)
            if one is not None and not field.concrete:  # a reverse one-to-one: its row's key back to the instance
                field.remote_field.set_cached_value(one, instance)
        found.append(instance)
    return found


def row_parts(sql: str, params: list[Any], parts: dict[str, type[Model]], *, using: str = "default") -> dict | None:
    """The first row of a statement that selects several models' rows side by side, each column named
    ``<key>__<column>`` (``related_columns``) for its part ``key`` of ``parts``: each mapped as ``rows_as`` maps it (a
    selected column that is not a field becomes an attribute), None where a LEFT JOIN found none. None when the
    statement found no row. One round trip for what would be a statement per model."""
    connection = connections[using]
    key = (tuple(parts.items()), sql, using)
    with prepared_cursor(using) as cursor:
        cursor.execute(sql, params)
        if (plans := _plans.get(key)) is None:
            names = tuple(column[0] for column in cursor.description)
            plans = _plans.setdefault(
                key,
                tuple(
                    (
                        part,
                        _plan(
                            model,
                            [n.removeprefix(f"{part}__") if n.startswith(f"{part}__") else None for n in names],
                            connection,
                        ),
                    )
                    for part, model in parts.items()
                ),
            )
        row = cursor.fetchone()
    if row is None:
        return None
    found = {}
    for part, plan in plans:
        values = list(row)
        pk = plan[2][plan[1].index(plan[0]._meta.pk.attname)]
        found[part] = None if values[pk] is None else _mapped(plan, values, connection, using)
    return found


def related_columns(model: type[Model], key: str, *, using: str = "default") -> str:
    """The select list of ``model``'s columns, from the table aliased ``key``, as ``rows_as(related=(key,))`` reads
    them."""
    quote = connections[using].ops.quote_name
    return ", ".join(f"{key}.{quote(f.column)} AS {quote(f'{key}__{f.column}')}" for f in model._meta.concrete_fields)


def _mapped(plan: tuple, values: list[Any], connection, using: str) -> Model:
    model, names, positions, converters, extra = plan
    for pos, col, functions in converters:
        for convert in functions:
            values[pos] = convert(values[pos], col, connection)
    instance = model.from_db(using, names, [values[pos] for pos in positions])
    for column, pos in extra:
        setattr(instance, column, values[pos])
    return instance


def _plans_of(model: type[Model], columns: tuple[str, ...], connection, related: tuple[str, ...]) -> list[tuple]:
    prefixes = tuple(f"{key}__" for key in related)
    own = [None if column.startswith(prefixes) else column for column in columns]
    plans = [(None, _plan(model, own, connection))]
    for key in related:
        field = model._meta.get_field(key)
        theirs = [column.removeprefix(f"{key}__") if column.startswith(f"{key}__") else None for column in columns]
        plans.append((field, _plan(field.related_model, theirs, connection, extra=False)))
    return plans


def _plan(model: type[Model], columns: list[str | None], connection, *, extra: bool = True) -> tuple:
    """Which of ``columns`` (None: not this model's) is which field, and their converters."""
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
    others = [(column, pos) for pos, column in enumerate(columns) if column is not None and column not in by_column]
    return (
        model,
        [f.attname for f in fields],
        [columns.index(f.column) for f in fields],
        converters,
        others if extra else [],
    )
