"""The benchmarks are not part of the suite (``make bench`` runs them), so nothing else would notice one that no
longer imports: every ``bench_*.py`` module imports and has its benchmarks."""

import importlib
from pathlib import Path

import pytest

MODULES = sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports_and_has_benchmarks(name):
    module = importlib.import_module(f"tests.bench.{name}")
    assert any(key.startswith("test_") and callable(value) for key, value in vars(module).items()), name
