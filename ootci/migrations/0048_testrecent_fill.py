"""Fill the failing tests' history (TestRecent) from the cases of the parsed reports, one backend at a time, each in
its own transaction (``atomic = False``): a run stopped halfway can simply run again, since each backend's rows are
replaced, not added to."""

from django.db import migrations, transaction

from ootci.case_recent import backend_recount


def fill(apps, schema_editor) -> None:
    Backend, TestCase, TestRecent = (apps.get_model("ootci", name) for name in ("Backend", "TestCase", "TestRecent"))
    for backend_id in Backend.objects.order_by("id").values_list("id", flat=True):
        with transaction.atomic():
            backend_recount(TestCase, TestRecent, backend_id=backend_id)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ootci", "0047_testrecent"),
    ]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
