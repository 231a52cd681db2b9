"""Hand-written statements mapped as the ORM maps them (``ootci.rows``), joined rows included."""

import pytest
from django.db import connection
from django.db.models import Model

from ootci.models import AlertRule, Backend, JobFailure, JobResult
from ootci.rows import related_columns, row_parts, rows_as
from relay.alerts.fire import rule_for
from relay.reports.follow_up import JOB, job_read
from tests.hud.builders import job

RULES = AlertRule._meta.db_table

JOINED = JOB.replace("WHERE job.id = %s", "WHERE job.backend_id = %s ORDER BY job.id")  # every job of a backend


def values(instance: Model) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.django_db
def test_joined_rows_are_the_instances_select_related_reads(make_backend):
    backend = make_backend(oncalls=["alice"], report_pattern="reports-*")
    failed = job(backend, name="test", conclusion="failure", environment={"device": "npu"})
    JobFailure.objects.create(job=failed, failure_class="test", line="FAILED test_add", groups=["a"])
    passed = job(backend, name="build")

    found = rows_as(JobResult, JOINED, [backend.pk], related=("backend", "failure"))
    expected = JobResult.objects.select_related("backend", "failure").filter(backend=backend).order_by("id")

    assert [values(j) for j in found] == [values(j) for j in expected]
    for mine, theirs in zip(found, expected, strict=True):
        assert values(mine.backend) == values(theirs.backend)
    assert values(found[0].failure) == values(expected[0].failure)
    assert found[0].failure.job is found[0]  # the reverse one-to-one points back, as select_related's does
    with pytest.raises(JobResult.failure.RelatedObjectDoesNotExist):
        found[1].failure  # noqa: B018 - a LEFT JOIN that found none: the relation raises, as select_related's does
    with pytest.raises(JobFailure.DoesNotExist):  # cached: no query that could find one
        JobFailure.objects.create(job=passed)
        found[1].failure  # noqa: B018


@pytest.mark.django_db
def test_the_follow_up_reads_its_job_backend_and_failure_in_one_statement(make_backend, django_assert_num_queries):
    backend = make_backend()
    failed = job(backend, name="test", conclusion="failure")
    JobFailure.objects.create(job=failed, failure_class="infra")

    with django_assert_num_queries(1):
        read = job_read(failed.pk)
        assert (read.backend.repo, read.failure.failure_class) == (backend.repo, "infra")
    assert job_read(failed.pk + 1000) is None


@pytest.mark.django_db
def test_hot_statements_are_prepared_and_survive_a_new_column(make_backend):
    """PostgreSQL plans a hot statement once per connection (``prepared_cursor``), and a statement prepared before a
    migration adds a column keeps working (a deploy migrates while the old processes still run)."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    backend = make_backend()
    AlertRule.objects.create(kind=AlertRule.Kind.BASELINE, backend=backend, threshold=2)
    for _ in range(6):  # psycopg prepares on the connection's 5th run (prepare_threshold)
        assert rule_for(AlertRule.Kind.BASELINE, backend).threshold == 2
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [f"%FROM {RULES}%"])
        assert cursor.fetchone()[0] == 1
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the rows' deferred key checks, before the ALTER
        cursor.execute(f"ALTER TABLE {RULES} ADD COLUMN added_later integer")  # rolled back with the test

    assert rule_for(AlertRule.Kind.BASELINE, backend).threshold == 2


@pytest.mark.django_db
def test_a_row_of_several_models_is_mapped_part_by_part(make_backend):
    """``row_parts``: each part as the ORM reads it, a column that is not a field an attribute, None for a part a LEFT
    JOIN did not find, and None for a statement that found no row."""
    backend = make_backend(oncalls=["alice"])
    done = job(backend, name="test", conclusion="failure")
    sql = (
        f"SELECT b.id AS b__id, b.repo AS b__repo, lower(b.repo) AS b__lowered, {related_columns(JobResult, 'j')}"
        " FROM ootci_backend b LEFT JOIN ootci_jobresult j ON j.backend_id = b.id AND j.job_name = %s"
        " WHERE b.repo = %s"
    )
    parts = {"b": Backend, "j": JobResult}

    found = row_parts(sql, [done.job_name, backend.repo], parts)
    missing_job = row_parts(sql, ["no-such-job", backend.repo], parts)
    no_row = row_parts(sql, [done.job_name, "no/such-repo"], parts)

    assert values(found["j"]) == values(JobResult.objects.get(pk=done.pk))
    assert (found["b"].pk, found["b"].repo, found["b"].lowered) == (backend.pk, backend.repo, backend.repo.lower())
    assert found["b"].get_deferred_fields() >= {"oncalls", "level"}  # the rest read when asked, as only() does
    assert found["b"].oncalls == ["alice"]
    assert missing_job["j"] is None and missing_job["b"].pk == backend.pk
    assert no_row is None
