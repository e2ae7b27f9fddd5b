"""Watching a run: what every barrier did, for the CLI and ``lr.debug.watch()``.

While an :class:`Observer` is installed (``lazyrt.runtime.watch``), every
barrier takes the runtime's watched path, which reports each stage here:
where the barrier came from and why (:func:`lazyrt.explain.barrier_origin`),
capture, compile (with the graph, so a recompile is explained against the
nearest earlier graph from the same call site), run (each launch timed when a
trace is asked for; compared against the ``numpy`` oracle under ``lazyrt
check``). Nothing is recorded unless something watches: the unwatched
barrier pays one test.

>>> import numpy as np, lazyrt as lr
>>> with lr.debug.watch() as run:
...     for n in (8, 16):
...         _ = (lr.tensor(np.ones((n, 4), "float32")) * 2).sum().item()
>>> run.explain().recompiles[0].differences[0].what
'input 0 shape (8, 4) → (16, 4)'
"""
from __future__ import annotations

import os
from collections import Counter
from time import perf_counter

from . import _recorder
from . import explain as X

#: barrier events kept for a trace (a longer run keeps its counts only)
MAX_EVENTS = 200_000
#: earlier graphs from the same call site compared against a new one
NEAREST_CANDIDATES = 32


def max_graphs_from_env():
    """``$LAZYRT_MAX_GRAPHS`` as an int (None when unset)."""
    raw = os.environ.get("LAZYRT_MAX_GRAPHS")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"lazyrt: $LAZYRT_MAX_GRAPHS must be a positive integer, got {raw!r}")
    return n


class GraphSeen:
    """One distinct graph of the run, in first-seen order (``no`` from 1)."""

    def __init__(self, no, key, backend, site, cause, graph):
        self.no, self.key, self.backend = no, key, backend
        self.site, self.cause, self.graph = site, cause, graph
        self.record = None      # its CompileRecord, once compiled
        self.runs = 0
        self.why = None         # explain.Recompile

    def __repr__(self):
        return f"<graph {self.no} {self.key:016x} at {X.short(self.site)}, {self.runs} runs>"


class BarrierEvent:
    """One barrier's stages, timed (``perf_counter`` seconds)."""
    __slots__ = ("seq", "backend", "site", "cause", "ops", "t_start", "t_captured",
                 "t_compiled", "t_run", "t_end", "key", "nodes", "graph", "record",
                 "launches", "t_compile_start")

    def __init__(self, seq, backend, site, cause, ops):
        self.seq, self.backend, self.site, self.cause, self.ops = seq, backend, site, cause, ops
        self.graph = self.record = None
        self.launches = []       # (name, end time, seconds, bytes) when launches are timed
        self.t_compile_start = self.t_compiled = None
        self.t_start = perf_counter()

    def captured(self, key, nodes):
        self.t_captured = perf_counter()
        self.key, self.nodes = key, nodes

    def compiled(self, record):
        self.t_compiled = perf_counter()
        self.record = record
        if self.graph is not None and self.graph.record is None:
            self.graph.record = record

    def running(self):
        self.t_run = perf_counter()

    def ran(self):
        self.t_end = perf_counter()

    @property
    def was_compiled(self) -> bool:
        return self.t_compiled is not None

    @property
    def run_s(self) -> float:
        return self.t_end - self.t_run

    @property
    def total_s(self) -> float:
        return self.t_end - self.t_start


class Observer:
    """Watches barriers (see the module docstring).

    ``time_launches``: time each launch on its own (for ``--trace``);
    ``max_graphs``: raise :class:`lazyrt.explain.GraphLimitError` before
    compiling a graph past that many distinct ones; ``checker``: an object
    with ``compare(event, program, params, results)`` (``lazyrt check``);
    ``keep_events``: keep every barrier's timings (for a trace).
    """

    def __init__(self, time_launches=False, max_graphs=None, checker=None, keep_events=False):
        self.time_launches, self.max_graphs, self.checker = time_launches, max_graphs, checker
        self.keep_events = keep_events or time_launches
        self.t0 = perf_counter()
        self.events: list[BarrierEvent] = []
        self.graphs: list[GraphSeen] = []
        self.by_key: dict[int, GraphSeen] = {}
        self.causes = Counter()      # (cause, site) -> barriers
        self.barriers = 0
        self.evictions = 0
        self.limit_error = None
        self._last_end = self.t0
        self._ops_seen = _recorder.counters()["ops_recorded"]
        self._fallbacks_at_start = _fallback_counts()

    # -- called by the runtime's watched barrier ----------------------------------

    def barrier_started(self, backend: str) -> BarrierEvent:
        site, cause = X.barrier_origin(3)
        ops = _recorder.counters()["ops_recorded"]
        event = BarrierEvent(self.barriers, backend, site, cause, ops - self._ops_seen)
        self._ops_seen = ops
        return event

    def compiling(self, event: BarrierEvent, graph):
        seen = self.by_key.get(graph.key)
        if seen is not None:  # compiled before in this run: the program cache evicted it
            self.evictions += 1
            event.graph = seen
            event.t_compile_start = perf_counter()
            return
        g = GraphSeen(len(self.graphs) + 1, graph.key, event.backend, event.site, event.cause,
                      graph)
        g.why = self._why(g)
        self.graphs.append(g)
        self.by_key[graph.key] = g
        event.graph = g
        if self.max_graphs is not None and len(self.graphs) > self.max_graphs:
            self.limit_error = X.GraphLimitError(self.max_graphs, g.why)
            raise self.limit_error
        event.t_compile_start = perf_counter()

    def run(self, event: BarrierEvent, program, params, report):
        if self.time_launches:
            launches = event.launches

            def timed(name, seconds, nbytes):
                launches.append((name, perf_counter(), seconds, nbytes))
                if report is not None:
                    report(name, seconds, nbytes)
            results = program.run(params, timed)
        elif report is not None:
            results = program.run(params, report)
        else:
            results = program.run(params)
        if self.checker is not None:
            self.checker.compare(event, program, params, results)
        return results

    def barrier_done(self, event: BarrierEvent, program):
        self.barriers += 1
        self.causes[(event.cause, event.site)] += 1
        g = event.graph if event.graph is not None else self.by_key.get(event.key)
        if g is None:  # compiled before the watch began: first seen now
            g = GraphSeen(len(self.graphs) + 1, event.key, event.backend, event.site,
                          event.cause, program.record.graph)
            g.record = program.record
            g.why = X.Recompile(g.no, g.key, g.site, g.cause, None,
                                note="compiled before the watch began")
            self.graphs.append(g)
            self.by_key[event.key] = g
        event.graph = g
        g.runs += 1
        if self.keep_events and len(self.events) < MAX_EVENTS:
            self.events.append(event)
        self._last_end = event.t_end

    # -- what it found -------------------------------------------------------------

    def _why(self, g: GraphSeen) -> X.Recompile:
        same_site = [h for h in self.graphs if h.site == g.site][-NEAREST_CANDIDATES:]
        if not same_site:
            return X.Recompile(g.no, g.key, g.site, g.cause, None)
        best = None
        for h in reversed(same_site):  # the most recent wins a tie
            if h.backend != g.backend:
                diffs = [X.Difference(f"backend {h.backend} → {g.backend}")]
            else:
                diffs = X.diff_graphs(h.graph, g.graph)
            if best is None or len(diffs) < len(best[1]):
                best = (h, diffs)
        h, diffs = best
        return X.Recompile(g.no, g.key, g.site, g.cause, h.no, tuple(diffs))

    def explain(self) -> X.Explanation:
        """The run so far as an :class:`lazyrt.explain.Explanation`."""
        causes = sorted(((n, cause, site) for (cause, site), n in self.causes.items()),
                        key=lambda t: (-t[0], t[1], t[2] or ""))
        now = _fallback_counts()
        fallbacks = [(n - self._fallbacks_at_start.get(k, 0), k[0], k[1])
                     for k, n in now.items()]
        fallbacks = sorted((f for f in fallbacks if f[0] > 0),
                           key=lambda t: (-t[0], t[1], t[2] or ""))
        return X.Explanation(len(self.graphs), self.barriers,
                             tuple(g.why for g in self.graphs), tuple(causes),
                             tuple(fallbacks), self.max_graphs, self.evictions)

    def trace_events(self) -> list:
        """Chrome trace events (``chrome://tracing``, Perfetto): per barrier,
        ``record`` (ops recorded since the last barrier), ``capture``, ``plan``
        and one ``compile`` per kernel (on a cache miss), ``run`` with one
        event per launch inside it (when launches were timed)."""
        pid = os.getpid()

        def us(t):
            return round((t - self.t0) * 1e6, 3)

        out = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "lazyrt"}},
               {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1,
                "args": {"name": "host: record, capture, plan, compile"}},
               {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2,
                "args": {"name": "run: graphs and kernel launches"}}]

        def span(name, cat, t_from, t_to, tid, **args):
            out.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                        "ts": us(t_from), "dur": round(max(t_to - t_from, 0.0) * 1e6, 3),
                        "args": args})

        last = self.t0
        for e in self.events:
            g = e.graph
            label = f"graph {g.no}" if g is not None else f"{e.key:016x}"
            span("record", "record", last, e.t_start, 1, ops=e.ops, graph=label)
            span("capture", "capture", e.t_start, e.t_captured, 1, graph=label,
                 key=f"{e.key:016x}", nodes=e.nodes, site=e.site or "", cause=e.cause)
            if e.record is not None and e.t_compile_start is not None:
                kernels_s = sum(k.compile_s for k in e.record.kernels)
                plan_end = e.t_compile_start + max(e.record.compile_s - kernels_s, 0.0)
                span("plan", "plan", e.t_compile_start, plan_end, 1, graph=label,
                     steps=len(e.record.kernels))
                t = plan_end
                for k in e.record.kernels:
                    span(f"compile {k.name}", "compile", t, t + k.compile_s, 1, graph=label,
                         cache=k.cache, ops=", ".join(k.ops))
                    t += k.compile_s
            span(f"run {label}", "run", e.t_run, e.t_end, 2, key=f"{e.key:016x}",
                 backend=e.backend, compiled=e.was_compiled)
            for name, end, seconds, nbytes in e.launches:
                span(name, "kernel", end - seconds, end, 2, graph=label, bytes=nbytes,
                     gbs=round(nbytes / seconds / 1e9, 3) if seconds > 0 else 0.0)
            last = e.t_end
        return out


def _fallback_counts() -> Counter:
    from .metrics import metrics
    return metrics.fallback_sites()
