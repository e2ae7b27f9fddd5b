"""The ``c`` backend: plan -> C kernels -> shared objects -> launches.

A program is the planner's steps bound to runnable pieces: generated
kernels (compiled once per source, cached on disk by :mod:`.c_compiler`;
a gather runs inside the kernels that use it, its indices range-checked by
the launch first), BLAS matmuls (NumPy's OpenBLAS on lazyrt's own OpenMP threads, see
:mod:`.c_gemm`; ``np.matmul`` for what BLAS cannot take) and the opaque
movement ops (NumPy). Scratch buffers are allocated once per program and
reused across runs; outputs come from the size-bucketed pool in
:mod:`lazyrt._launch` because they are handed to the user.

Compiles through :func:`lazyrt.backends.base.compile_graph`: each program
carries its compile record (``program.record``), which ``LAZYRT_DEBUG`` and
``LAZYRT_DUMP_DIR`` show the same way on every backend.
"""
from __future__ import annotations

import os

import numpy as np

from .. import _launch
from .. import dtypes as D
from ..codegen.c import emit_c
from ..compile_record import NOT_COMPILED
from ..planner import Capabilities, KernelStep, MatmulStep, matmul_operands, plan
from ..planner.kernel_ir import IndexMap, gather_checks
from ..planner.schedule import reads, writes
from ..planner.strided import contiguous_strides
from . import gather_scatter, host
from .base import Built, buffer_bytes, compile_graph, donation_candidates, spec_ops, view_bytes
from .c_compiler import CCompiler, cpu_flags
from .c_parallel import parallel_min
from .c_copy import COPY_SOURCE, concat_args
from .c_gemm import GEMM_SOURCE, gemm_args


def _strided(arr, view):
    """``view`` (a planner Strided) of the flat buffer behind ``arr``, writable as
    ``arr`` is (an output's own buffer: the torch.compile replay hands it to torch
    as it is; the lazy front-end's binding makes every result read-only)."""
    flat = arr.reshape(-1)
    item = arr.itemsize
    if not flat.size and not view.shape:
        return flat.reshape(())
    start = flat[view.offset:] if flat.size else flat
    return np.lib.stride_tricks.as_strided(
        start, view.shape, tuple(s * item for s in view.strides),
        writeable=bool(arr.flags.writeable))


class _Matmul:
    name = "matmul"

    def __init__(self, step):
        self.step = step
        self.a, self.b = matmul_operands(step)  # b^T, a^T for a transposed product

    def run(self, bufs, scalars):
        a = _strided(bufs[self.a.buffer], self.a.view)
        b = _strided(bufs[self.b.buffer], self.b.view)
        np.matmul(a, b, out=bufs[self.step.out])


class _Opaque:
    """concat / setslice on the host (:mod:`.host`), on the buffers themselves."""

    def __init__(self, step):
        self.step = step
        self.name = step.kind

    def run(self, bufs, scalars):
        s = self.step
        ins = [_strided(bufs[v.buffer], v.view) for v in s.inputs]
        out = bufs[s.out]
        if s.kind == host.CONCAT:  # each operand copied once, into its slice
            axis, at = host.concat_axis(s) % out.ndim, 0
            for x in ins:
                where = [slice(None)] * out.ndim
                where[axis] = slice(at, at + x.shape[axis])
                out[tuple(where)] = x
                at += x.shape[axis]
            return
        out[...] = host.run(s, ins)


def in_place_pairs(the_plan, inputs: str, outputs: str):
    """``(step, input position, output position, input buffer, output buffer)``
    where a pointwise kernel may store an output over an input buffer, element
    by element: buffers of kinds ``inputs`` and ``outputs``, the input read at
    exactly the index the output is stored at (one whole contiguous buffer each,
    same dtype and shape), no later step reading the input, no earlier step
    writing the output (its store would land on the input before this step
    reads it), no output viewing it."""
    buffers, steps = the_plan.buffers, the_plan.steps
    last, first_write = {}, {}
    for s, st in enumerate(steps):
        for b in reads(st):
            last[b] = s
        for b in writes(st):
            first_write.setdefault(b, s)
    viewed = {o.buffer for o in the_plan.outputs}
    for s, st in enumerate(steps):
        spec = getattr(st, "spec", None)
        if not isinstance(st, KernelStep) or spec.reduce_axes or any(
                b.op in ("gather", "scan", "reduce") for b in spec.body):
            continue
        whole = IndexMap(0, contiguous_strides(spec.domain))  # the domain may be coalesced
        size = int(np.prod(spec.domain, dtype=np.int64))
        for oi, out in enumerate(spec.outputs):
            ob = buffers[out.buffer]
            if ob.kind != outputs or out.index != whole or first_write[out.buffer] != s \
                    or int(np.prod(ob.shape, dtype=np.int64)) != size:
                continue
            for ii, inp in enumerate(spec.inputs):
                ib = buffers[inp.buffer]
                if ib.kind != inputs or inp.buffer in viewed or last[inp.buffer] != s \
                        or ib.dtype != ob.dtype or tuple(ib.shape) != tuple(ob.shape) \
                        or any(other.buffer == inp.buffer and other.index != whole
                               for other in spec.inputs):
                    continue
                yield s, ii, oi, inp.buffer, out.buffer


def donation_pairs(the_plan) -> tuple:
    """``(parameter position, step, input position, output position)`` for each
    data parameter whose array a run may hand to an output of the last step that
    reads it (:func:`in_place_pairs`), to be written over: an optimizer's
    ``w = w - lr * g`` needs no fresh buffer and no second copy of ``w`` in the
    caches. An output may have several candidates and a parameter several
    outputs: per run, each output takes the first candidate nobody else holds
    (``runtime._dead_params``) and no other output took."""
    position = {b: k for k, b in enumerate(the_plan.param_buffers) if b >= 0}
    return tuple((position[i], s, ii, oi)
                 for s, ii, oi, i, _ in in_place_pairs(the_plan, "param", "output"))


def shared_scratch(the_plan) -> tuple:
    """``(step, input position, output position, input buffer, output buffer)``:
    the program's own scratch buffers a kernel stores its scratch output over
    (:func:`in_place_pairs`; each buffer in one pair at most): a ReLU over a
    matmul's product, or its backward over the incoming gradient, then needs no
    second buffer of that size, and writes lines it just read."""
    pairs, used = [], set()
    for s, ii, oi, i, o in in_place_pairs(the_plan, "scratch", "scratch"):
        if i not in used and o not in used:
            pairs.append((s, ii, oi, i, o))
            used.update((i, o))
    return tuple(pairs)


class CProgram:
    """A compiled program: its plan and a :class:`lazyrt._launch.ProgramRunner`
    that does each run's work (buffers, parameters, launches) in C.

    ``donation_candidates`` (see :func:`.base.donation_candidates`) are the
    parameters of :func:`donation_pairs`; a run given some of them as ``dead``
    writes their outputs over their arrays. The scratch outputs of
    :func:`shared_scratch` are always stored over their inputs."""

    def __init__(self, the_plan, launches, record, donated: tuple, shared: tuple):
        self.plan = the_plan
        self.record = record
        self.launches = launches
        self.kernels = len(launches)
        into = {o for _, _, _, _, o in shared}  # scratch stored over another scratch
        #: (parameter position, the output buffer its array may become), in order
        self.donations = tuple((k, the_plan.steps[s].spec.outputs[oi].buffer)
                               for k, s, _, oi in donated)
        self.donation_candidates = donation_candidates(
            the_plan.graph, sorted({k for k, _ in self.donations}))
        buffers = the_plan.buffers
        spec = [(b.id, b.shape, D.DTYPES[b.dtype]) for b in buffers]
        # outputs that are a whole buffer are handed out as is; others as views
        outputs = [(o.buffer, None if _is_whole(buffers[o.buffer], o.view) else o.view)
                   for o in the_plan.outputs]
        self.runner = _launch.ProgramRunner(
            list(launches), len(buffers),
            [s for s, b in zip(spec, buffers) if b.kind == "scratch" and b.id not in into],
            [s for s, b in zip(spec, buffers) if b.kind == "output"],
            list(zip(the_plan.param_buffers, the_plan.scalar_slot)), the_plan.n_scalars,
            outputs, _strided, [(o, i) for _, _, _, i, o in shared])
        self.bytes = {id(launch): k.bytes_moved for launch, k in zip(launches, record.kernels)}
        self.names = {id(launch): k.name for launch, k in zip(launches, record.kernels)}

    def run(self, params, report=None, dead=()):
        donate = None
        if dead:  # each output takes the first dead candidate no other output took
            donate, given, filled = [], set(), set()
            for k, out in self.donations:
                if k in dead and k not in given and out not in filled:
                    donate.append((out, k))
                    given.add(k)
                    filled.add(out)
        if report is None:
            return self.runner.run(params, None, donate)
        return self.runner.run(params, lambda launch, seconds: report(
            self.names.get(id(launch), launch.name), seconds, self.bytes.get(id(launch), 0)),
            donate)


def _is_whole(buffer, view):
    from ..planner.strided import contiguous_strides
    return view.offset == 0 and tuple(view.shape) == tuple(buffer.shape) and \
        tuple(view.strides) == contiguous_strides(buffer.shape)


#: Intel family 6 models whose 512-bit instructions lower the clock of the core
#: (Skylake-SP, Cascade Lake, Cooper Lake: model 85), where GCC keeps 256 bits
_AVX512_DOWNCLOCKS = {85}


def vector_width() -> int:
    """The vector width generated loops are tuned for here (``$LAZYRT_VECTOR_WIDTH``
    sets it): 512 on a CPU with AVX-512 that runs it at full clock (Ice Lake and
    later Xeons, AMD Zen 4), else 256.

    Measured: GCC tunes some CPUs for 128 bits (AMD Zen 1), where 256-bit loops
    ran the transcendental kernels 1.2x faster; on an Emerald Rapids Xeon, 512
    bits ran the GPT's exact-GELU kernels (float64 erf) 1.35-1.4x faster than
    256, the memory-bound ones the same."""
    forced = os.environ.get("LAZYRT_VECTOR_WIDTH", "").strip()
    if forced:
        if forced not in ("128", "256", "512"):
            raise ValueError(f"LAZYRT_VECTOR_WIDTH={forced!r}: expected 128, 256 or 512")
        return int(forced)
    if "avx512f" not in cpu_flags():
        return 256
    cpu = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("vendor_id", "cpu family", "model"):
                    cpu.setdefault(key.strip(), value.strip())
                if len(cpu) == 3:
                    break
    except OSError:
        return 256
    slow = cpu.get("vendor_id") == "GenuineIntel" and cpu.get("cpu family") == "6" and \
        cpu.get("model", "").isdigit() and int(cpu["model"]) in _AVX512_DOWNCLOCKS
    return 256 if slow else 512


class CBackend:
    name = "c"
    device = "cpu"

    def __init__(self):
        self.compiler = CCompiler()
        # sqrt without errno is still IEEE sqrt; errno handling blocks vectorization.
        extra = ("-fno-math-errno", f"-mprefer-vector-width={vector_width()}")
        self.compiler.flags = tuple(self.compiler.flags) + tuple(
            f for f in extra if f not in self.compiler.flags)
        # this host's break-even for an OpenMP team, measured with these flags
        self.parallel_min = parallel_min(self.compiler)
        self.compiler.flags += (f"-DLZ_PAR_MIN={self.parallel_min}",)

    def _matmul(self, step, buffers):
        """The BLAS-on-our-threads launch for ``step``, else ``np.matmul``."""
        iargs = gemm_args(step, buffers)
        if iargs is None:
            return _Matmul(step), NOT_COMPILED
        a, b = matmul_operands(step)
        return self._launch("matmul_blas", "lz_gemm", GEMM_SOURCE,
                            (a.buffer, b.buffer, step.out), iargs, ())

    def _launch(self, name, symbol, source, buffers, iargs, scalar_params):
        """A C launch of ``symbol`` from ``source`` (compiled or found on disk),
        and the cache outcome."""
        address, lib, outcome = self.compiler.load_kernel(symbol, source)
        return _launch.KernelLaunch(name, address, buffers, iargs, scalar_params, lib), outcome

    def compile(self, graph):
        found = {}

        def make_plan(g):  # and, once, the pointers an in-place store makes one array
            the_plan = plan(g, Capabilities(matmul_epilogue=False, matmul_engine="BLAS",
                                            gather_in_kernels=True, matmul_transposed_out=True))
            found["donated"], found["shared"] = donation_pairs(the_plan), shared_scratch(the_plan)
            aliased = found["aliased"] = {}
            for s, ii, oi in [p[1:] for p in found["donated"]] + [p[:3] for p in found["shared"]]:
                aliased.setdefault(id(the_plan.steps[s]), set()).update((f"in{ii}", f"out{oi}"))
            # every kernel's source now, its compile started beside the others'
            emitted = found["emitted"] = {
                id(step): emit_c(step.spec, frozenset(aliased.get(id(step), ())))
                for step in the_plan.steps if isinstance(step, KernelStep)}
            self.compiler.compile_kernels((ck.symbol, ck.source) for ck in emitted.values())
            return the_plan
        the_plan, launches, record = compile_graph(
            self, graph, make_plan, lambda step, the_plan: self._build(
                step, the_plan, frozenset(found["aliased"].get(id(step), ())),
                found["emitted"].get(id(step))))
        return CProgram(the_plan, launches, record, found["donated"], found["shared"])

    def _build(self, step, the_plan, aliased=frozenset(), emitted=None) -> Built:
        buffers = the_plan.buffers
        if isinstance(step, KernelStep):
            ck = emitted or emit_c(step.spec, aliased)
            launch, outcome = self._launch(ck.name, ck.symbol, ck.source, ck.buffers,
                                           ck.iargs, ck.scalar_params)
            checks = gather_checks(step.spec)
            if checks:
                launch.check = gather_scatter.FusedGatherCheck(step.spec, checks)
            return Built(launch, ck.name, spec_ops(step.spec), step.spec.comment, ck.source,
                         "c", outcome, step.spec.bytes_moved(),
                         log=self.compiler.kernel_build_log(ck.symbol, ck.source))
        if isinstance(step, MatmulStep):
            launch, outcome = self._matmul(step, buffers)
            blas = "BLAS" if outcome != NOT_COMPILED else "np.matmul"
            nbytes = sum(view_bytes(v.view, D.DTYPES[buffers[v.buffer].dtype].itemsize)
                         for v in (step.a, step.b)) + buffer_bytes(buffers[step.out])
            return Built(launch, launch.name, ("matmul",), f"matmul in {blas}",
                         cache=outcome, bytes_moved=nbytes)
        if step.kind in gather_scatter.KINDS:  # its own generated kernel
            launch, symbol, source, outcome = gather_scatter.c_launch(self.compiler, step,
                                                                      buffers)
            return Built(launch, symbol, (step.kind,), f"{step.kind}: a generated C kernel",
                         source, "c", outcome, gather_scatter.bytes_moved(launch.spec),
                         log=self.compiler.kernel_build_log(symbol, source))
        nbytes = sum(view_bytes(v.view, D.DTYPES[buffers[v.buffer].dtype].itemsize)
                     for v in step.inputs) + buffer_bytes(buffers[step.out])
        args = concat_args(step, buffers) if step.kind == host.CONCAT else None
        if args is not None:
            operands = tuple(v.buffer for v in step.inputs) + (step.out,)
            launch, outcome = self._launch(step.kind, "lz_concat", COPY_SOURCE, operands, args, ())
            return Built(launch, step.kind, (step.kind,), f"{step.kind} on the kernels' threads",
                         COPY_SOURCE, "c", outcome, nbytes)
        launch = _Opaque(step)
        return Built(launch, launch.name, (launch.name,), f"{launch.name} on the host (NumPy)",
                     bytes_moved=nbytes)
