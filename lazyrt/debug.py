"""The debug dial, ``LAZYRT_DEBUG``: 1 prints one line per executed graph, 2 adds
each kernel's time and GB/s (and, when a graph is compiled, each kernel's
cache outcome and compile time), 3 the graph with the user's source lines and
the fusion plan, 4 the generated source. ``LAZYRT_DUMP_DIR=D`` writes the
same record of every compiled graph into ``D/<graph key>/``. Both read the
backend's :class:`~lazyrt.compile_record.CompileRecord`, so they show the same
sections on every backend; :func:`last_record` gives it to code.

This is the user's side: the records and :func:`watch`. What the runtime calls
on every barrier is :mod:`lazyrt.debug_sink` (re-exported here), which never
imports the runtime.
"""
from __future__ import annotations

import contextlib

from . import debug_sink
from .debug_sink import (DUMP_VARIABLE, RECORDS_KEPT, VARIABLE, compiled, level, ran,  # noqa: F401
                         report_graph, report_launch)


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
    program = debug_sink._last[0]
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
    kept = list(debug_sink._records)
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
