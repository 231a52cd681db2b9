"""Server-side charts: each backend keeps its colour whatever the order of the series."""

import re
from datetime import date

from hud.figures.queries import DayRate, MetricsSeries
from hud.stores.types import BackendInfo
from hud.web import charts


def series(backend_id: int, repo: str, level: str) -> MetricsSeries:
    info = BackendInfo(backend_id, repo, level, "", (), ("pull_request",), True)
    return MetricsSeries(info, [DayRate(date(2026, 11, 1), 9, 10), DayRate(date(2026, 11, 2), 8, 10)])


def stroke_of(svg: str, repo: str) -> str:
    return re.search(rf'<circle [^>]*fill="(#[0-9a-f]+)"><title>{re.escape(repo)} ', svg)[1]


def test_a_backend_keeps_its_colour_when_the_order_of_backends_changes():
    npu, xpu = series(3, "ascend/npu", "L2"), series(4, "intel/xpu", "L2")
    before = charts.line_chart([npu, xpu])
    after = charts.line_chart([series(4, "intel/xpu", "L4"), npu])  # promoted: now listed first
    assert stroke_of(before, "ascend/npu") == stroke_of(after, "ascend/npu")
    assert stroke_of(before, "intel/xpu") == stroke_of(after, "intel/xpu")
    assert stroke_of(before, "ascend/npu") != stroke_of(before, "intel/xpu")
