"""Fill the test search's daily roll-up (TestDay) from the cases of the parsed reports, one day at a time, each day
in its own transaction (``atomic = False``): a large TestCase table is read a day's reports at a time (TestReport's
arrival index), and a run stopped halfway can simply run again, since each day's rows are replaced, not added to."""

from datetime import timedelta

from django.db import migrations, transaction
from django.db.models import Max, Min

from ootci.case_days import day_of, day_recount


def fill(apps, schema_editor) -> None:
    TestCase, TestDay, TestReport = (apps.get_model("ootci", name) for name in ("TestCase", "TestDay", "TestReport"))
    span = TestReport.objects.filter(state="parsed").aggregate(first=Min("received_at"), last=Max("received_at"))
    if span["first"] is None:
        return
    day, last = day_of(span["first"]), day_of(span["last"])
    while day <= last:
        with transaction.atomic():
            day_recount(TestCase, TestDay, day=day)
        day += timedelta(days=1)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ootci", "0037_testday"),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
