"""Benchmarks that measure this checkout beside another (``BENCH_BASELINE=<checkout>``), interleaved round by round
(before, after, before, …) so that both meet the same load, each tree on a PostgreSQL database of its own."""

import os
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
SERVER = "postgresql://postgres@127.0.0.1:5432"
BASELINE = os.environ.get("BENCH_BASELINE", "")

Tree = tuple[str, Path, str]  # label, checkout, database URL


@contextmanager
def trees_on_databases(kind: str) -> Iterator[list[Tree]]:
    """The trees measured, the baseline's first when there is one, each on a new database (dropped afterwards)."""
    found = ([("before", Path(BASELINE))] if BASELINE else []) + [("after" if BASELINE else "this", ROOT)]
    prefix = os.environ.get("DATABASE_URL", "/ootci").rsplit("/", 1)[1]
    made = [(label, tree, f"{SERVER}/{prefix}_bench_{kind}_{n}") for n, (label, tree) in enumerate(found)]
    _databases(made, create=True)
    try:
        yield made
    finally:
        _databases(made, create=False)


def interleaved(
    trees: list[Tree], rounds: int, run: Callable[[Path, str], dict], line: Callable[[dict], str]
) -> dict[str, list[dict]]:
    """Each tree's figures per round, ``run(checkout, database)`` called tree after tree in every round."""
    results: dict[str, list[dict]] = {label: [] for label, _, _ in trees}
    for n in range(rounds):
        for label, tree, database in trees:
            figures = run(tree, database)
            results[label].append(figures)
            print(f"\n[round {n + 1}, {label}] " + line(figures))
    return results


def medians(rounds: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def _databases(trees: list[Tree], *, create: bool) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for _, _, database in trees:
            name = database.rsplit("/", 1)[1]
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if create:
                conn.execute(f"CREATE DATABASE {name}")
