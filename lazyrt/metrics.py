"""Counters every stage reports to, and a readable report of them.

>>> import lazyrt as lr
>>> lr.metrics.reset(); _ = (lr.tensor([1.0]) + 1).numpy()
>>> lr.metrics.snapshot()["graphs_executed"]
1
>>> lr.metrics.graphs_executed   # each counter is also read directly
1
"""
from __future__ import annotations

from collections import Counter

from . import _recorder
from ._source_lines import source_line, user_source


_FIELDS = ("graphs_executed", "cache_hits", "cache_misses", "compiles", "compile_time_s",
           "disk_cache_hits", "kernel_launches", "execute_time_s", "materializations",
           "graph_cuts")


# The report's backend line: the runtime, which imports this module (as the backends
# do), hands it in at import (describe_backend_with), so this module imports neither.
_describe_backend = [lambda: "unknown (lazyrt.runtime not imported)"]


def describe_backend_with(describe):
    """``describe() -> str`` names the backend in use (and why, when it is a
    fallback) on :meth:`Metrics.report`'s backend line; set by the runtime."""
    _describe_backend[0] = describe


class Metrics:
    """Process-wide counters. ``ops_recorded`` lives in the Cython recorder."""

    def __init__(self):
        self.reset()

    def reset(self):
        for f in _FIELDS:
            setattr(self, f, 0)
        self.fallbacks = Counter()
        self.fallback_at = Counter()   # (op, code, offset): where each fallback ran
        self.materialized_at = Counter()
        _recorder.reset_counters()

    def count_fallback(self, op: str):
        self.fallbacks[op] += 1
        # a fallback runs NumPy eagerly, so finding the user's line costs nothing here
        self.fallback_at[(op,) + user_source()] += 1

    def fallback_sites(self) -> Counter:
        """``(op, "file:line") -> count`` of every fallback (``lazyrt explain``)."""
        out = Counter()
        for (op, code, offset), n in self.fallback_at.items():
            out[(op, source_line(code, offset) or "<unknown>")] += n
        return out

    def count_materialization(self):
        self.materializations += 1
        # keyed by the code object and line: formatting "file:line" waits for a snapshot
        # the same user line the recorder gives each node (lazyrt's own frames skipped)
        self.materialized_at[user_source()] += 1

    def snapshot(self) -> dict:
        out = {"ops_recorded": _recorder.counters()["ops_recorded"]}
        out.update({f: getattr(self, f) for f in _FIELDS})
        out["fallbacks"] = dict(self.fallbacks)
        out["materialized_at"] = _by_line(self.materialized_at)
        return out

    def report(self) -> str:
        """A text table of every counter, then where materializations came from."""
        snap = self.snapshot()
        rows = [(k, _fmt(v)) for k, v in snap.items() if not isinstance(v, dict)]
        width = max(len(k) for k, _ in rows)
        lines = ["lazyrt metrics", "-" * (width + 14)]
        lines.append(f"{'backend':<{width}}  {_describe_backend[0]()}")
        lines += [f"{k:<{width}}  {v:>12}" for k, v in rows]
        for title, table in (("fallbacks", snap["fallbacks"]),
                             ("materialized at", snap["materialized_at"])):
            if table:
                lines.append(f"{title}:")
                lines += [f"  {n:>6}  {where}" for where, n in
                          sorted(table.items(), key=lambda kv: -kv[1])]
        return "\n".join(lines)


def _fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _by_line(counts) -> dict:
    out = Counter()
    for (code, offset), n in counts.items():
        out[source_line(code, offset) or "<unknown>"] += n
    return dict(out)


metrics = Metrics()
snapshot = metrics.snapshot
reset = metrics.reset
report = metrics.report


def __getattr__(name):
    """``lr.metrics.graph_cuts`` and every other counter, read live."""
    if name in _FIELDS:
        return getattr(metrics, name)
    if name == "ops_recorded":
        return _recorder.counters()["ops_recorded"]
    raise AttributeError(f"module 'lazyrt.metrics' has no attribute {name!r}")
