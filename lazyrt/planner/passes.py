"""Rewrites of a KernelSpec that every code-generation target needs.

A pass is a function from KernelSpec to KernelSpec; the planner runs
:func:`run` on every kernel it builds, so an emitter only lowers what is
left. Keeping these here, once, is what stops the C and Triton emitters
from drifting apart (they each used to carry their own copy).

* :func:`specialize_pow` — ``x ** 2`` is ``x * x``, ``x ** 3`` is
  ``x * x * x``, ``x ** 0.5`` is ``sqrt(x)``, ``x ** -1`` is ``1 / x`` and
  ``x ** 1`` is ``x`` (for a baked exponent, on floats).
* :func:`round_float16` — an op on float16 computes in float32 and a cast
  rounds its result to float16, after every op, as NumPy does.
"""
from __future__ import annotations

from dataclasses import replace

from .. import dtypes as D
from .. import ops
from .kernel_ir import COMPUTED_IN, KernelSpec, Stmt


class _Body:
    """A new statement list built while walking an old one (ids are positions)."""

    def __init__(self):
        self.stmts: list[Stmt] = []

    def add(self, op, dtype, args=(), attr=None, acc=None) -> int:
        self.stmts.append(Stmt(len(self.stmts), op, dtype, tuple(args), attr, acc))
        return len(self.stmts) - 1


def _rebuild(spec: KernelSpec, rewrite) -> KernelSpec:
    """Walk ``spec.body``; ``rewrite(st, args, body)`` returns the new id of ``st``
    (its arguments already renumbered), or None to copy it unchanged."""
    body, new_id = _Body(), {}
    for st in spec.body:
        args = tuple(new_id[a] for a in st.args)
        got = rewrite(st, args, body)
        if got is None:
            got = body.add(st.op, st.dtype, args, st.attr, st.acc)
        new_id[st.id] = got
    if len(body.stmts) == len(spec.body) and all(
            a == b for a, b in zip(body.stmts, spec.body)):
        return spec
    outputs = tuple(replace(o, value=new_id[o.value]) for o in spec.outputs)
    return replace(spec, body=tuple(body.stmts), outputs=outputs)


def specialize_pow(spec: KernelSpec) -> KernelSpec:
    """Float powers with a baked exponent of 2, 3, 0.5, 1 or -1 become multiplies,
    a square root, the base itself or a reciprocal (as NumPy's own fast paths).
    A float16 cube is multiplied in float32 and rounded once, as a power is."""
    if not any(st.op is ops.POW for st in spec.body):
        return spec  # a scan, not a rebuild: most kernels have no power
    consts = {st.id: st.attr for st in spec.body if st.op == "const"}

    def rewrite(st, args, body):
        if st.op is not ops.POW or st.dtype not in D.FLOATING or st.args[1] not in consts:
            return None
        base, e = args[0], consts[st.args[1]]
        if e == 2:
            return body.add(ops.MUL, st.dtype, (base, base))
        if e == 3:
            wide = COMPUTED_IN.get(st.dtype, st.dtype)
            cube = body.add(ops.MUL, wide, (body.add(ops.MUL, wide, (base, base)), base))
            return cube if wide == st.dtype else body.add(ops.CAST, st.dtype, (cube,), st.dtype)
        if e == 0.5:
            return body.add(ops.SQRT, st.dtype, (base,))
        if e == -1:
            return body.add(ops.RECIPROCAL, st.dtype, (base,))
        if e == 1:
            return base
        return None

    return _rebuild(spec, rewrite)


def computes_wider(st: Stmt) -> bool:
    """Whether statement ``st`` computes in a wider dtype than its own
    (:data:`~lazyrt.planner.kernel_ir.COMPUTED_IN`) and must be rounded after:
    every op (reductions too) with a float16 result, but a cast, which is
    itself the rounding, and the leaves (load, gather, scalar, const), which
    hold float16 values already."""
    return st.dtype in COMPUTED_IN and st.op not in ("load", "gather", "scalar", "const") \
        and st.op is not ops.CAST


def round_float16(spec: KernelSpec) -> KernelSpec:
    """Every op that :func:`computes_wider` computes in float32, then a cast to
    float16 rounds it: one rounding per op, where NumPy's float16 loops round.

    ``v2: float16 = mul(v0, v1)`` becomes ``v2: float32 = mul(v0, v1)`` and
    ``v3: float16 = cast(v2, 5)``; uses of ``v2`` read ``v3``.
    """
    if not any(st.dtype in COMPUTED_IN and computes_wider(st) for st in spec.body):
        return spec  # a scan, not a rebuild: most kernels have no float16 op

    def rewrite(st, args, body):
        if not computes_wider(st):
            return None
        value = body.add(st.op, COMPUTED_IN[st.dtype], args, st.attr, st.acc)
        return body.add(ops.CAST, st.dtype, (value,), st.dtype)

    return _rebuild(spec, rewrite)


#: every pass, in order (rounding last: the rewrites before it may add float16 ops)
PASSES = (specialize_pow, round_float16)


def run(spec: KernelSpec) -> KernelSpec:
    """``spec`` after every pass in :data:`PASSES`."""
    for p in PASSES:
        spec = p(spec)
    return spec
