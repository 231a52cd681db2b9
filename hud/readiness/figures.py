"""Readiness figures: every backend's latest attempts against the level gates (``ootci.gates``), over the fixed
promotion and demotion windows, from one store statement (either store) and the lost dispatches."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from hud.stores.base import Ask, Store, Windows, lost_rows
from ootci import gates

WINDOWS = {"p": gates.PROMOTION_DAYS, "d": gates.DEMOTION_DAYS}


def figures(store: Store, *, now: datetime, backend_id: int | None = None) -> gates.Figures:
    """Backend id → (promotion window, demotion window) figures, unrounded, for every backend with a job or a lost
    dispatch of ``gates.EVENT`` in the promotion window."""
    windows: Windows = {w: (gates.EVENT, now - timedelta(days=days)) for w, days in WINDOWS.items()}
    asks: list[Ask] = [(kind, w) for w in WINDOWS for kind in ("gates", "run")]
    rows = store.figure_rows(windows=windows, asks=asks, backend_id=backend_id)
    rows += lost_rows(windows, asks, backend_id)
    found: dict[str, dict[int, dict]] = {w: defaultdict(dict) for w in WINDOWS}
    for r in rows:
        kind, w = r["kind"].split(":")
        found[w][r["backend_id"]][kind] = r
    ids = sorted(set(found["p"]) | set(found["d"]))
    return {bid: (window_figures(found["p"][bid], "p"), window_figures(found["d"][bid], "d")) for bid in ids}


def window_figures(rows: dict[str, dict], w: str) -> gates.WindowFigures:
    g, run, lost = rows.get("gates", {}), rows.get("run", {}), rows.get("lost", {})

    def n(name: str) -> int:
        return int(g.get(name) or 0)

    return gates.WindowFigures(
        days=WINDOWS[w],
        successes=n("successes"),
        test_failures=n("test_failures"),
        infra_failures=n("infra_failures") + int(lost.get("total") or 0),
        timed_out=n("timed_out"),
        overruns=n("overruns"),
        queue_avg=micro(g.get("queue_avg")),
        dependency_avg=micro(g.get("dependency_avg")),
        e2e_p50=micro(run.get("p50")),
    )


def micro(value) -> float | None:
    """Seconds to the microsecond, the resolution of the timestamps: the stores sum floats in different orders, and
    the last bits of that must not tell them apart."""
    return None if value is None else round(float(value), 6)
