"""Exact percentiles from a histogram (``hud.stores.db.stats``, ``hud.stores.db.runs``): once the counts per bucket
have given, per backend and percentile, the bucket that holds each of its two ranks and the rank's place in it, and
that bucket's values have been read sorted, these give the values at the ranks and interpolate them as
``percentile_cont`` does."""


def rank_values(picked: str, read: str, key: str) -> str:
    """Per backend, percentile (``name``) and its place p(n - 1): the values at ranks ⌊place⌋ (``low``) and ⌈place⌉
    (``high``), each found at its place ``at`` in the sorted values (``sorted``) of the bucket that holds it."""
    return f"""
        SELECT p.backend_id, p.name, p.place, MIN(r.sorted[p.at + 1]) FILTER (WHERE p.rank = floor(p.place)) AS low,
               MIN(r.sorted[p.at + 1]) FILTER (WHERE p.rank = ceil(p.place)) AS high
        FROM {picked} p JOIN {read} r USING ({key}) GROUP BY p.backend_id, p.name, p.place"""


def interpolated(values: str, names) -> str:
    """Per backend, each percentile of ``names`` from its two ranks' values, interpolated as ``percentile_cont``."""
    pivot = ", ".join(f"MAX(CASE WHEN name = '{c}' THEN value END) AS {c}" for c in names)
    return f"""
        SELECT backend_id, {pivot} FROM (
            SELECT backend_id, name, CASE WHEN floor(place) = ceil(place) THEN low
                   ELSE low + (place - floor(place)) * (high - low) END AS value FROM {values}) AS found
        GROUP BY backend_id"""
