"""Barriers: capture, program cache, execution, and binding results back.

``sync(*tensors)`` computes the given tensors (every live pending tensor when
called with none) as ONE graph: shared subexpressions are computed once. The
graph key is looked up in the program cache (an LRU of bounded size); on a
miss the backend compiles the graph. Computed tensors keep their value and
release the graph behind them.

Environment: ``LAZYRT_BACKEND`` (default backend), ``LAZYRT_PROGRAM_CACHE_SIZE``
(programs kept in memory, default 1024), ``LAZYRT_MAX_GRAPH_NODES`` (the
largest pending graph, in ops, before it is cut: computed, counted in
``metrics.graph_cuts``; default 100000),
``LAZYRT_DEBUG=1`` (one line per executed graph on stderr),
``LAZYRT_MAX_GRAPHS`` (fail once a run needs more distinct graphs: see
:mod:`lazyrt.observe`), ``LAZYRT_PLAN_CACHE=0`` (plan every graph anew).

The program cache holds compiled programs in memory; below it, on disk, the
backends keep their plans (:mod:`lazyrt.plan_cache`: a graph key planned
before by this lazyrt, in any process, is not planned again) and kernels
(:mod:`lazyrt.cache`: a kernel source compiled before is loaded).

While something watches the run (the ``lazyrt`` CLI, ``lr.debug.watch()``,
``LAZYRT_MAX_GRAPHS``), barriers take :func:`_execute_watched`, which reports
each stage to the :class:`lazyrt.observe.Observer`; otherwise the barrier
pays one test of ``_watcher`` and nothing else.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from time import perf_counter
from collections import OrderedDict

import numpy as np

from . import _launch
from . import _recorder as R
from ._capture import bind_results, capture, pending_graph_size
from .failed_ops import (CHECKED_OPS, FailedValue, carry, index_out_of_range,
                         name_index_sites)
from . import backends as B
from . import debug_sink
from .graph import Graph
from . import metrics as _metrics_module
from .metrics import metrics


class ProgramCache:
    """graph key -> compiled program, least recently used evicted first."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._programs: OrderedDict[int, object] = OrderedDict()

    def get(self, key):
        program = self._programs.get(key)
        if program is not None:
            self._programs.move_to_end(key)
        return program

    def put(self, key, program):
        self._programs[key] = program
        self._programs.move_to_end(key)
        while len(self._programs) > self.capacity:
            self._programs.popitem(last=False)

    def clear(self):
        self._programs.clear()

    def __len__(self):
        return len(self._programs)


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        raise ValueError(f"lazyrt: ${name} must be an integer, got {os.environ[name]!r}")


program_cache = ProgramCache(_env_int("LAZYRT_PROGRAM_CACHE_SIZE", 1024))


class _ThreadState(threading.local):
    backend = None  # a class default: a missing per-thread attribute would cost a raise


_state = _ThreadState()
_default_backend = None


def default_backend_name() -> str:
    """``$LAZYRT_BACKEND``, else ``triton`` where a GPU is usable, else ``c`` where
    a C compiler exists, else ``numpy`` (with a warning: see
    :func:`lazyrt.backends.default_backend`).
    Decided once per process: probing for a compiler on every barrier costs
    more than a small graph's whole run."""
    global _default_backend
    if _default_backend is None:
        _default_backend = B.default_backend()
    return _default_backend


def current_backend_name() -> str:
    name = _state.backend
    return name or _default_backend or default_backend_name()


# the metrics report names the backend in use; metrics.py sits below the runtime and
# the backends, so it is handed the question rather than importing them
_metrics_module.describe_backend_with(lambda: B.describe(current_backend_name()))


def set_backend(name: str):
    """Use backend ``name`` from now on (in every thread without a ``with lr.backend``)."""
    global _default_backend
    B.get(name)  # fail now, with the reason, if it is unusable
    _default_backend = name


@contextlib.contextmanager
def backend(name: str):
    """``with lr.backend("numpy"): ...`` runs barriers inside on that backend.

    Tensors still pending at entry are computed first, on the outer backend,
    so a graph never straddles two backends.
    """
    B.get(name)
    sync()
    previous = _state.backend
    _state.backend = name
    try:
        yield
    finally:
        sync()
        _state.backend = previous


def available_backends() -> list[str]:
    return B.available_backends()


#: the :class:`lazyrt.observe.Observer` watching barriers, or None (the fast path)
_watcher = None


# A host backend runs the graph on the calling thread, inside the barrier. On a
# worker thread, overlapping the next training step's trace, it measured slower
# on a 2-core host (transformer b32x64: 76 ms a step in line, 82 ms with the
# worker's OpenMP team cut to one thread until the barrier waits, 112-190 ms
# with the full team): the trace and the worker contend for the GIL between
# kernels and for the cores the kernels' OpenMP team needs. Running each stretch
# of kernels in one GIL-free C loop (the team raised to two threads by a flag the
# barrier sets) removed the GIL waits but not the core contention: transformer
# b8x64 took 15.3 ms of trace + 15.0 ms waiting + 0.8 ms to submit, against
# 13.1 + 18.7 in line (medians), and its mean step was worse (outliers).
def _execute(nodes: list, isolate=True):
    if not nodes:
        return
    if _watcher is not None:
        return _execute_watched(nodes, _watcher, isolate)
    name = _state.backend or _default_backend or default_backend_name()
    be = B.get(name)
    level = debug_sink.level()  # once per barrier; backends never read it
    t0 = perf_counter()
    cap = capture(nodes, be.salt)
    if FailedValue.alive and _reads_failed(cap.values):
        return _execute_around_failures(nodes, cap)
    values = cap.values if be is _device_backend or _device_backend is None \
        else _host_values(cap.values)
    program = program_cache.get(cap.key)
    compiled = program is None
    if compiled:
        metrics.cache_misses += 1
        program = be.compile(Graph.from_capture(cap))
        program_cache.put(cap.key, program)
        debug_sink.compiled(program.record, level)
    else:
        metrics.cache_hits += 1
    t1 = perf_counter()
    try:
        if be is _device_backend:
            results = program.run(values, debug_sink.report_launch if level >= 2 else None,
                                  _dead_params(cap, program, _device_backend.owns))
        elif getattr(program, "donation_candidates", None) and values is cap.values and \
                not getattr(be, "device_values", False):  # a host backend's own arrays (c)
            results = program.run(values, debug_sink.report_launch if level >= 2 else None,
                                  _dead_params(cap, program, _host_owned))
        elif level >= 2:
            results = program.run(values, debug_sink.report_launch)
        else:
            results = program.run(values)
    except Exception as exc:  # noqa: BLE001  only an index out of range is taken apart
        if isinstance(exc, IndexError):
            name_index_sites(exc, cap)
        if isolate and index_out_of_range(exc):
            _fail_apart(nodes, cap, exc)
        raise
    t2 = perf_counter()
    metrics.graphs_executed += 1
    metrics.kernel_launches += program.kernels
    metrics.execute_time_s += t2 - t1
    _bind(be, nodes, cap, program, results)
    debug_sink.ran(program)
    if level >= 1:
        debug_sink.report_graph(cap.key, len(cap.nodes), program.kernels, compiled, name, t2 - t0)


# --- a graph that fails on its data ------------------------------------------------------
#
# An index out of range is an error of the op that read it and of every tensor computed
# from that op, not of the barrier: the barrier that runs such an op binds every tensor
# computed from it (asked for, or alive and pending) to a FailedValue, computes what it
# was asked for that does not depend on it, and raises, once. From then on every read
# of those tensors (numpy(), item(), lr.sync(t), torch's .cpu()) raises the error
# again, and so does the barrier that first computes a tensor recorded from them
# later; barriers over anything else (mark_step() included) run as if it never happened.

def _reads_failed(values) -> bool:
    return any(type(v) is FailedValue for v in values)


def _execute_around_failures(nodes: list, cap):
    """The barrier over ``nodes`` when its graph reads a failed value: the outputs
    that depend on one fail with it, the others are computed; then it raises."""
    raise _bind_failures(nodes, cap, carry(cap)).error() from None


def _bind_failures(nodes, cap, carried) -> FailedValue:
    """Bind each output in ``nodes`` that ``carried`` marks to its failure, compute
    the others (one graph), and return the failure to raise: the first failed output's."""
    failures = [carried[i] for i in cap.outputs]
    for n, failure in zip(nodes, failures):
        if failure is not None and not n.is_leaf:
            n.bind(failure)
    _fail_live_dependents()
    _execute([n for n, failure in zip(nodes, failures) if failure is None and not n.is_leaf])
    return next(f for f in failures if f is not None)


def _fail_live_dependents():
    """Bind every live pending tensor computed from a failed value to its failure, so
    this barrier's error is the one for all of them and later barriers skip them."""
    nodes = [t._node for t in R.live_pending()]
    cap = capture(nodes)
    carried = carry(cap)
    for n, i in zip(nodes, cap.outputs):
        if carried[i] is not None and not n.is_leaf:
            n.bind(carried[i])


def _fail_apart(nodes: list, cap, exc):
    """The run of ``cap`` raised ``exc``, an index out of range. Find the ops that
    failed: each range-checked op the graph holds runs as a barrier of its own, in
    topological order (one after a failed one it depends on fails with it, unrun);
    then the outputs that do not depend on a failed op are computed, the others
    bound to its failure, and the failure raised. Where no op fails on its own (a
    value that differs from run to run), ``exc`` is raised as it is."""
    carried = [None] * len(cap.nodes)
    found = False
    for i, n in enumerate(cap.nodes):
        for j in cap.inputs[i]:
            if carried[j] is not None:
                carried[i] = carried[j]
                break
        if carried[i] is None and n.op in CHECKED_OPS and not n.is_leaf:
            try:
                _execute([n], isolate=False)
            except Exception as error:  # noqa: BLE001
                if not index_out_of_range(error):
                    raise
                carried[i] = FailedValue(error)
                n.bind(carried[i])
                found = True
    if found:  # the failed op's own error: its note names the line that recorded it
        raise _bind_failures(nodes, cap, carried).error(again=False) from None


def _execute_watched(nodes: list, watcher, isolate):
    """:func:`_execute`, step for step, with each stage reported to ``watcher``
    (kept apart so the unwatched barrier stays as short as it is)."""
    name = _state.backend or _default_backend or default_backend_name()
    be = B.get(name)
    level = debug_sink.level()
    event = watcher.barrier_started(name)  # finds the user's line and the cause
    cap = capture(nodes, be.salt)
    if FailedValue.alive and _reads_failed(cap.values):
        return _execute_around_failures(nodes, cap)  # not a run: the event is dropped
    values = cap.values if be is _device_backend or _device_backend is None \
        else _host_values(cap.values)
    event.captured(cap.key, len(cap.nodes))
    program = program_cache.get(cap.key)
    compiled = program is None
    if compiled:
        metrics.cache_misses += 1
        graph = Graph.from_capture(cap)
        watcher.compiling(event, graph)  # explains the recompile; may stop the run
        program = be.compile(graph)
        program_cache.put(cap.key, program)
        event.compiled(program.record)
        debug_sink.compiled(program.record, level)
    else:
        metrics.cache_hits += 1
    event.running()
    try:
        results = watcher.run(event, program, values,
                              debug_sink.report_launch if level >= 2 else None)
    except Exception as exc:  # noqa: BLE001  only an index out of range is taken apart
        if isinstance(exc, IndexError):
            name_index_sites(exc, cap)
        if isolate and index_out_of_range(exc):
            _fail_apart(nodes, cap, exc)
        raise
    event.ran()
    metrics.graphs_executed += 1
    metrics.kernel_launches += program.kernels
    metrics.execute_time_s += event.run_s
    _bind(be, nodes, cap, program, results)
    debug_sink.ran(program)
    watcher.barrier_done(event, program)
    if level >= 1:
        debug_sink.report_graph(cap.key, len(cap.nodes), program.kernels, compiled, name,
                           event.total_s)


#: the last backend whose results stayed on its device (``device_values``), or
#: None: until one has run, no tensor holds a device array, and parameters pass
#: to every backend untouched; after, only that backend takes them as they are
_device_backend = None


def _bind(be, nodes, cap, program, results):
    global _device_backend
    if getattr(be, "device_values", False):
        _device_backend = be
        for k, device in program.take_uploads():  # host data it put on its device
            R.keep_device_copy(cap.nodes[cap.params[k]], cap.values[k], device)
        bind_results(nodes, results, True)
    else:
        bind_results(nodes, results)


def _refcounts_read_as_counted() -> bool:
    """Whether ``sys.getrefcount`` counts an object held once, plus its own
    argument, as 2 here (interpreters that borrow references may not: then
    nothing is donated)."""
    held = [object()]
    return sys.getrefcount(held[0]) == 2


_EXACT_REFCOUNTS = _refcounts_read_as_counted()


def _dead_params(cap, program, owns) -> tuple:
    """Positions of the parameters whose buffer nobody holds but this graph: no
    tensor, no other pending op, no other node (reference counts exactly as the
    program expects), and ``owns(value)``, so the run may write over them."""
    if not _EXACT_REFCOUNTS:
        return ()
    nodes, params, values = cap.nodes, cap.params, cap.values
    refs = sys.getrefcount
    # a value held only by its node and cap.values (+ the count's argument); every
    # graph node that reads it dies with the graph
    return tuple(k for k, expected, holders in program.donation_candidates
                 if refs(nodes[params[k]]) == expected and owns(values[k])
                 and refs(values[k]) == 3
                 and all(refs(nodes[j]) == held for j, held in holders))


def _host_owned(array) -> bool:
    """Whether a host parameter's memory is lazyrt's alone: a read-only (lazyrt's
    values are) C-contiguous array that owns its memory or views one of
    lazyrt's pool blocks, each link of that chain held only by the one before
    it, so no other array, memoryview or user object sees the memory."""
    if type(array) is not np.ndarray or array.flags.writeable or \
            not array.flags.c_contiguous:
        return False
    refs = sys.getrefcount
    link = array.base
    while type(link) is np.ndarray:
        if refs(link) != 3:  # the array before it, this name, the argument
            return False
        link = link.base
    if link is None:
        return True
    if type(link) is not memoryview or refs(link) != 3:
        return False
    link = link.obj
    return type(link) is _launch._Block and refs(link) == 3


def _host_values(values: list) -> list:
    """Parameters for a backend other than the device backend that ran last: a
    device array still bound to a tensor is copied to the host for it."""
    owns = _device_backend.owns
    if not any(owns(v) for v in values):
        return values  # the same list: a host backend may still donate (_dead_params)
    return [np.asarray(v) if owns(v) else v for v in values]


def watch(watcher):
    """Install ``watcher`` (an :class:`lazyrt.observe.Observer`, or None to stop);
    returns the one it replaces."""
    global _watcher
    previous, _watcher = _watcher, watcher
    return previous


def materialize(tensor):
    """Compute one tensor (the barrier behind ``numpy()``, ``item()``, ``print``...)."""
    metrics.count_materialization()
    _execute([tensor._node])
    if not R.any_live_pending():
        R.full_barrier_done()  # nothing left pending: the cut counter starts over
    return R.host_value(tensor._node)


def sync(*tensors):
    """Compute ``tensors`` — or every live pending tensor — in one graph.

    >>> import lazyrt as lr
    >>> a = lr.tensor([1.0, 2.0]); b = a * 2; c = b + 1
    >>> lr.sync(b, c); b.is_pending, c.is_pending
    (False, False)
    """
    full = not tensors
    if full:
        tensors = R.live_pending()
    seen = set()
    nodes = []
    failed = None
    for t in tensors:
        if not isinstance(t, R.TensorBase):
            raise TypeError(f"lazyrt.sync: expected tensors, got {type(t).__name__}")
        n = t._node
        if t.is_pending:
            if id(n) not in seen:
                seen.add(id(n))
                nodes.append(n)
        elif FailedValue.alive and failed is None and type(n.value) is FailedValue:
            failed = n.value  # named, so asked for: it raises (after the others run)
    _execute(nodes)
    if full or not R.any_live_pending():
        R.full_barrier_done()
    if failed is not None:
        raise failed.error()


mark_step = sync


def wait(*tensors):
    """Block until computed ``tensors`` hold finished values. A device backend
    (``jax``) dispatches asynchronously, so ``sync`` returns once the graph is
    queued; host backends finish inside ``sync``, and this returns at once.
    Timing code calls it; a host read (``numpy()``, ``item()``) waits by itself."""
    if _device_backend is None:
        return
    for t in tensors:
        value = t._node.value
        if _device_backend.owns(value):
            _device_backend.wait(value)


def _cut():
    """The recorder calls this once ``max_graph_nodes`` ops are counted since
    the count last started over. When the pending graph really is about that
    large, every live pending tensor is computed (a *cut*, counted in
    ``metrics.graph_cuts``). When most of those ops were dropped unread or
    are already computed (a loop that reads a value each step, keeping a
    small temporary pending), nothing is computed: the count starts over from
    the pending graph's size, so no graph ever outgrows the limit."""
    limit = _max_graph_nodes
    pending = R.live_pending()
    size = pending_graph_size([t._node for t in pending], min(limit, sys.maxsize))
    if 2 * size < limit:
        R.restart_cut_count(size)
        return
    metrics.graph_cuts += 1
    R.full_barrier_done()  # first: a failing cut must not fail again on the next op
    try:
        sync(*pending)
    except Exception as exc:
        if hasattr(exc, "add_note"):  # Python 3.11+
            after = "the tensors computed from the failed op hold its error, the others " \
                "are computed" if isinstance(exc, IndexError) else "the tensors stay pending"
            exc.add_note(f"lazyrt: raised by the automatic graph cut, which computes every "
                         f"pending tensor once {limit} ops are recorded without a barrier "
                         f"(lr.set_max_graph_nodes); {after}")
        raise


def set_max_graph_nodes(n: int):
    """Cut the graph (compute every live pending tensor) once ``n`` ops are
    pending without a barrier, so a loop that never syncs stays bounded
    (default 100000, or ``$LAZYRT_MAX_GRAPH_NODES``).

    >>> import lazyrt as lr
    >>> lr.set_max_graph_nodes(100_000)
    """
    global _max_graph_nodes
    n = int(n)
    if n < 1:
        raise ValueError(f"lazyrt.set_max_graph_nodes: the limit must be at least 1 op, "
                         f"got {n}")
    _max_graph_nodes = n
    R.set_cut(min(n, 2 ** 64 - 1), _cut)


_max_graph_nodes = _env_int("LAZYRT_MAX_GRAPH_NODES", 100_000)
if _max_graph_nodes < 1:
    raise ValueError(f"lazyrt: $LAZYRT_MAX_GRAPH_NODES must be at least 1, "
                     f"got {_max_graph_nodes}")
set_max_graph_nodes(_max_graph_nodes)

if os.environ.get("LAZYRT_MAX_GRAPHS"):  # CI's "no recompiles" guard, without the CLI
    from .observe import Observer, max_graphs_from_env
    watch(Observer(max_graphs=max_graphs_from_env()))
