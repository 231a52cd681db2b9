"""The relay's PostgreSQL backend (ootci.postgresql) with one change for the suite: a transactional test's flush
deletes the rows.

After every transactional test (``transactional_db``, ``live_server``: about a third of the suite) Django empties every
table with one ``TRUNCATE`` of them all. PostgreSQL truncates a table by giving it, its indexes and its TOAST table new
files, about 5 ms a table here: 0.2–0.3 s for the ~50 tables, whatever the test wrote (a few rows). ``DELETE`` of the
same rows, in the same one transaction, takes ~15 ms. The foreign keys Django makes are deferred to the commit, so the
order of the tables does not matter; the tables' triggers run as on any delete (the daily roll-up ``ootci_jobday``,
migration 0040, and 0043's tables are left with rows of zero counts and PRs without a finish, which their readers
skip as they do after a deletion in production).
A flush that resets sequences or cascades is Django's own.
"""

from django.db.backends.postgresql import operations

from ootci.postgresql import base


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        delete = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
        return [f"{delete} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
