"""The ``c`` backend: plan -> C kernels -> shared objects -> launches.

A program is the planner's steps bound to runnable pieces: generated
kernels (compiled once per source, cached on disk by :mod:`.c_compiler`),
BLAS matmuls (NumPy's OpenBLAS on lazyrt's own OpenMP threads, see
:mod:`.c_gemm`; ``np.matmul`` for what BLAS cannot take) and the opaque
movement ops (NumPy). Scratch buffers are allocated once per program and
reused across runs; outputs come from the size-bucketed pool in
:mod:`lazyrt._launch` because they are handed to the user.

Debugging: ``LAZYRT_DEBUG=2`` prints each kernel's time and GB/s, ``=3`` the
fusion plan with the reason for every buffer, ``=4`` the generated source;
``LAZYRT_DUMP_DIR=D`` writes the graph, plan and sources of every compiled
graph into ``D/<graph key>/``.
"""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from .. import _launch
from .. import debug
from .. import dtypes as D
from ..codegen.c import emit_c
from ..planner import KernelStep, MatmulStep, OpaqueStep, plan
from .c_compiler import CCompiler
from .c_gemm import GEMM_SOURCE, gemm_args




def _strided(arr, view):
    """``view`` (a planner Strided) of the flat buffer behind ``arr``."""
    flat = arr.reshape(-1)
    item = arr.itemsize
    if not flat.size and not view.shape:
        return flat.reshape(())
    start = flat[view.offset:] if flat.size else flat
    return np.lib.stride_tricks.as_strided(
        start, view.shape, tuple(s * item for s in view.strides), writeable=False)


class _Matmul:
    name = "matmul"

    def __init__(self, step):
        self.step = step

    def run(self, bufs, scalars):
        s = self.step
        a = _strided(bufs[s.a.buffer], s.a.view)
        b = _strided(bufs[s.b.buffer], s.b.view)
        np.matmul(a, b, out=bufs[s.out])


class _Opaque:
    def __init__(self, step):
        self.step = step
        self.name = step.op.name

    def run(self, bufs, scalars):
        s = self.step
        ins = [_strided(bufs[v.buffer], v.view) for v in s.inputs]
        bufs[s.out][...] = s.op.ref(*ins, s.attrs)


class CProgram:
    """A compiled program: its plan and a :class:`lazyrt._launch.ProgramRunner`
    that does each run's work (buffers, parameters, launches) in C."""

    def __init__(self, the_plan, launches):
        self.plan = the_plan
        self.launches = launches
        self.kernels = len(launches)
        buffers = the_plan.buffers
        spec = [(b.id, b.shape, D.DTYPES[b.dtype]) for b in buffers]
        # outputs that are a whole buffer are handed out as is; others as views
        outputs = [(o.buffer, None if _is_whole(buffers[o.buffer], o.view) else o.view)
                   for o in the_plan.outputs]
        self.runner = _launch.ProgramRunner(
            list(launches), len(buffers),
            [s for s, b in zip(spec, buffers) if b.kind == "scratch"],
            [s for s, b in zip(spec, buffers) if b.kind == "output"],
            list(zip(the_plan.param_buffers, the_plan.scalar_slot)), the_plan.n_scalars,
            outputs, _strided)
        self.bytes = {id(launch): _bytes_of(s) for launch, s in zip(launches, the_plan.steps)}

    def run(self, params):
        if debug.level() >= 2:
            return self.runner.run(params, self._report)
        return self.runner.run(params)

    def _report(self, launch, seconds):
        nbytes = self.bytes.get(id(launch), 0)
        gbs = nbytes / seconds / 1e9 if seconds > 0 and nbytes else 0.0
        print(f"[lazyrt]   {launch.name:<40s} {seconds * 1e3:9.3f} ms {gbs:8.2f} GB/s",
              file=sys.stderr)


def _is_whole(buffer, view):
    from ..strided import contiguous_strides
    return view.offset == 0 and tuple(view.shape) == tuple(buffer.shape) and \
        tuple(view.strides) == contiguous_strides(buffer.shape)


def _bytes_of(step):
    if isinstance(step, KernelStep):
        return step.spec.bytes_moved()
    return 0


class CBackend:
    name = "c"
    device = "cpu"

    def __init__(self):
        self.compiler = CCompiler()
        # sqrt without errno is still IEEE sqrt; errno handling blocks vectorization.
        # GCC tunes some CPUs (AMD Zen 1: this machine) for 128-bit vectors; 256-bit
        # AVX2 loops measured 1.2x faster on the transcendental-heavy kernels here.
        extra = ("-fno-math-errno", "-mprefer-vector-width=256")
        self.compiler.flags = tuple(self.compiler.flags) + tuple(
            f for f in extra if f not in self.compiler.flags)

    def _matmul(self, step, buffers):
        """The BLAS-on-our-threads launch for ``step``, else ``np.matmul``."""
        iargs = gemm_args(step, buffers)
        if iargs is None:
            return _Matmul(step)
        return self._launch("matmul_blas", "lz_gemm", GEMM_SOURCE,
                            (step.a.buffer, step.b.buffer, step.out), iargs, ())

    def _launch(self, name, symbol, source, buffers, iargs, scalar_params):
        """A C launch of ``symbol`` from ``source`` (compiled or found on disk)."""
        lib = self.compiler.load(symbol, source)
        address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
        return _launch.KernelLaunch(name, address, buffers, iargs, scalar_params, lib)

    def compile(self, graph):
        the_plan = plan(graph)
        level = debug.level()
        dump = os.environ.get("LAZYRT_DUMP_DIR")
        sources = []
        launches = []
        for step in the_plan.steps:
            if isinstance(step, KernelStep):
                ck = emit_c(step.spec)
                sources.append(ck)
                launches.append(self._launch(ck.name, ck.symbol, ck.source, ck.buffers,
                                             ck.iargs, ck.scalar_params))
            elif isinstance(step, MatmulStep):
                launches.append(self._matmul(step, the_plan.buffers))
            elif isinstance(step, OpaqueStep):
                launches.append(_Opaque(step))
        if level >= 3:
            print(the_plan.describe(), file=sys.stderr)
        if level >= 4:
            for ck in sources:
                print(ck.source, file=sys.stderr)
        if dump:
            _dump(dump, graph, the_plan, sources)
        return CProgram(the_plan, launches)


def _dump(root, graph, the_plan, sources):
    folder = os.path.join(root, f"{graph.key:016x}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "graph.txt"), "w") as f:
        f.write(graph.describe() + "\n")
    with open(os.path.join(folder, "plan.txt"), "w") as f:
        f.write(the_plan.describe() + "\n")
    for ck in sources:
        with open(os.path.join(folder, f"{ck.name}.c"), "w") as f:
            f.write(f"/* {ck.name} */\n")
            f.write(ck.source)
