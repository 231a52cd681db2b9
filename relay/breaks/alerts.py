"""A break in the ``baseline_failures`` incident of each backend it is on, and so in that backend's repository issue:
opened with the break, edited in place as its evidence arrives (suspects, bisection steps), resolved with a note
naming the run that passed the tests again."""

from __future__ import annotations

from django.conf import settings

from ootci import breaks as rules
from ootci.models import AlertRule, Backend, Break, Incident
from relay.alerts.fire import incident_fire, incident_green, rule_for

SUSPECTS_SHOWN = 5
TESTS_SHOWN = 20


def fingerprint(brk: Break, backend: Backend) -> str:
    return f"{AlertRule.Kind.BASELINE}:{backend.pk}:break:{brk.pk}"


def break_url(brk: Break, backend: Backend) -> str:
    base = settings.PUBLIC_URL.rstrip("/")
    return f"{base}/oot/{backend.repo}/breaks/#break-{brk.pk}" if base else ""


def break_evaluate(brk: Break) -> dict[str, str]:
    """Open or bring up to date the incident of each backend with an open test of the break."""
    done = {}
    backends = Backend.objects.filter(break_tests__brk=brk, break_tests__fixed_at__isnull=True).distinct()
    for backend in backends:
        rule = rule_for(AlertRule.Kind.BASELINE, backend)
        if rule is None:
            continue
        details = break_details(brk, backend)
        n = len(details["tests"])
        what = f"{backend.repo}: {n} test(s) newly failing at {brk.bad_sha[:12]} (passed at {brk.good_sha[:12]})"
        if details["suspects"]:
            top = details["suspects"][0]
            what += f"; likeliest: {top['pr'] and '#' + str(top['pr']) or top['sha'][:12]} ({top['tier']})"
        done[backend.repo] = incident_fire(
            rule, backend=backend, fingerprint=fingerprint(brk, backend), what=what, details=details
        )
    return done


def break_evaluate_by_id(*, break_id: int) -> dict[str, str]:
    brk = Break.objects.filter(pk=break_id).first()
    return break_evaluate(brk) if brk is not None and brk.state == Break.State.OPEN else {}


def break_fixed_on(brk: Break, backend: Backend, *, note: str) -> str:
    """Every test of the break passes again on ``backend``: its incident resolves, its issue closes with ``note``."""
    details = break_details(brk, backend) | {"closed": note}
    details["text"] += f"\n\n✅ **Fixed**: {note}."
    return incident_green(fingerprint(brk, backend), resolve_after=1, details=details)


def break_details(brk: Break, backend: Backend) -> dict:
    tests = list(brk.tests.filter(backend=backend).select_related("job").order_by("test_id")[:TESTS_SHOWN])
    suspects = list(brk.suspects.all()[:SUSPECTS_SHOWN])
    details = {
        "break": brk.pk,
        "bad_sha": brk.bad_sha,
        "good_sha": brk.good_sha,
        "url": break_url(brk, backend),
        "tests": [
            {"test_id": t.test_id, "url": t.job.run_url if t.job else "", "line": failing_line(t.message)}
            for t in tests
        ],
        "suspects": [
            {
                "rank": s.rank,
                "tier": s.tier,
                "sha": s.sha,
                "pr": s.pr_number,
                "title": s.title,
                "url": s.url,
                "evidence": s.evidence[:5],
            }
            for s in suspects
        ],
        "bisection": {"state": brk.bisection, "note": brk.bisect_note, "culprit": brk.culprit_sha},
    }
    details["text"] = break_text(details, commits=len(brk.commits))
    return details


def failing_line(message: str) -> str:
    """The failure's line to show: a traceback's last line says what failed."""
    lines = [x.strip() for x in (message or "").splitlines() if x.strip()]
    return (lines[-1] if lines else "")[:300]


def break_text(details: dict, *, commits: int) -> str:
    """The break's section of the repository issue (Markdown)."""
    lines = [f"**Tests newly failing at `{details['bad_sha'][:12]}`** (passed at `{details['good_sha'][:12]}`):"]
    for t in details["tests"]:
        where = f" — [run]({t['url']})" if t["url"] else ""
        line = f": `{t['line']}`" if t["line"] else ""
        lines.append(f"- `{t['test_id']}`{where}{line}")
    if details["suspects"]:
        lines += ["", f"**Suspects** ({commits} upstream commits in the range, likeliest first):"]
        for s in details["suspects"]:
            name = f"#{s['pr']} {s['title']}" if s["pr"] else f"`{s['sha'][:12]}` {s['title']}"
            name = f"[{name}]({s['url']})" if s["url"] else name
            why = "; ".join(e["text"] + (f" ([link]({e['url']}))" if e.get("url") else "") for e in s["evidence"][:3])
            lines.append(
                f"{s['rank']}. {name} — **{s['tier']}** ({rules.MEANING[s['tier']]}){': ' + why if why else ''}"
            )
    else:
        lines += ["", "Suspects: being ranked (the upstream commits in the range, as GitHub lists them)."]
    b = details["bisection"]
    if b["state"]:
        lines += ["", f"**Bisection**: {b['state']}" + (f" — {b['note']}" if b["note"] else "")]
    if details["url"]:
        lines += ["", f"The break's page: {details['url']}"]
    return "\n".join(lines)


def firing(brk: Break) -> bool:
    return Incident.objects.filter(fingerprint__contains=f":break:{brk.pk}", state=Incident.State.FIRING).exists()
