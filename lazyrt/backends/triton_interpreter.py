"""Fixes to Triton's CPU interpreter (``TRITON_INTERPRET=1``, how CI runs the
Triton backend), so interpreted kernels compute what the GPU computes. Applied
once by the backend when it runs interpreted; compiled kernels are untouched."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D


def patch():
    """Triton 3.x's interpreter stores comparison results in the operands'
    dtype (float data typed int1), so ``(a > b) & (c > d)`` fails in NumPy.
    Give comparisons real bool data, as on the GPU. Interpreter only."""
    from triton.runtime import interpreter as I
    import triton.language as tl
    ops = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}
    for name in dir(I.InterpreterBuilder):
        if name.startswith(("create_icmp", "create_fcmp")) and name[-2:] in ops:
            setattr(I.InterpreterBuilder, name,
                    lambda self, lhs, rhs, op=ops[name[-2:]]:
                    I.TensorHandle(op(lhs.data, rhs.data), tl.int1))
    _patch_bfloat16(I, tl)


def _patch_bfloat16(I, tl):
    """The interpreter holds bfloat16 as uint16 bits, and converts to it by
    truncation (a GPU rounds to nearest even), float64 and ints by a plain
    ``astype(uint16)``, and its ``tl.dot`` multiplies the bits. Convert through
    ml_dtypes' bfloat16 instead (one rounding to nearest even, NaN kept; to ints
    through float32, as the GPU's cvt from the float32 it computes in) and
    multiply the values. Interpreter only: compiled kernels are untouched."""
    cast, fp_to_fp, dot = (I.InterpreterBuilder.cast_impl, I.InterpreterBuilder.create_fp_to_fp,
                           I.InterpreterBuilder.create_dot)

    def values(h):
        """A handle's data as NumPy values (bfloat16 as ml_dtypes')."""
        return h.data.view(D.bfloat16) if h.dtype.scalar == tl.bfloat16 else h.data

    def convert(self, src, dst_type, *rest, default):
        src_t, dst_t = src.dtype.scalar, dst_type.scalar
        if tl.bfloat16 not in (src_t, dst_t) or src_t == dst_t:
            return default(self, src, dst_type, *rest)
        data = values(src)
        if dst_t == tl.bfloat16:
            out = data.astype(D.bfloat16).view(np.uint16)
        else:
            wide = data.astype(np.float32)
            out = wide if dst_t == tl.float32 else wide.astype(I._get_np_dtype(dst_type))
        return I.TensorHandle(out, dst_t)

    def dot_values(self, a, b, d, *rest):
        if tl.bfloat16 in (a.dtype.scalar, b.dtype.scalar):
            a = I.TensorHandle(values(a).astype(np.float32), tl.float32)
            b = I.TensorHandle(values(b).astype(np.float32), tl.float32)
        return dot(self, a, b, d, *rest)

    I.InterpreterBuilder.cast_impl = lambda self, src, dst: convert(self, src, dst, default=cast)
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui",
                 "create_fp_ext", "create_fp_trunc"):
        setattr(I.InterpreterBuilder, name, I.InterpreterBuilder.cast_impl)
    I.InterpreterBuilder.create_fp_to_fp = \
        lambda self, src, dst, mode: convert(self, src, dst, mode, default=fp_to_fp)
    I.InterpreterBuilder.create_dot = dot_values
