"""The relay's PostgreSQL backend (ootci.postgresql) with one change for the suite: a transactional test's flush
deletes the rows.

After every transactional test (``transactional_db``, ``live_server``: about a third of the suite) Django empties every
table with one ``TRUNCATE`` of them all. PostgreSQL truncates a table by giving it, its indexes and its TOAST table new
files, about 5 ms a table here: 0.2–0.3 s for the ~50 tables, whatever the test wrote (a few rows). ``DELETE`` of the
same rows, in the same one transaction, takes ~15 ms. The foreign keys Django makes are deferred to the commit, so the
order of the tables does not matter. The tables' triggers do not run: with the demo seeded (7,071 job results), the
roll-up triggers and the foreign keys' checks of the deletes took 1.75 s of the flush, and 0.02 s without them
(``session_replication_role = replica``, for this transaction, when the test database's user is a superuser, as
``make test``'s is). The roll-up tables the triggers keep (migrations 0040–0045), which are not models, are emptied
with the rest; for another user the triggers run as on any delete, and empty them first.
A flush that resets sequences or cascades is Django's own.
"""

from django.db.backends.postgresql import operations

from ootci.postgresql import base

# The tables migrations 0040-0045 keep by triggers on ootci_jobresult (its TRUNCATE trigger empties the same).
ROLL_UPS = ("ootci_jobday", "ootci_jobtime", "ootci_jobpr", "ootci_jobprday", "ootci_jobrun", "ootci_jobrunday")
# For the flush's transaction only (Django runs a flush in one); setting it is for superusers.
NO_TRIGGERS = """DO $$ BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        SET LOCAL session_replication_role = replica;
    END IF;
END $$;"""


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        delete = f"{style.SQL_KEYWORD('DELETE')} {style.SQL_KEYWORD('FROM')}"
        emptied = [f"{delete} {style.SQL_FIELD(self.quote_name(table))};" for table in [*tables, *ROLL_UPS]]
        return [NO_TRIGGERS, *emptied]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
