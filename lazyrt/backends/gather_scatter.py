"""The C and Triton backends' launches of ``scatter_add`` steps, and the range
check of a gather the C backend fuses into a kernel (:class:`FusedGatherCheck`).

A plan holds a scatter_add as an opaque step (``lazyrt/backends/host.py`` kinds);
the compiled backends run it as its own generated kernel (``codegen/c_gather.py``,
``codegen/triton_gather.py``) instead of NumPy on the host. A gather runs inside
the kernels that use it. An index out of range raises IndexError naming the op,
and the kernels clamp, so nothing is ever read or written outside a buffer. C:
before the launch, one min/max pass over the indices' distinct elements (a
broadcast index is read once, not once per use). Triton: the kernel flags a bad
index and the launch raises from the flag, at once on the CPU and, on a GPU,
after the program's last launch (:meth:`TritonGatherScatter.check`, and
``_GatherKernel`` in ``triton.py``: one read per run, and CUDA graphs capture it).
"""
from __future__ import annotations


import numpy as np

from .. import _launch
from .. import dtypes as D
from ..codegen.gather_scatter import SCATTER_ADD, index_bounds, out_of_range_message, spec_of
from .torch_dtypes import torch_dtype

#: the plan steps run as kernels of their own here (a gather is fused into kernels)
KINDS = (SCATTER_ADD,)


def spec_for(step, buffers):
    """The kernel spec of a plan's scatter_add ``step``."""
    data, index = step.inputs
    return spec_of(step.kind, step.attrs, data.view, index.view, buffers[index.buffer].dtype,
                   buffers[step.out].dtype)


def _distinct_shape(shape, strides) -> tuple:
    """``shape`` with its broadcast (stride 0) axes read once."""
    return tuple(1 if s == 0 else d for d, s in zip(shape, strides))


def _raise_if_outside(flat, offset, shape, strides, bounds, message):
    """Raise IndexError(``message(index)``) when an element of the strided view of
    the flat index buffer ``flat`` lies outside ``bounds`` = [low, high)."""
    if 0 in shape or not flat.size:
        return
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape, tuple(s * flat.itemsize for s in strides), writeable=False)
    lo, hi = int(view.min()), int(view.max())
    low, high = bounds
    if lo < low:
        raise IndexError(message(lo))
    if hi >= high:
        raise IndexError(message(hi))


def check_indices_numpy(spec, flat):
    """Raise IndexError when an index in the flat index buffer ``flat`` is out of range."""
    if spec.shape:
        shape = _distinct_shape(spec.shape, spec.index_strides)
        _raise_if_outside(flat, spec.index_offset, shape, spec.index_strides,
                          index_bounds(spec), lambda bad: out_of_range_message(spec, bad))


class FusedGatherCheck:
    """The range check of a kernel's fused gathers (``gather`` statements), run by
    its launch before each call: each index input is read over the kernel's
    domain, its broadcast axes once, and one out of range raises IndexError."""

    def __init__(self, spec, checks):
        self.views = []
        for c in checks:
            index = spec.inputs[c.index]
            shape = _distinct_shape(spec.domain, index.index.strides)
            if 0 in spec.domain:
                shape = (0,)  # an empty kernel reads no index
            self.views.append((index.buffer, index.index.offset, shape, index.index.strides, c))

    def __call__(self, bufs):
        for buffer, offset, shape, strides, check in self.views:
            _raise_if_outside(bufs[buffer].reshape(-1), offset, shape, strides, check.bounds,
                              check.message)


class CGatherScatter:
    """A compiled C scatter_add kernel with its range check."""

    def __init__(self, spec, step, kernel):
        from ..codegen.c_gather import scatter_scratch
        self.spec, self.kernel, self.name = spec, kernel, spec.kind
        self.buffers = (step.inputs[0].buffer, step.inputs[1].buffer, step.out)
        self.scratch = (np.zeros(max(1, int(np.prod(spec.out_shape))), np.float32)
                        if scatter_scratch(spec) else None)
        self.fa = np.zeros(1, np.float64)

    def run(self, bufs, scalars):
        data, index, out = (bufs[b] for b in self.buffers)
        check_indices_numpy(self.spec, index.reshape(-1))
        args = [data, index, out] if self.scratch is None else [data, index, out, self.scratch]
        self.kernel.run(args, self.fa)


def c_launch(compiler, step, buffers):
    """(launch, symbol, source, cache outcome) for a C backend's gather / scatter_add step."""
    from ..codegen.c_gather import emit_gather_c, scatter_scratch
    spec = spec_for(step, buffers)
    symbol, source = emit_gather_c(spec)
    address, lib, outcome = compiler.load_kernel(symbol, source)
    slots = (0, 1, 2, 3) if scatter_scratch(spec) else (0, 1, 2)
    kernel = _launch.KernelLaunch(spec.kind, address, slots, spec.iargs(), (), lib)
    return CGatherScatter(spec, step, kernel), symbol, source, outcome


def bytes_moved(spec) -> int:
    """Indices and data read once, the result written once (and, for a scatter,
    read back at every add: counted once)."""
    item = D.DTYPES[spec.dtype].itemsize
    n = int(np.prod(spec.shape))
    return n * (D.DTYPES[spec.index_dtype].itemsize + item) + \
        int(np.prod(spec.out_shape)) * item


class TritonGatherScatter:
    """A Triton scatter_add kernel: it zeroes its accumulator first
    and converts it into the result after. The kernel flags an index out of range
    (``codegen/triton_gather.py``); :meth:`check` raises it: at once on the CPU,
    after the program's last launch on a GPU (one read per run, no wait per kernel)."""

    def __init__(self, spec, step, fn, name, on_cpu):
        from ..codegen.triton_gather import BLOCK, scatter_accumulator
        self.spec, self.fn, self.name, self.on_cpu = spec, fn, name, on_cpu
        self.buffers = (step.inputs[0].buffer, step.inputs[1].buffer, step.out)
        self.iargs = spec.iargs()
        total = int(np.prod(spec.shape))
        self.empty = total == 0
        self.grid = (max(1, -(-total // BLOCK)),)
        self.meta = {"BLOCK": BLOCK, "num_warps": 4}
        self.out_size = int(np.prod(spec.out_shape))
        self.acc = scatter_accumulator(spec)
        self.flag = None  # two int64 on the buffers' device, made at the first run
        self.resources = ()

    def pointer_dtypes(self) -> list:
        """The kernel's pointer element types, by name (for the AOT check)."""
        codes = [self.spec.dtype, self.spec.index_dtype, self.acc, D.INT64]
        return [str(torch_dtype(c)).replace("torch.", "") for c in codes]

    def run(self, bufs, fa):
        import torch
        data, index, out = (bufs[b] for b in self.buffers)
        if self.acc == self.spec.dtype:
            target = out[:self.out_size]
            target.zero_()
        else:
            target = torch.zeros(max(1, self.out_size), dtype=torch_dtype(self.acc),
                                 device=out.device)
        if not self.empty:
            if self.flag is None:
                self.flag = torch.zeros(2, dtype=torch.int64, device=out.device)
            self.flag.zero_()
            self.fn[self.grid](data, index, target, self.flag, fa, *self.iargs, **self.meta)
            if self.on_cpu:
                self.check()
        if target is not out:
            target = target[:self.out_size]
            out[:self.out_size].copy_(target != 0 if self.spec.dtype == D.BOOL else target)

    def check(self):
        """Raise IndexError if the last run met an index out of range."""
        if self.flag is None:
            return
        bad, value = self.flag.tolist()
        if bad:
            raise IndexError(out_of_range_message(self.spec, int(value)))


def triton_launch(cache, step, buffers, on_cpu):
    """(launch, source, cache outcome) for a Triton backend's gather / scatter_add step."""
    from ..codegen.triton_gather import emit_gather_triton
    spec = spec_for(step, buffers)
    name, source = emit_gather_triton(spec)
    fn, outcome = cache.load(name, source)
    return TritonGatherScatter(spec, step, fn, name, on_cpu), source, outcome
