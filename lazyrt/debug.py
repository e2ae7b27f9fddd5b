"""The debug dial, ``LAZYRT_DEBUG``: 1 prints one line per executed graph, 2 adds
each kernel's time and GB/s (and, when a graph is compiled, each kernel's
cache outcome and compile time), 3 the graph with the user's source lines and
the fusion plan, 4 the generated source. ``LAZYRT_DUMP_DIR=D`` writes the
same record of every compiled graph into ``D/<graph key>/``. Both read the
backend's :class:`~lazyrt.compile_record.CompileRecord`, so they show the same
sections on every backend; :func:`last_record` gives it to code.

It is read on every barrier, so a test or a notebook can turn it on and off
at run time. ``os.environ``'s own lookup of an unset variable raises and
catches a KeyError (about a microsecond, a tenth of a small graph's whole
sync), so the dial reads the environment's underlying dict directly where
the platform has one.
"""
from __future__ import annotations

import contextlib
import os
from collections import deque

VARIABLE = "LAZYRT_DEBUG"


def _reader(name):
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    decode = getattr(os.environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:
        return lambda: os.environ.get(name)
    key = encode(name)

    def read():
        raw = data.get(key)
        return None if raw is None else decode(raw)
    return read


_read = _reader(VARIABLE)


def level() -> int:
    """The current ``LAZYRT_DEBUG`` level (0 when unset)."""
    raw = _read()
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"lazyrt: $LAZYRT_DEBUG must be an integer 0-4, got {raw!r}") from None


# --- what the barrier shows: every backend's compile record, formatted once ----

DUMP_VARIABLE = "LAZYRT_DUMP_DIR"
_read_dump = _reader(DUMP_VARIABLE)
_last = [None]  # the program the last barrier ran (its record is the last record)
#: the records of the last compiles, newest last (kept on a compile, never on a run)
RECORDS_KEPT = 64
_records = deque(maxlen=RECORDS_KEPT)


def ran(program):
    """The barrier ran ``program`` (cheap: one store; the record exists already)."""
    _last[0] = program


def last_record():
    """The :class:`~lazyrt.compile_record.CompileRecord` of the program the last
    barrier ran (compiled then, or found in the program cache); None before
    any barrier.

    >>> import numpy as np, lazyrt as lr
    >>> (lr.tensor(np.ones(3)) + 1).numpy().tolist()
    [2.0, 2.0, 2.0]
    >>> lr.debug.last_record().graph.n_ops
    1
    """
    program = _last[0]
    return None if program is None else program.record


def record(graph_key: int):
    """The compile record of the cached program for ``graph_key`` (as printed by
    ``LAZYRT_DEBUG=1``), or None when no program for it is in the cache."""
    from .runtime import program_cache
    program = program_cache.get(graph_key)
    return None if program is None else program.record


def records(n: int | None = None) -> list:
    """The compile records of the last ``n`` compiles (all kept, up to
    ``RECORDS_KEPT``), oldest first: each with ``graph``, ``plan`` and
    ``kernels``.

    >>> import numpy as np, lazyrt as lr
    >>> _ = (lr.tensor(np.ones(5)) * 3).numpy()
    >>> lr.debug.records(1)[0].graph.n_ops
    1
    """
    kept = list(_records)
    return kept if n is None else kept[-n:] if n > 0 else []


@contextlib.contextmanager
def watch(time_launches: bool = False, max_graphs: int | None = None):
    """Watch every barrier inside the block; yields the
    :class:`lazyrt.observe.Observer`, whose ``explain()`` says why each graph
    was compiled, what forced each barrier and which ops fell back, and whose
    ``graphs`` hold each distinct graph's compile record::

        with lr.debug.watch() as run:
            train(steps=3)
        print(run.explain())          # or display(run.explain()) in a notebook
        run.graphs[0].record.kernels  # the first graph's kernels
    """
    from . import runtime
    from .observe import Observer
    observer = Observer(time_launches=time_launches, max_graphs=max_graphs)
    previous = runtime.watch(observer)
    try:
        yield observer
    finally:
        runtime.watch(previous)


def compiled(record, level: int):
    """The barrier compiled a program: print its record at ``level`` and write
    it to ``$LAZYRT_DUMP_DIR`` when set. The only place records are shown."""
    import sys
    from .compile_record import dump_record, format_record
    _records.append(record)
    if level >= 2:
        print(format_record(record, level), file=sys.stderr)
    root = _read_dump()
    if root:
        dump_record(record, root)


def report_launch(name: str, seconds: float, nbytes: int):
    """``LAZYRT_DEBUG>=2``: one line per launch, its time and GB/s (every backend)."""
    import sys
    gbs = nbytes / seconds / 1e9 if seconds > 0 and nbytes else 0.0
    print(f"[lazyrt]   {name:<40s} {seconds * 1e3:9.3f} ms {gbs:8.2f} GB/s", file=sys.stderr)


def report_graph(key: int, nodes: int, kernels: int, compiled: bool, backend: str,
                 seconds: float):
    """``LAZYRT_DEBUG>=1``: one line per executed graph."""
    import sys
    print(f"[lazyrt] graph {key:016x} {nodes} nodes, {kernels} kernels, "
          f"{'compiled' if compiled else 'cached'} on {backend}, {seconds * 1e3:.3f} ms",
          file=sys.stderr)
