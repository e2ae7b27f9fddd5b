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

Rounding: XLA:CPU always lets LLVM fuse ``a * b + c`` into one FMA (one
rounding, where NumPy and the other backends round the product and the sum
each). For the FMA, no XLA flag turns contraction off by itself, but capping XLA:CPU's
ISA at AVX, which has no FMA instructions, does (:data:`EXACT_CPU_FLAG`; the cost
measured within noise on an AVX-512 host). The backend adds that flag to
``$XLA_FLAGS`` before JAX's CPU client starts, unless the user's flags name
``xla_cpu_max_isa`` already, and it is process-wide, so the user's own JAX code
on the CPU rounds that way too. Whether it took (JAX's CPU client may have
started earlier) is measured when the backend starts: ``fuses_multiply_add``,
with a warning on the CPU. GPUs and TPUs contract as their compilers do.

Devices: JAX's default device, or ``$LAZYRT_JAX_PLATFORM`` (``cpu``, ``gpu``,
``tpu``), checked when the backend starts. Results stay on that device between
barriers (``device_values``): a computed tensor holds a ``jax.Array``, the next
graph takes it as it is, and only a host read (``numpy()``, ``item()``,
``print``, another backend's graph) copies it to the host, once. Dispatch is
asynchronous, as JAX's: a barrier returns once the computation is queued, and a
host read waits for it.

Donation: a parameter whose device buffer nobody holds but the graph (no
tensor, no other pending op: the runtime checks reference counts, see
``runtime._dead_params``) and that has an output's shape and dtype is donated
(``donate_argnums``), so ``w = w - lr * g`` in a loop writes the new ``w`` over
the old one. The donating executable is a second compile of the graph, once.

Multi-device (a plan, not built): once lazyrt records collectives, a graph's
parameters get ``jax.sharding.NamedSharding`` annotations from the user's mesh
and the jitted function runs SPMD across it; the lowering itself is unchanged.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from time import perf_counter

import numpy as np

from .. import dtypes as D
from .. import ops
from ..codegen.jax import emit_graph
from ..lowering import EmitError
from ..compile_record import COMPILED
from ..errors import BackendError, CompileError
from ..metrics import metrics
from .base import Built, compile_graph, donation_candidates, frozen

PLATFORM_VARIABLE = "LAZYRT_JAX_PLATFORM"
#: caps XLA:CPU at an ISA without FMA instructions, so ``a * b + c`` rounds twice
EXACT_CPU_FLAG = "--xla_cpu_max_isa=AVX"


def request_exact_cpu_math() -> None:
    """Add :data:`EXACT_CPU_FLAG` to ``$XLA_FLAGS`` unless it names an ISA already.

    Only edits the environment (JAX is not imported): XLA reads the flags when
    JAX's CPU client starts, so this must run before that to take effect."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_max_isa" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {EXACT_CPU_FLAG}".strip()


def _fuses_multiply_add(device) -> bool:
    """Whether XLA contracts ``a * b - c`` on ``device``, measured.

    In float32, 3 * fl(1/3) rounds to exactly 1, so twice-rounded ``a * b - 1`` is
    0, while one fused rounding keeps the product's 2**-25 error."""
    import jax
    a, b, c = (jax.device_put(np.float32(v), device) for v in (3.0, 1.0 / 3.0, 1.0))
    return float(jax.jit(lambda a, b, c: a * b - c)(a, b, c)) != 0.0


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
    """One graph's executables (one per set of donated parameters) and how to
    call them.

    ``donation_candidates`` lists ``(parameter position, expected references,
    holders)`` for the data parameters whose buffer an output could reuse (same
    shape and dtype). ``holders`` are the graph's non-output nodes that read the
    parameter, directly or through each other, each with its expected
    references: such a node outlives the barrier when someone outside the graph
    holds it (a pending tensor), and then so must the parameter. The runtime
    passes back, as ``dead``, the candidates that nobody outside holds, and the
    run donates them (``donate_argnums``): XLA writes the result into the old
    buffer instead of a new one.
    """

    def __init__(self, function, graph, record, device):
        self._function = function
        nodes = graph.nodes
        self._dtypes = [D.DTYPES[nodes[p].dtype] for p in graph.params]
        self.record = record
        self.kernels = 1
        self._device = device
        self._uploads = []
        self.donation_candidates = _donation_candidates(graph)

    def take_uploads(self) -> list:
        """(parameter position, device array) of the host data the last run put
        on the device; the runtime makes their data leaves hold them."""
        uploads, self._uploads = self._uploads, []
        return uploads

    def run(self, params, report=None, dead=()):
        import jax
        t0 = perf_counter()
        array = jax.Array
        args, uploads = [], []
        with jax.enable_x64(True):
            for k, (v, dt) in enumerate(zip(params, self._dtypes)):
                if isinstance(v, array):
                    args.append(v)  # already on the device
                elif isinstance(v, np.ndarray) and frozen(v):
                    # lazyrt's own immutable data: uploaded once, then kept on the device
                    v = jax.device_put(v, self._device)
                    uploads.append((k, v))
                    args.append(v)
                else:  # runtime scalars; memory shared with the user (copy=False)
                    args.append(np.asarray(v, dt))
            self._uploads = uploads
            outs = self._function.executable(dead)(*args)
        if report is not None:
            jax.block_until_ready(outs)  # a timed run waits for the computation
            k = self.record.kernels[0]
            report(k.name, perf_counter() - t0, k.bytes_moved)
        return list(outs)


class _Function:
    """A graph's lowered JAX function, compiled once per set of donated
    parameters (the set is the same every step of a loop: one extra compile)."""

    def __init__(self, fn, structs, label, source):
        self._fn, self._structs, self._label, self._source = fn, structs, label, source
        self._executables = {}

    def executable(self, donate: tuple):
        exe = self._executables.get(donate)
        return exe if exe is not None else self.compile(donate)[1]

    def compile(self, donate: tuple = ()):
        import jax
        t0 = perf_counter()
        with jax.enable_x64(True), warnings.catch_warnings():
            # XLA may reuse fewer donated buffers than offered; that is not the user's concern
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            try:
                lowered = jax.jit(self._fn, donate_argnums=donate).lower(*self._structs)
                executable = lowered.compile()
            except Exception as exc:  # noqa: BLE001 - any trace/compile failure, by name
                raise CompileError(f"lazyrt: JAX could not compile graph {self._label}: "
                                   f"{type(exc).__name__}: {exc}\n{self._source}") from None
        metrics.compiles += 1
        metrics.compile_time_s += perf_counter() - t0
        self._executables[donate] = executable
        return lowered, executable


class JaxBackend:
    name = "jax"
    #: XLA flushes subnormal floats to zero on CPU and TPU (inputs and results)
    flushes_subnormals = True
    #: XLA's algebraic simplifier reassociates divisions (``(a / b) / c`` as
    #: ``a / (b * c)``, ``x / 0.1`` as ``x * 10``): an ulp off NumPy there. Compiling
    #: without it (``xla_disable_hlo_passes=algsimp``) crashed XLA on a gelu graph,
    #: so it stays. And the StableHLO canonicalizer
    #: that runs before any XLA pass (no flag turns it off) takes +0.0 as the
    #: additive identity where it proves an operand zero (``(x ^ x) + y`` is ``y``,
    #: so -0.0 where NumPy gives 0.0); zeros compare by value here
    exact_zero_signs = False
    #: the division deviation above, for tests that compare bits: a quotient of a
    #: float quotient (or of a float tensor by one) may be an ulp off NumPy's
    exact_division = False
    #: results stay on the device as ``jax.Array`` until read (lazyrt.backends.base)
    device_values = True

    def __init__(self):
        request_exact_cpu_math()
        import jax
        platform = os.environ.get(PLATFORM_VARIABLE)
        try:
            self._device = jax.devices(platform)[0] if platform else jax.devices()[0]
        except RuntimeError as exc:
            raise BackendError(f"lazyrt: ${PLATFORM_VARIABLE}={platform!r}, but JAX has no "
                               f"such platform here: {exc}") from None
        self.device = self._device.platform
        #: whether XLA fuses ``a * b + c`` into one rounding here (see the module doc)
        self.fuses_multiply_add = _fuses_multiply_add(self._device)
        if self.fuses_multiply_add and self.device == "cpu":
            warnings.warn(
                "lazyrt: the jax backend's XLA:CPU fuses a*b+c into one rounding, so its "
                "results can differ from NumPy's in the last bits: JAX's CPU client started "
                "before lazyrt's jax backend, or $XLA_FLAGS sets an xla_cpu_max_isa with FMA. "
                f"Start the backend first or set XLA_FLAGS={EXACT_CPU_FLAG}", stacklevel=2)

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
        return JaxProgram(launches[0], graph, record, self._device)

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
        function = _Function(fn, structs, f"{graph.key:016x} ({name})", source)
        lowered, _ = function.compile()
        op_names = tuple(n.op.name for n in nodes if n.inputs)
        lines = sorted({n.source for n in nodes if n.source})
        comment = f"{len(op_names)} ops as one XLA computation" + (
            f"; from {', '.join(lines[:3])}" + (" ..." if len(lines) > 3 else "")
            if lines else "")
        nbytes = sum(_nbytes(nodes[i]) for i in (*graph.params, *graph.outputs))
        return Built(function, name, op_names, comment, source, "jax", COMPILED, nbytes,
                     lowered.as_text())


def _donation_candidates(graph) -> tuple:
    """:func:`.base.donation_candidates` for the data parameters with an output's
    shape and dtype (XLA picks which output reuses which donated buffer)."""
    nodes = graph.nodes
    shapes = {(nodes[o].shape, nodes[o].dtype) for o in graph.outputs}
    return donation_candidates(graph, [
        k for k, p in enumerate(graph.params)
        if nodes[p].op is not ops.SCALAR and (nodes[p].shape, nodes[p].dtype) in shapes])


def _nbytes(node) -> int:
    n = D.DTYPES[node.dtype].itemsize
    for d in node.shape:
        n *= d
    return n
