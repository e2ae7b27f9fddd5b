"""What a backend is, and the one compile path every backend goes through.

A backend turns a captured :class:`lazyrt.graph.Graph` into a
:class:`Program`; the runtime caches programs by graph key and runs them on
each barrier's parameters. The contract, written down as protocols:

>>> import lazyrt as lr
>>> from lazyrt.backends import base
>>> isinstance(lr.backends.get("numpy"), base.Backend)
True

Every backend compiles through :func:`compile_graph`: plan the graph, build
each step (emit its source, compile or load it, bind its launch), and return
the launches with a :class:`~lazyrt.compile_record.CompileRecord` that the
program keeps as ``program.record``. Backends never print: ``LAZYRT_DEBUG``
and ``LAZYRT_DUMP_DIR`` show that record (:mod:`lazyrt.debug`), and per-launch
timings go to the ``report`` callback that ``Program.run`` is given.
"""
from __future__ import annotations

from time import perf_counter
from typing import Callable, NamedTuple, Optional, Protocol, runtime_checkable

from .. import plan_cache
from ..compile_record import NOT_COMPILED, CompileRecord, KernelRecord
from ..planner import plan_store

#: ``report(launch name, seconds, bytes moved)``: called after each launch of a
#: timed run (``LAZYRT_DEBUG>=2``)
LaunchReport = Callable[[str, float, int], None]


@runtime_checkable
class Program(Protocol):
    """A compiled graph: a list of launches over numbered buffers."""

    #: launches one run makes (counted in ``metrics.kernel_launches``)
    kernels: int
    #: how it was compiled: graph, plan, kernels (see :mod:`lazyrt.compile_record`)
    record: CompileRecord

    def run(self, params: list, report: Optional[LaunchReport] = None) -> list:
        """Run once. ``params`` are the graph's parameters in capture order
        (NumPy arrays for data, Python scalars for runtime scalars; a backend
        whose ``device_values`` is true also gets its own device arrays back);
        returns one NumPy array per graph output, in order, or one device array
        each for such a backend. With ``report``, each launch is timed on its
        own (synchronized) and reported."""


@runtime_checkable
class Backend(Protocol):
    """A way to run graphs, registered by name in :mod:`lazyrt.backends`."""

    #: the registry name: ``numpy``, ``c``, ``triton``
    name: str
    #: where its buffers live: ``cpu`` or ``cuda``
    device: str
    #: mixed into every graph key (set by the registry), so two backends never
    #: share a cached program
    salt: int
    #: optional, default False: results stay on the backend's device as its
    #: own arrays (bound to tensors as they are) until a host read
    #: (:func:`lazyrt._recorder.host_value`) copies them; such a backend takes
    #: its arrays back as parameters, other backends get host copies, and it
    #: says which values are its arrays with ``owns(value) -> bool`` (and
    #: ``wait(value)`` blocks until one is computed); its
    #: program's ``take_uploads()`` gives the (parameter position, device
    #: array) of the read-only host data a run put on the device, which the
    #: data leaf then holds instead; its ``donation_candidates`` are
    #: (parameter position, expected reference count, holders) triples, and its
    #: ``run(params, report, dead)`` may write over the buffers of the ``dead``
    #: ones (the runtime found nobody else holding them)

    def compile(self, graph) -> Program:
        """A program for ``graph`` (a :class:`lazyrt.graph.Graph`), built through
        :func:`compile_graph`. Raises :class:`lazyrt.errors.CompileError` naming
        the kernel and its source when a kernel does not compile."""


def frozen(array) -> bool:
    """Whether no one can write ``array``'s memory: it and every array it views
    are read-only, down to memory NumPy owns (lazyrt's own values are) or bytes.
    A tensor over the user's memory (``asarray(copy=False)``) is not."""
    import numpy as np
    while True:
        if array.flags.writeable:
            return False
        base = array.base
        if base is None:
            return True
        if not isinstance(base, np.ndarray):
            return isinstance(base, bytes)
        array = base


class Built(NamedTuple):
    """What a backend's step builder returns for one step: the runnable launch
    and what the compile record says about it."""
    launch: object
    name: str
    ops: tuple
    comment: str = ""
    source: str = ""
    language: str = ""
    cache: str = NOT_COMPILED
    bytes_moved: int = 0
    ir: str = ""
    log: str = ""


def donation_candidates(graph, positions) -> tuple:
    """``(parameter position, expected references, holders)`` for the parameters
    at ``positions`` whose buffer a run may write over when nobody outside the
    graph holds them (the runtime checks, per run: ``runtime._dead_params``).

    A node nobody outside the graph holds is referenced by the capture's node
    list, once per use in the graph, and by the reference count's own argument.
    ``holders`` are the graph's non-output nodes that read the parameter,
    directly or through each other, each with its expected references: such a
    node outlives the barrier when someone outside holds it (a pending tensor),
    and then so must the parameter. Outputs let go of their inputs when bound."""
    nodes = graph.nodes
    uses = [0] * len(nodes)
    readers = [[] for _ in nodes]
    for j, n in enumerate(nodes):
        for i in n.inputs:
            uses[i] += 1
            readers[i].append(j)
    outputs = set(graph.outputs)
    out = []
    for k in positions:
        p = graph.params[k]
        holders, stack = set(), [j for j in readers[p] if j not in outputs]
        while stack:
            j = stack.pop()
            if j not in holders:
                holders.add(j)
                stack.extend(r for r in readers[j] if r not in outputs)
        out.append((k, uses[p] + 2, tuple((j, uses[j] + 2) for j in sorted(holders))))
    return tuple(out)


def compile_graph(backend, graph, make_plan: Callable, build_step: Callable):
    """The one compile path: ``make_plan(graph)``, then ``build_step(step, plan)
    -> Built`` for each of the plan's steps, timed. Returns ``(plan, launches,
    record)``. The planner's plans are kept on disk (:mod:`lazyrt.plan_cache`):
    a graph this lazyrt planned before, in any process, is not planned again."""
    t0 = perf_counter()
    with plan_store(plan_cache.store(backend.name)):  # a plan made before is loaded
        the_plan = make_plan(graph)
    launches, kernels = [], []
    for step in the_plan.steps:
        t = perf_counter()
        built = build_step(step, the_plan)
        launches.append(built.launch)
        kernels.append(KernelRecord(built.name, tuple(built.ops), built.comment, built.source,
                                    built.language, perf_counter() - t, built.cache,
                                    built.bytes_moved, ir=built.ir, log=built.log))
    record = CompileRecord(backend.name, backend.device, graph, the_plan, tuple(kernels),
                           perf_counter() - t0)
    return the_plan, launches, record


def spec_ops(spec) -> tuple:
    """The op names a KernelSpec runs, in body order (a reduction by its name)."""
    out = []
    for st in spec.body:
        if st.op == "reduce":
            out.append(str(st.attr))
        elif st.op == "scan":  # attr = (the op table's scan, include_initial)
            out.append(str(st.attr[0]))
        elif st.op == "gather":  # a fused gather: its source read at loaded indices
            out.append("gather")
        elif not isinstance(st.op, str):
            out.append(st.op.name)
    return tuple(out)


def view_bytes(view, itemsize: int) -> int:
    """Bytes of the distinct elements a strided view reads."""
    n = 1
    for size, stride in zip(view.shape, view.strides):
        if stride != 0:
            n *= size
    return n * itemsize


def buffer_bytes(buffer) -> int:
    from .. import dtypes as D
    n = 1
    for size in buffer.shape:
        n *= size
    return n * D.DTYPES[buffer.dtype].itemsize
