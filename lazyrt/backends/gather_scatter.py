"""The C and Triton backends' launches of ``gather`` and ``scatter_add`` steps.

A plan holds these ops as opaque steps (``lazyrt/backends/host.py`` kinds); the
compiled backends run each as its own generated kernel (``codegen/c_gather.py``,
``codegen/triton_gather.py``) instead of NumPy on the host. Before a launch the
indices' range is checked with one min/max pass over their distinct elements
(a broadcast index is read once, not once per use) and an index out of range
raises IndexError naming the op; the kernels clamp as well, so nothing is ever
read or written outside a buffer. On a GPU that check is one fused min/max and
a device-to-host read per launch (a known cost: an error flag the program reads
once at its end would avoid the wait).
"""
from __future__ import annotations

import ctypes

import numpy as np

from .. import _launch
from .. import dtypes as D
from ..codegen.gather_scatter import (GATHER, SCATTER_ADD, index_bounds, out_of_range_message,
                                      spec_of)

KINDS = (GATHER, SCATTER_ADD)


def spec_for(step, buffers):
    """The kernel spec of a plan's gather / scatter_add ``step``."""
    data, index = step.inputs
    return spec_of(step.kind, step.attrs, data.view, index.view, buffers[index.buffer].dtype,
                   buffers[step.out].dtype)


def _distinct_shape(spec) -> tuple:
    """The indices' shape with broadcast (stride 0) axes read once."""
    return tuple(1 if s == 0 else d for d, s in zip(spec.shape, spec.index_strides))


def check_indices_numpy(spec, flat):
    """Raise IndexError when an index in the flat index buffer ``flat`` is out of range."""
    shape = _distinct_shape(spec)
    if 0 in spec.shape or not shape:
        return
    view = np.lib.stride_tricks.as_strided(
        flat[spec.index_offset:], shape, tuple(s * flat.itemsize for s in spec.index_strides),
        writeable=False)
    _raise_if_outside(spec, int(view.min()), int(view.max()))


def check_indices_torch(spec, flat):
    """As :func:`check_indices_numpy`, for a flat torch buffer (one min/max, one read)."""
    import torch
    shape = _distinct_shape(spec)
    if 0 in spec.shape or not shape:
        return
    strides = list(spec.index_strides)
    view = torch.as_strided(flat, shape, [abs(s) for s in strides],
                            spec.index_offset + sum((d - 1) * s for d, s in zip(shape, strides)
                                                    if s < 0))
    lo, hi = torch.aminmax(view)
    _raise_if_outside(spec, *(int(v) for v in torch.stack([lo, hi]).tolist()))


def _raise_if_outside(spec, lo, hi):
    low, high = index_bounds(spec)
    if lo < low:
        raise IndexError(out_of_range_message(spec, lo))
    if hi >= high:
        raise IndexError(out_of_range_message(spec, hi))


class CGatherScatter:
    """A compiled C gather / scatter_add kernel with its range check."""

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
    lib, outcome = compiler.load_with_outcome(symbol, source)
    address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
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
    """A Triton gather / scatter_add kernel with its range check; a scatter
    zeroes its accumulator first and converts it into the result after."""

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
        self.acc = None if spec.kind == GATHER else scatter_accumulator(spec)
        self.resources = ()

    def pointer_dtypes(self) -> list:
        """The kernel's pointer element types, by name (for the AOT check)."""
        from .triton import _torch_dtype
        codes = [self.spec.dtype, self.spec.index_dtype, self.acc or self.spec.dtype]
        return [str(_torch_dtype(c)).replace("torch.", "") for c in codes]

    def run(self, bufs, fa):
        import torch
        from .triton import _torch_dtype
        data, index, out = (bufs[b] for b in self.buffers)
        target = out
        if self.acc is not None:
            if self.acc == self.spec.dtype:
                target = out[:self.out_size]
                target.zero_()
            else:
                target = torch.zeros(max(1, self.out_size), dtype=_torch_dtype(self.acc),
                                     device=out.device)
        if not self.empty:
            if self.on_cpu:
                check_indices_numpy(self.spec, index.numpy().reshape(-1))
            else:
                check_indices_torch(self.spec, index.reshape(-1))
            self.fn[self.grid](data, index, target, fa, *self.iargs, **self.meta)
        if target is not out:
            target = target[:self.out_size]
            out[:self.out_size].copy_(target != 0 if self.spec.dtype == D.BOOL else target)


def triton_launch(cache, step, buffers, on_cpu):
    """(launch, source, cache outcome) for a Triton backend's gather / scatter_add step."""
    from ..codegen.triton_gather import emit_gather_triton
    spec = spec_for(step, buffers)
    name, source = emit_gather_triton(spec)
    fn, outcome = cache.load(name, source)
    return TritonGatherScatter(spec, step, fn, name, on_cpu), source, outcome
