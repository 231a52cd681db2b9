import io
import textwrap

import pytest
from django.core.management import CommandError, call_command

from ootci import allowlist
from ootci.models import Backend, LevelChange, LevelReview
from tests.hud.builders import job

RFC_EXAMPLE = textwrap.dedent(
    """\
    L1:
      - org1/repo1
      - org2/repo2: oncall1, oncall2
    L2:
      - org3/repo3
    L3:
      npu:
        ascend/pytorch-npu: [oncall1, oncall2]
      xpu:
        intel/torch-xpu-ops: []
    L4:
      - org5/repo5: oncall1, oncall2
    """
)


def write(tmp_path, text: str):
    path = tmp_path / "allowlist.yml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def snapshot() -> list[tuple]:
    return list(Backend.objects.order_by("repo").values_list("repo", "level", "device", "oncalls", "enabled"))


def test_it_parses_every_form_of_the_rfc_example():
    entries = {e.repo: e for e in allowlist.parse(RFC_EXAMPLE)}
    assert entries["org1/repo1"].level == "L1" and entries["org1/repo1"].oncalls == ()
    assert entries["org2/repo2"].oncalls == ("oncall1", "oncall2")
    assert (entries["ascend/pytorch-npu"].level, entries["ascend/pytorch-npu"].device) == ("L3", "npu")
    assert entries["intel/torch-xpu-ops"].oncalls == ()
    assert entries["org5/repo5"].level == "L4"


def test_import_creates_backends_with_an_audit_row_each(db, tmp_path):
    out = run("import_allowlist", write(tmp_path, RFC_EXAMPLE))
    assert "Applied: 6 to add, 0 to change, 0 to disable" in out
    assert Backend.objects.get(repo="ascend/pytorch-npu").oncalls == ["oncall1", "oncall2"]
    assert LevelChange.objects.filter(from_level="", actor="import_allowlist").count() == 6


def test_export_then_import_round_trips(db, tmp_path):
    run("import_allowlist", write(tmp_path, RFC_EXAMPLE))
    before = snapshot()
    exported = run("export_allowlist")
    Backend.objects.all().delete()
    run("import_allowlist", write(tmp_path, exported))
    assert snapshot() == before
    assert "the database already matches" in run("import_allowlist", write(tmp_path, exported))


def test_export_writes_to_a_path(db, tmp_path):
    run("import_allowlist", write(tmp_path, RFC_EXAMPLE))
    target = tmp_path / "out.yml"
    call_command("export_allowlist", str(target), stderr=io.StringIO())
    assert allowlist.parse(target.read_text()) == allowlist.parse(run("export_allowlist"))


def test_import_moves_levels_and_disables_what_the_file_dropped(db, tmp_path):
    run("import_allowlist", write(tmp_path, RFC_EXAMPLE))
    out = run("import_allowlist", write(tmp_path, "L2:\n  - org1/repo1\nL4:\n  - org5/repo5\n"), "--reason", "Q3")
    assert "~ org1/repo1: level L1 → L2" in out
    assert "- org3/repo3: disable (not in the file)" in out
    change = LevelChange.objects.get(backend__repo="org1/repo1", from_level="L1")
    assert (change.to_level, change.reason) == ("L2", "Q3")
    assert not Backend.objects.get(repo="org3/repo3").enabled
    assert Backend.objects.get(repo="org5/repo5").oncalls == []


def test_an_imported_level_move_is_reviewed_with_the_figures_it_was_decided_on(db, tmp_path):
    run("import_allowlist", write(tmp_path, RFC_EXAMPLE))
    repo1 = Backend.objects.get(repo="org1/repo1")
    job(repo1, name="build", conclusion="success", event_type="pull_request", pr_number=1)
    LevelReview.objects.create(
        backend=repo1,
        kind="proposal",
        state="proposed",
        from_level="L1",
        to_level="L2",
        promotion_days=14,
        demotion_days=7,
    )

    out = run("import_allowlist", write(tmp_path, "L2:\n  - org1/repo1\nL4:\n  - org5/repo5\n"), "--reason", "Q3")

    review = LevelReview.objects.get(backend=repo1, kind="change")
    assert (review.state, review.from_level, review.to_level, review.reason) == ("applied", "L1", "L2", "Q3")
    assert review.actor == "import_allowlist" and review.level_change.to_level == "L2"
    assert review.figures["promotion"]["total"] == 1  # the readiness figures as evaluated at the import
    assert LevelReview.objects.get(backend=repo1, kind="proposal").state == "dismissed"
    assert not LevelReview.objects.filter(kind="change").exclude(backend=repo1).exists()  # adds are not moves
    assert "org1/repo1: L1 → L2" in out and "1 level moves reviewed" in out


def test_dry_run_prints_the_diff_and_writes_nothing(db, tmp_path):
    out = run("import_allowlist", write(tmp_path, RFC_EXAMPLE), "--dry-run")
    assert "+ org5/repo5: add at L4" in out and "Nothing was written" in out
    assert not Backend.objects.exists()


def test_import_matches_existing_backends_ignoring_case(make_backend, tmp_path):
    make_backend("Org1/Repo1", level="L1")
    run("import_allowlist", write(tmp_path, "L2:\n  - org1/repo1\n"))
    assert snapshot() == [("Org1/Repo1", "L2", "", [], True)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "L1:\n  - org1/repo1\nL2:\n  - ORG1/REPO1\n",
            "line 4: duplicate repo ORG1/REPO1 (L2); already listed on line 2",
        ),
        ("L1:\n  - not-a-repo\n", "line 2: L1[0]: 'not-a-repo' is not a repository name"),
        ("L2:\n  - Tests/npu\n", "line 2: L2[0]: The HUD's own pages take /oot/tests/…"),
        ("L5:\n  - a/b\n", "line 1: unknown level 'L5'"),
        ("l1:\n  - a/b\n", "unknown level 'l1'"),
        ("L3:\n  - a/b\n", "line 2: L3 must be a mapping of device"),
        ("L3:\n  npu:\n    - a/b\n", "L3.npu must be a mapping"),
        ("L3:\n  'n p u':\n    a/b: []\n", "device 'n p u' must be a slug"),
        ("L2: a/b\n", "L2 must be a list"),
        ("L1:\n  - a/b: x\n    c/d: y\n", "exactly one key"),
        ("L4:\n  - a/b: {x: 1}\n", "on-calls must be"),
        ("- a/b\n", "the top level must be a mapping"),
        ("L1: [a/b\n", "not valid YAML"),
    ],
)
def test_every_import_error_names_the_entry_and_leaves_the_database_untouched(make_backend, tmp_path, text, message):
    make_backend("keep/me", level="L2")
    before = snapshot()
    with pytest.raises(CommandError) as exc:
        run("import_allowlist", write(tmp_path, text))
    assert message in str(exc.value)
    assert "nothing was changed" in str(exc.value)
    assert snapshot() == before


def test_import_reports_an_unreadable_file(db, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("import_allowlist", str(tmp_path / "missing.yml"))


def test_import_reads_standard_input(db):
    call_command("import_allowlist", "-", stdin=io.StringIO("L2:\n  - a/b\n"), stdout=io.StringIO())
    assert snapshot() == [("a/b", "L2", "", [], True)]


def test_cadences_are_in_the_allowlist_and_round_trip(db, tmp_path):
    path = tmp_path / "allowlist.yml"
    path.write_text(
        textwrap.dedent(
            """\
            L2:
              - acme/npu: alice
              - intel/xpu
            cadences:
              acme/npu: {nightly: 720, periodic: 60, grace: 30}
            """
        )
    )
    call_command("import_allowlist", str(path), stdout=io.StringIO())

    npu, xpu = Backend.objects.get(repo="acme/npu"), Backend.objects.get(repo="intel/xpu")
    assert (npu.nightly_cadence_minutes, npu.periodic_cadence_minutes, npu.stale_grace_minutes) == (720, 60, 30)
    assert (xpu.nightly_cadence_minutes, xpu.periodic_cadence_minutes, xpu.stale_grace_minutes) == (1440, None, 120)
    exported = allowlist.export_yaml()
    assert "cadences:\n  acme/npu: {nightly: 720, periodic: 60, grace: 30}\n" in exported
    assert "intel/xpu: {" not in exported  # the defaults are not written
    path.write_text(exported.replace("periodic: 60", "periodic: null"))
    call_command("import_allowlist", str(path), stdout=io.StringIO())
    assert Backend.objects.get(repo="acme/npu").periodic_cadence_minutes is None


@pytest.mark.parametrize(
    ("cadences", "message"),
    [
        ("acme/npu: {nightly: 0}", "cadences.acme/npu.nightly must be a number of minutes from 1 to 999999"),
        ("acme/npu: {weekly: 60}", "cadences.acme/npu: 'weekly' is not one of nightly, periodic, grace"),
        ("other/repo: {nightly: 60}", "cadences: other/repo is not listed at any level"),
    ],
)
def test_a_bad_cadence_is_refused_with_its_line(db, cadences, message):
    with pytest.raises(allowlist.AllowlistError) as refused:
        allowlist.parse(f"L2:\n  - acme/npu\ncadences:\n  {cadences}\n")
    assert message in str(refused.value)


def test_the_relays_probe_is_a_top_level_list_and_round_trips(db, tmp_path):
    path = write(tmp_path, "L2:\n  - pytorch/crcr-test\n  - acme/npu\nprobes: [PyTorch/crcr-test]\n")

    out = run("import_allowlist", path)

    assert "Applied: 2 to add" in out
    assert dict(Backend.objects.values_list("repo", "probe")) == {"pytorch/crcr-test": True, "acme/npu": False}
    exported = allowlist.export_yaml()
    assert exported.endswith("probes: [pytorch/crcr-test]\n")
    assert "the database already matches" in run("import_allowlist", write(tmp_path, exported))
    assert allowlist.export_data()["probes"] == ["pytorch/crcr-test"]


def test_a_file_without_probes_keeps_the_flag_and_an_empty_list_clears_it(make_backend, tmp_path):
    make_backend("pytorch/crcr-test", "L2", probe=True)

    assert "the database already matches" in run("import_allowlist", write(tmp_path, "L2:\n  - pytorch/crcr-test\n"))
    assert Backend.objects.get().probe is True  # PyTorch's own allowlist file has no such section
    out = run("import_allowlist", write(tmp_path, "L2:\n  - pytorch/crcr-test\nprobes: []\n"))
    assert "~ pytorch/crcr-test: no longer the relay's probe" in out
    assert Backend.objects.get().probe is False


@pytest.mark.parametrize(
    ("probes", "message"),
    [
        ("[other/repo]", "probes: other/repo is not listed at any level"),
        ("pytorch/crcr-test", "probes must be a list of org/name entries"),
        ("[not-a-repo]", "probes[0]: 'not-a-repo' is not a repository name of the form org/name"),
    ],
)
def test_a_bad_probe_list_is_refused(db, probes, message):
    with pytest.raises(allowlist.AllowlistError) as refused:
        allowlist.parse(f"L2:\n  - pytorch/crcr-test\nprobes: {probes}\n")
    assert message in str(refused.value)
