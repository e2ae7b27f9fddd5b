"""The ``triton`` backend: plan -> Triton kernels -> launches on torch tensors.

A program is the planner's steps (planned with a matmul epilogue)
bound to runnable pieces: generated kernels (:mod:`lazyrt.codegen.triton`),
the matmul template with its fused epilogue (:mod:`lazyrt.codegen.triton_matmul`)
and the opaque movement ops (torch; NumPy on the CPU).

Buffers are torch tensors on ``cuda``, or torch CPU tensors under
``TRITON_INTERPRET=1`` (Triton's interpreter runs the same kernels with
NumPy, so CI tests the GPU code path without a GPU). Bool buffers are uint8
tensors holding 0/1, like NumPy's bool arrays.

``Program.run(params)`` takes and returns NumPy arrays: on a GPU, parameters
are copied to the device and outputs back to the host on every run (a
device-resident API does not exist yet). On a GPU a cached program is
replayed as one CUDA graph from its third run on (``LAZYRT_CUDA_GRAPHS=0``
turns that off).

Kernels: the source is written to ``<cache dir>/triton/<name>_<sha>.py``
(through :mod:`lazyrt.cache`, with the C cache's safety) and imported from there (Triton reads a kernel's source through ``inspect``), and
the jitted function is kept in memory by source hash; Triton's own on-disk
cache holds the binaries. Compiles go through
:func:`lazyrt.backends.base.compile_graph`; ``LAZYRT_DEBUG`` and
``LAZYRT_DUMP_DIR`` show the program's record as on every backend.
``LAZYRT_TRITON_PERSISTENT_MAX`` (default 16384): longest reduction
row kept in registers; longer rows loop.

``LAZYRT_TRITON_AOT_TARGET=cuda:90[,cuda:80]``: every kernel built is also
compiled ahead of time for each target, with its launch's signature and every
autotune config (:mod:`lazyrt.backends.triton_aot`); a kernel that does not
compile fails the compile, and the record gets each kernel's registers,
shared memory and spills per target (``LAZYRT_DEBUG=2`` shows them).

FMA contraction is off (:data:`FP_FUSION`), passed with every launch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import threading
import time
import warnings

import numpy as np

from .. import cache
from .. import dtypes as D
from ..compile_record import COMPILED, DISK, MEMORY
from ..errors import BackendError, CompileError
from ..metrics import metrics
from ..planner import Capabilities, KernelStep, MatmulStep, plan
from ..planner.strided import contiguous_strides
from . import gather_scatter, host, triton_interpreter
from .base import Built, buffer_bytes, compile_graph, spec_ops, view_bytes
from .torch_dtypes import torch_dtype

# A line that holds a comment and nothing else.
_COMMENT_LINE = re.compile(r"^[ \t]*#.*\n", re.M)

#: Triton's ``enable_fp_fusion`` for every launch: ``a * b + c`` is NOT contracted
#: into one fma. NumPy (the oracle), the interpreter the tests run under and the
#: C backend (-std=c11: -ffp-contract=off) all round the product and the sum
#: apart, so with fusion off a GPU result matches them bit for bit where the
#: interpreter's does, and the interpreter tests keep testing the GPU's
#: numerics. Set here, not inherited: Triton 3.9 defaults to fusion ON and 3.10
#: to OFF (TRITON_DEFAULT_FP_FUSION). ``tl.dot`` and libdevice still use fma
#: internally, as they do in every library.
FP_FUSION = False


def source_digest(source: str) -> str:
    """A kernel source's cache key: whole-line comments (the header naming the
    user's lines) change no code."""
    return hashlib.sha256(_COMMENT_LINE.sub("", source).encode()).hexdigest()[:24]


def cuda_device_present() -> bool:
    """A real GPU that torch can use (the interpreter does not count). The
    device-node test keeps this cheap where there is none: no torch import."""
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd")):
        return False
    if any(importlib.util.find_spec(m) is None for m in ("triton", "torch")):
        return False
    import torch
    return bool(torch.cuda.is_available())


def unavailable_reason() -> str:
    """Why the backend cannot run here ('' when it can).

    Cheap on machines without a GPU: backend discovery runs on the first
    barrier of every process, and importing torch costs a second or more."""
    missing = [m for m in ("triton", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed; pip install triton torch"
    if os.environ.get("TRITON_INTERPRET") == "1" or cuda_device_present():
        return ""
    return ("no GPU and TRITON_INTERPRET is not set; set TRITON_INTERPRET=1 (before "
            "importing triton) to run the kernels on the CPU through Triton's interpreter")


# torch and NumPy exchange no bfloat16 arrays (ml_dtypes' is unknown to torch):
# they share its bits as uint16
def _host(t) -> np.ndarray:
    """A CPU torch tensor's data as a NumPy array (bfloat16 as ml_dtypes')."""
    import torch
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().view(D.bfloat16)
    return t.numpy()


def _from_host(arr: np.ndarray):
    """``torch.from_numpy(arr)``, bfloat16 too."""
    import torch
    if arr.dtype == D.bfloat16:
        return torch.from_numpy(arr.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _put_scalar(fa, slot, value):
    """Store a runtime scalar in the float64 table: ints as exact int64 bits."""
    if type(value) is int:
        fa.view(np.int64)[slot] = value
    else:
        fa[slot] = value


class KernelCache:
    """Kernel source -> jitted function, in memory; the source file on disk
    is there for Triton's ``inspect`` (and for people), not as a cache. It is
    written through :class:`lazyrt.cache.CacheFolder`: atomically, into a
    folder only we can write, or a private temporary one when the cache is
    read-only."""

    def __init__(self, folder: str, root: str | None = None):
        self.folder = cache.CacheFolder(folder, root, "Triton kernels")
        self._fns: dict[str, object] = {}
        self._lock = threading.Lock()

    def load(self, name: str, source: str):
        """The jitted function ``name`` of ``source``, and where it came from:
        ``"memory"`` (loaded before in this process), ``"disk cache"`` (the same
        source was on disk: Triton's own cache has its binaries) or
        ``"compiled"`` (new; Triton compiles it at its first launch)."""
        digest = source_digest(source)
        fn = self._fns.get(digest)
        if fn is not None:
            return fn, MEMORY
        with self._lock:
            fn = self._fns.get(digest)
            if fn is not None:
                return fn, MEMORY
            t0 = time.perf_counter()
            self.folder.ensure()
            filename = f"{name}_{digest}.py"
            path = self.folder.find(filename)
            outcome = COMPILED if path is None else DISK
            if path is None or _read(path) != source:
                path = self.folder.write(filename, source.encode())
            try:
                spec = importlib.util.spec_from_file_location(f"lazyrt_triton_{digest}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                fn = getattr(module, name)
            except Exception as exc:
                raise CompileError(f"lazyrt: Triton kernel {name} ({path}) failed to load: "
                                   f"{type(exc).__name__}: {exc}") from exc
            fn.lazyrt_source_path = path  # named by compile errors at first launch
            self._fns[digest] = fn
            metrics.compiles += 1
            metrics.compile_time_s += time.perf_counter() - t0
            return fn, outcome


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


# --- launches ----------------------------------------------------------------

class _Kernel:
    """One generated kernel with its arguments bound."""

    def __init__(self, fn, tk, name):
        self.fn, self.tk, self.name = fn, tk, name
        self.buffers = tk.buffers
        self.iargs = tk.iargs
        self.empty = tk.numel == 0
        self.grid = tk.grid()
        self.meta = {"enable_fp_fusion": FP_FUSION}
        self.resources = ()  # per AOT target, when LAZYRT_TRITON_AOT_TARGET is set
        if tk.kind == "persistent":
            block = tk.persistent_block
            self.meta.update(BLOCK=block, num_warps=4 if block <= 2048 else
                             (8 if block <= 8192 else 16))
        elif tk.kind == "scan":
            from ..codegen.triton_scan import scan_block
            self.meta.update(BLOCK=scan_block(tk.row), num_warps=4)
        elif tk.kind == "scan_lanes":
            from ..codegen.triton_scan import LANES_TILE
            self.meta.update(LANES_TILE, num_warps=4)

    def run(self, bufs, fa):
        if not self.empty:
            self._call(bufs, fa)

    def _call(self, bufs, fa, *extra):
        """Launch on ``bufs`` with ``fa`` and ``extra`` pointers after it."""
        try:
            self.fn[self.grid](*[bufs[b] for b in self.buffers], fa, *extra, *self.iargs,
                               **self.meta)
        except Exception as exc:
            from triton.compiler.errors import CompilationError
            if isinstance(exc, CompilationError):
                path = getattr(self.fn, "lazyrt_source_path", "?")
                raise CompileError(f"lazyrt: Triton failed to compile kernel {self.name} "
                                   f"({path}): {exc}") from exc
            raise


class _GatherKernel(_Kernel):
    """A kernel with fused gathers: it flags an index out of range (two int64 per
    gather, ``TritonKernel.gathers``) and :meth:`check` raises IndexError from the
    flags, at once on the CPU, after the program's last launch on a GPU (as
    :class:`~lazyrt.backends.gather_scatter.TritonGatherScatter` does)."""

    def __init__(self, fn, tk, name, on_cpu):
        super().__init__(fn, tk, name)
        self.gathers, self.on_cpu = tk.gathers, on_cpu
        self.flag = None  # on the buffers' device, made at the first run

    def run(self, bufs, fa):
        if self.empty:
            return
        if self.flag is None:
            import torch
            self.flag = torch.zeros(2 * len(self.gathers), dtype=torch.int64, device=fa.device)
        self.flag.zero_()
        self._call(bufs, fa, self.flag)
        if self.on_cpu:
            self.check()

    def check(self):
        """Raise IndexError if the last run met an index out of range."""
        if self.flag is None:
            return
        flags = self.flag.tolist()
        for g, check in enumerate(self.gathers):
            if flags[2 * g]:
                raise IndexError(check.message(int(flags[2 * g + 1])))


class _Matmul(_Kernel):
    def __init__(self, fn, mk):
        self.fn, self.tk, self.name = fn, mk, mk.name
        self.buffers = mk.buffers
        self.iargs = mk.iargs
        self.empty = mk.empty
        self.grid = mk.grid()
        self.meta = {"enable_fp_fusion": FP_FUSION}
        self.resources = ()


def _view(buf, view):
    """``view`` (a planner Strided) of a flat torch buffer; negative strides by flip."""
    import torch
    flat = buf.reshape(-1)
    offset, strides, flips = view.offset, list(view.strides), []
    for d, (n, s) in enumerate(zip(view.shape, view.strides)):
        if s < 0 and n > 0:
            offset += (n - 1) * s
            strides[d] = -s
            flips.append(d)
    if not flat.numel():
        return flat.new_empty(view.shape)
    out = torch.as_strided(flat, view.shape, strides, offset)
    return out.flip(flips) if flips else out


class _Opaque:
    """concat / setslice with torch ops (NumPy on CPU tensors: zero copies)."""

    def __init__(self, step, out_shape, on_cpu):
        self.step, self.on_cpu = step, on_cpu
        self.shape = tuple(out_shape)
        self.size = int(np.prod(self.shape))
        self.name = self.kind = step.kind

    def run(self, bufs, fa):
        s = self.step
        if not self.size:
            return
        if self.on_cpu:
            ins = [_np_view(_host(bufs[v.buffer]), v.view) for v in s.inputs]
            _host(bufs[s.out])[:self.size].reshape(self.shape)[...] = host.run(s, ins)
            return
        import torch
        ins = [_view(bufs[v.buffer], v.view) for v in s.inputs]
        out = bufs[s.out][:self.size].view(self.shape)
        if self.kind == host.CONCAT:
            torch.cat(ins, dim=host.concat_axis(s), out=out)
        else:  # setslice, through the host where a slice has a negative step
            value = host.run(s, [_host(t.cpu()) for t in ins])
            out.copy_(_from_host(np.ascontiguousarray(value)))


def _np_view(arr, view):
    flat = arr.reshape(-1)
    if not flat.size:
        return np.zeros(view.shape, arr.dtype)
    return np.lib.stride_tricks.as_strided(
        flat[view.offset:], view.shape, tuple(s * arr.itemsize for s in view.strides),
        writeable=False)


class TritonProgram:
    capture_error = ""  # why CUDA graph capture failed, when it did

    def __init__(self, the_plan, launches, device, record):
        import torch
        self.torch = torch
        self.plan = the_plan
        self.record = record
        self.launches = launches
        self.kernels = len(launches)  # as the C backend counts: every launch
        # launches whose kernels flag bad input (gather / scatter_add indices), read
        # once per run after the last launch on a GPU
        self.checks = [launch for launch in launches if hasattr(launch, "check")]
        self.device = device
        self.on_cpu = device == "cpu"
        self.scratch = None
        self.param_buffers = the_plan.param_buffers
        self.scalar_slot = the_plan.scalar_slot
        self.n_scalars = the_plan.n_scalars
        self.output_ids = [b.id for b in the_plan.buffers if b.kind == "output"]
        self.use_graphs = (not self.on_cpu and
                           os.environ.get("LAZYRT_CUDA_GRAPHS", "1") != "0")
        self.runs = 0
        self.graph = None

    # -- buffers --
    def _alloc(self, b):
        return self.torch.empty(max(1, int(np.prod(b.shape))), dtype=torch_dtype(b.dtype),
                                device=self.device)

    def _buffers(self):
        buffers = self.plan.buffers
        if self.scratch is None:
            self.scratch = {b.id: self._alloc(b) for b in buffers if b.kind == "scratch"}
        bufs = [None] * len(buffers)
        for i, t in self.scratch.items():
            bufs[i] = t
        for i in self.output_ids:
            bufs[i] = self._alloc(buffers[i])
        return bufs

    def _to_device(self, value):
        torch = self.torch
        arr = np.asarray(value)
        if arr.dtype == np.bool_:
            arr = arr.view(np.uint8)
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        flat = arr.reshape(-1) if arr.ndim else arr.reshape(1)
        if flat.flags.writeable:
            t = _from_host(flat)
        else:  # bound results are read-only; kernels never write their inputs
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                t = _from_host(flat)
        return t if self.on_cpu else t.to(self.device, non_blocking=True)

    def run(self, params, report=None):
        if self.graph is not None and report is None:
            return self._replay(params)
        bufs = self._buffers()
        fa = np.zeros(self.n_scalars + 1, np.float64)
        for value, buf, slot in zip(params, self.param_buffers, self.scalar_slot):
            if buf >= 0:
                bufs[buf] = self._to_device(value)
            else:
                _put_scalar(fa, slot, value)
        fa_t = self.torch.from_numpy(fa)
        if not self.on_cpu:
            fa_t = fa_t.to(self.device)
        # the interpreter evaluates masked-off lanes too: their 0/0 is not an error
        with np.errstate(all="ignore"):
            if report is not None:
                self._run_timed(bufs, fa_t, report)
            else:
                for launch in self.launches:
                    launch.run(bufs, fa_t)
        if not self.on_cpu:  # on the CPU each launch checked at once
            for launch in self.checks:
                launch.check()
        self.runs += 1
        if self.use_graphs and self.runs == 2:
            self._capture(bufs, fa_t)
        return self._outputs(bufs)

    def _outputs(self, bufs):
        results = []
        for o in self.plan.outputs:
            b = self.plan.buffers[o.buffer]
            t = bufs[o.buffer]
            host = _host(t if self.on_cpu else t.cpu())
            if b.dtype == D.BOOL:
                host = host.view(np.bool_)
            whole = o.view.offset == 0 and o.view.shape == tuple(b.shape) and \
                o.view.strides == contiguous_strides(b.shape)
            if whole:
                results.append(host[:int(np.prod(b.shape))].reshape(b.shape))
            else:
                results.append(_np_view(host, o.view))
        return results

    def _run_timed(self, bufs, fa, report):
        sync = (lambda: None) if self.on_cpu else self.torch.cuda.synchronize
        for launch, kernel in zip(self.launches, self.record.kernels):
            sync()
            t0 = time.perf_counter()
            launch.run(bufs, fa)
            sync()
            report(kernel.name, time.perf_counter() - t0, kernel.bytes_moved)

    # -- CUDA graphs: static buffers, parameters copied in, outputs copied out --
    def _capture(self, bufs, fa):  # pragma: no cover - needs a GPU
        torch = self.torch
        try:
            static = list(bufs)
            static_fa = fa.clone()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                for launch in self.launches:  # warm-up on the side stream
                    launch.run(static, static_fa)
                with torch.cuda.graph(graph, stream=stream):
                    for launch in self.launches:
                        launch.run(static, static_fa)
            torch.cuda.current_stream().wait_stream(stream)
            self.graph, self.static, self.static_fa = graph, static, static_fa
        except Exception as exc:  # a program that cannot be captured runs eagerly
            self.use_graphs = False
            self.capture_error = f"{type(exc).__name__}: {exc}"

    def _replay(self, params):  # pragma: no cover - needs a GPU
        torch = self.torch
        fa = np.zeros(self.n_scalars + 1, np.float64)
        for value, buf, slot in zip(params, self.param_buffers, self.scalar_slot):
            if buf >= 0:
                self.static[buf].copy_(self._to_device(value), non_blocking=True)
            else:
                _put_scalar(fa, slot, value)
        self.static_fa.copy_(torch.from_numpy(fa), non_blocking=True)
        self.graph.replay()
        for launch in self.checks:
            launch.check()
        return self._outputs(self.static)




class TritonBackend:
    name = "triton"
    device = "cuda"

    def __init__(self):
        reason = unavailable_reason()
        if reason:
            raise BackendError(f"lazyrt: backend 'triton' is not available here: {reason}")
        import torch
        self.interpreted = os.environ.get("TRITON_INTERPRET") == "1"
        if self.interpreted:
            triton_interpreter.patch()
        self.device = "cpu" if self.interpreted else "cuda"
        self.cache = KernelCache(cache.backend_folder("triton"), cache.cache_root())
        self.persistent_max = int(os.environ.get("LAZYRT_TRITON_PERSISTENT_MAX", "16384"))
        self._torch = torch
        from . import triton_aot
        targets = triton_aot.targets_from_env()
        self.aot = triton_aot.checker_for(targets, cache.cache_root()) if targets else None

    def compile(self, graph):
        the_plan, launches, record = compile_graph(
            self, graph,
            lambda g: plan(g, Capabilities(matmul_epilogue=True,
                                           matmul_engine="a Triton matmul kernel",
                                           gather_in_kernels=True)),
            self._build)
        if self.aot is not None:  # the AOT check's resources, per kernel and target
            record = dataclasses.replace(record, kernels=tuple(
                k._replace(resources=getattr(launch, "resources", ()))
                for k, launch in zip(record.kernels, launches)))
        return TritonProgram(the_plan, launches, self.device, record)

    def _check_ahead_of_time(self, launch, source, buffers):
        """Compile ``launch``'s kernel for every AOT target with the arguments
        its launch passes: buffer dtypes, ``fa`` (float64), the int arguments
        and the launch's keywords; raises CompileError when it does not compile."""
        if self.aot is None:
            return
        pointers = [str(torch_dtype(buffers[b].dtype)).replace("torch.", "")
                    for b in launch.buffers] + ["float64"] + \
            (["int64"] if getattr(launch, "gathers", ()) else [])  # fused gathers' flag
        launch.resources = self.aot.check(launch.name, source_digest(source),
                                          launch.fn.lazyrt_source_path, pointers,
                                          [int(v) for v in launch.iargs], launch.meta)

    def _build(self, step, the_plan) -> Built:
        from ..codegen.triton import emit_triton
        from ..codegen.triton_matmul import MatmulSpec, emit_matmul
        buffers = the_plan.buffers
        if isinstance(step, KernelStep):
            tk = emit_triton(step.spec, self.persistent_max)
            fn, outcome = self.cache.load(tk.name, tk.source)
            launch = _GatherKernel(fn, tk, tk.name, self.device == "cpu") if tk.gathers \
                else _Kernel(fn, tk, tk.name)
            self._check_ahead_of_time(launch, tk.source, buffers)
            return Built(launch, tk.name, spec_ops(step.spec),
                         step.spec.comment, tk.source, "triton", outcome,
                         step.spec.bytes_moved())
        if isinstance(step, MatmulStep):
            out = buffers[step.out]
            mk = emit_matmul(MatmulSpec(step.a.buffer, step.a.view, step.b.buffer, step.b.view,
                                        step.out, tuple(out.shape), out.dtype), step.epilogue)
            fn, outcome = self.cache.load(mk.name, mk.source)
            launch = _Matmul(fn, mk)
            self._check_ahead_of_time(launch, mk.source, buffers)
            ep = step.epilogue
            nbytes = sum(view_bytes(v.view, D.DTYPES[buffers[v.buffer].dtype].itemsize)
                         for v in (step.a, step.b))
            if ep is None:
                nbytes += buffer_bytes(buffers[step.out])
                ops, comment = ("matmul",), "matmul"
            else:  # the epilogue reads the product in registers: not from memory
                nbytes += ep.bytes_moved() - buffer_bytes(buffers[step.out])
                ops, comment = ("matmul",) + spec_ops(ep), ep.comment
            return Built(launch, mk.name, ops, comment, mk.source, "triton", outcome,
                         max(nbytes, 0))
        if step.kind in gather_scatter.KINDS:  # its own generated kernel
            launch, source, outcome = gather_scatter.triton_launch(
                self.cache, step, buffers, self.device == "cpu")
            if self.aot is not None:
                launch.resources = self.aot.check(
                    launch.name, source_digest(source), launch.fn.lazyrt_source_path,
                    launch.pointer_dtypes() + ["float64"], [int(v) for v in launch.iargs],
                    launch.meta)
            return Built(launch, launch.name, (step.kind,), f"{step.kind}: a Triton kernel",
                         source, "triton", outcome, gather_scatter.bytes_moved(launch.spec))
        launch = _Opaque(step, buffers[step.out].shape, self.device == "cpu")
        nbytes = sum(view_bytes(v.view, D.DTYPES[buffers[v.buffer].dtype].itemsize)
                     for v in step.inputs) + buffer_bytes(buffers[step.out])
        return Built(launch, launch.name, (launch.name,), f"{launch.name} on the host",
                     bytes_moved=nbytes)
