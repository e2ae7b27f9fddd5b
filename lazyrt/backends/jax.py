"""The ``jax`` backend: a captured graph runs as one jitted JAX function.

The optional path to TPUs (and any PJRT device) without lazyrt linking XLA:
``codegen/jax.py`` lowers the whole graph to a pure, shape-static function of
``jax.numpy`` ops (XLA fuses on its own, so nothing is planned into
kernels), which is traced, lowered and compiled once per graph key; the
program cache keeps it. Runtime scalars are traced 0-d arguments, so a
changing learning rate runs the same executable; baked constants are
literals. Every compile counts in ``metrics.compiles`` (one trace each).

64-bit types: lazyrt's float64 and int64 are real 64-bit values here, without
changing JAX's process-wide ``jax_enable_x64`` for the user's own JAX code:
tracing, compiling and running happen inside ``jax.enable_x64(True)``.

Devices: JAX's default device, or ``$LAZYRT_JAX_PLATFORM`` (``cpu``, ``gpu``,
``tpu``), checked when the backend starts. Results stay on that device between
barriers (``device_values``): a computed tensor holds a ``jax.Array``, the next
graph takes it as it is, and only a host read (``numpy()``, ``item()``,
``print``, another backend's graph) copies it to the host, once. Dispatch is
asynchronous, as JAX's: a barrier returns once the computation is queued, and a
host read waits for it.

Multi-device (a plan, not built): once lazyrt records collectives, a graph's
parameters get ``jax.sharding.NamedSharding`` annotations from the user's mesh
and the jitted function runs SPMD across it; the lowering itself is unchanged.
"""
from __future__ import annotations

import importlib.util
import os
from time import perf_counter

import numpy as np

from .. import dtypes as D
from ..codegen.jax import emit_graph
from ..codegen.lowering import EmitError
from ..compile_record import COMPILED
from ..errors import BackendError, CompileError
from ..metrics import metrics
from .base import Built, compile_graph

PLATFORM_VARIABLE = "LAZYRT_JAX_PLATFORM"


def unavailable_reason() -> str:
    """Why the backend cannot run here ('' when it can)."""
    try:
        found = importlib.util.find_spec("jax") is not None
    except ImportError:
        found = False
    return "" if found else "JAX is not installed (pip install 'lazyrt[jax]')"


class JaxPlan:
    """The whole graph as one XLA computation: one step, nothing planned."""

    def __init__(self, graph):
        self.graph = graph
        self.steps = (graph,)
        self.unfused = ()

    def describe(self) -> str:
        return (f"plan: 1 step, the whole graph ({self.graph.n_ops} ops) as one jitted JAX "
                "function; XLA decides the fusion")


class JaxProgram:
    def __init__(self, executable, param_dtypes, record, device):
        self._run = executable
        self._dtypes = param_dtypes
        self.record = record
        self.kernels = 1
        self._device = device
        #: (parameter position, device array) of the host data the last run uploaded
        self.uploads = []

    def run(self, params, report=None):
        import jax
        t0 = perf_counter()
        array = jax.Array
        args, uploads = [], []
        with jax.enable_x64(True):
            for k, (v, dt) in enumerate(zip(params, self._dtypes)):
                if isinstance(v, array):
                    args.append(v)  # already on the device
                elif isinstance(v, np.ndarray) and _immutable(v):
                    # lazyrt's own immutable data: uploaded once, then kept on the device
                    v = jax.device_put(v, self._device)
                    uploads.append((k, v))
                    args.append(v)
                else:  # runtime scalars; memory shared with the user (copy=False)
                    args.append(np.asarray(v, dt))
            self.uploads = uploads
            outs = self._run(*args)
        if report is not None:
            jax.block_until_ready(outs)  # a timed run waits for the computation
            k = self.record.kernels[0]
            report(k.name, perf_counter() - t0, k.bytes_moved)
        return list(outs)


class JaxBackend:
    name = "jax"
    #: XLA flushes subnormal floats to zero on CPU and TPU (inputs and results):
    #: the one way this backend's values differ from NumPy's
    flushes_subnormals = True
    #: results stay on the device as ``jax.Array`` until read (lazyrt.backends.base)
    device_values = True

    def __init__(self):
        import jax
        platform = os.environ.get(PLATFORM_VARIABLE)
        try:
            self._device = jax.devices(platform)[0] if platform else jax.devices()[0]
        except RuntimeError as exc:
            raise BackendError(f"lazyrt: ${PLATFORM_VARIABLE}={platform!r}, but JAX has no "
                               f"such platform here: {exc}") from None
        self.device = self._device.platform

    @staticmethod
    def owns(value) -> bool:
        """Whether ``value`` is this backend's device array."""
        import jax
        return isinstance(value, jax.Array)

    @staticmethod
    def wait(value) -> None:
        """Block until ``value`` (this backend's array) is computed."""
        value.block_until_ready()

    def compile(self, graph):
        _, launches, record = compile_graph(self, graph, JaxPlan, self._build)
        dtypes = [D.DTYPES[graph.nodes[p].dtype] for p in graph.params]
        return JaxProgram(launches[0], dtypes, record, self._device)

    def _build(self, graph, the_plan) -> Built:
        import jax
        name = f"g_{graph.key:016x}"
        try:
            source, fn_name = emit_graph(graph, name)
        except EmitError as exc:
            raise CompileError(f"lazyrt: cannot lower graph {graph.key:016x} to JAX: {exc}") \
                from None
        namespace = {"__name__": f"lazyrt_jax_{name}"}
        exec(compile(source, f"<lazyrt jax {name}>", "exec"), namespace)
        fn = namespace[fn_name]
        nodes = graph.nodes
        structs = [jax.ShapeDtypeStruct(nodes[p].shape, D.DTYPES[nodes[p].dtype],
                                        sharding=jax.sharding.SingleDeviceSharding(self._device))
                   for p in graph.params]
        t0 = perf_counter()
        with jax.enable_x64(True):
            try:
                lowered = jax.jit(fn).lower(*structs)
                executable = lowered.compile()
            except Exception as exc:  # noqa: BLE001 - any trace/compile failure, by name
                raise CompileError(f"lazyrt: JAX could not compile graph {graph.key:016x} "
                                   f"({name}): {type(exc).__name__}: {exc}\n{source}") from None
        metrics.compiles += 1
        metrics.compile_time_s += perf_counter() - t0
        op_names = tuple(n.op.name for n in nodes if n.inputs)
        lines = sorted({n.source for n in nodes if n.source})
        comment = f"{len(op_names)} ops as one XLA computation" + (
            f"; from {', '.join(lines[:3])}" + (" ..." if len(lines) > 3 else "")
            if lines else "")
        nbytes = sum(_nbytes(nodes[i]) for i in (*graph.params, *graph.outputs))
        return Built(executable, name, op_names, comment, source, "jax", COMPILED, nbytes,
                     lowered.as_text())


def _immutable(a: np.ndarray) -> bool:
    """Nobody can write ``a``'s memory: read-only down to the array that owns it
    (a tensor over the user's memory, ``asarray(copy=False)``, is not)."""
    while True:
        if a.flags.writeable:
            return False
        base = a.base
        if base is None:
            return True
        if not isinstance(base, np.ndarray):
            return False  # a foreign buffer: assume it can change
        a = base


def _nbytes(node) -> int:
    n = D.DTYPES[node.dtype].itemsize
    for d in node.shape:
        n *= d
    return n
