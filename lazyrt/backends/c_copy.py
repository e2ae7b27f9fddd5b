"""``concat`` as a C launch on the kernels' OpenMP team (``kernels/lazyrt_copy.c``).

NumPy's slice assignment copies on one thread, element by element where an
operand is stored transposed: the GPT's attention gradients (three 512x128
float32 operands, each stored column-major, into 512x384) took 0.19 ms a step,
8 GB/s in L2. :func:`concat_args` merges each operand's axes with its slice
of the output; an operand left with more than three axes keeps the host step
(:class:`lazyrt.backends.c._Opaque`).
"""
from __future__ import annotations

import os

from .. import dtypes as D
from ..planner.strided import contiguous_strides
from . import host

#: axes one operand may have after merging (``lz_copy_operand`` walks three)
MAX_AXES = 3


def _source() -> str:
    from .c_compiler import kernels_dir
    with open(os.path.join(kernels_dir(), "lazyrt_copy.c")) as f:
        return f.read()


#: the C source of ``lz_concat`` (compiled once, cached like a generated kernel)
COPY_SOURCE = _source()


def merged_axes(shape, src, dst) -> list:
    """``(size, source stride, destination stride)`` per axis of a copy, size-1
    axes dropped and neighbours merged where both sides step uniformly across
    them; the destination's innermost stride comes last."""
    axes = [(n, a, d) for n, a, d in zip(shape, src, dst) if n != 1]
    out = []
    for n, a, d in axes:
        if out and out[-1][1] == a * n and out[-1][2] == d * n:
            m = out.pop()
            out.append((m[0] * n, a, d))
        else:
            out.append((n, a, d))
    return out or [(1, 1, 1)]


def concat_args(step, buffers) -> tuple | None:
    """The integer arguments of ``lz_concat`` for concat ``step``, or None when an
    operand needs more than :data:`MAX_AXES` axes (or the output is empty)."""
    out = buffers[step.out]
    shape = tuple(out.shape)
    if not shape or 0 in shape:
        return None
    axis = host.concat_axis(step) % len(shape)
    dst = contiguous_strides(shape)
    words, at = [], 0
    for v in step.inputs:
        size = v.view.shape[axis]
        if size:
            axes = merged_axes(v.view.shape, v.view.strides, dst)
            if axes[-1][2] != 1:  # rows of one element (a column operand)
                axes.append((1, 1, 1))
            if len(axes) > MAX_AXES:
                return None
            axes = [(1, 0, 0)] * (MAX_AXES - len(axes)) + axes
            (n0, a0, d0), (n1, a1, d1), (n2, a2, _) = axes
            words += [v.view.offset, at, n0, n1, n2, a0, a1, a2, d0, d1]
        else:
            words += [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        at += size * dst[axis]
    return (len(step.inputs), D.DTYPES[out.dtype].itemsize, *words)
