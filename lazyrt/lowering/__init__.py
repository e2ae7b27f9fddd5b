"""The lowering vocabularies: how each op is written in each target language.

One module per code-generation target (``c``, ``triton``, ``jax``) holds the
small functions the op table (``lazyrt/ops.py``) names as an op's lowering,
with that language's type names and constant formatting. They sit on a floor
below the op table: they import only :mod:`lazyrt.dtypes`, so ``ops.py`` can
name them, while the emitters (``codegen/``) that call them sit above the
planner, which reads the op table.

This module holds what every lowering receives besides its operands.
A lowering is ``lower(code, t, *operands) -> expression``: ``code`` is the
operands' dtype and ``t`` the result's compute type in the target language,
a :class:`ComputeType` that also knows the result's lazyrt dtype (a cast to
float16 is held in float, but must round once, from the source, to float16).
Which ops compute in a wider dtype is not an emitter's choice: the kernel IR
says (``kernel_ir.COMPUTED_IN``) and the planner writes the rounding casts.
"""
from __future__ import annotations


class EmitError(Exception):
    """The spec asks for something an emitter does not generate."""


class ComputeType(str):
    """A target type name (``"float"``, ``"tl.float32"``) that remembers the
    lazyrt dtype it computes (``dtype``)."""

    dtype: int

    def __new__(cls, name: str, dtype: int):
        self = super().__new__(cls, name)
        self.dtype = dtype
        return self


def lower_statement(target: str, st, code: int, t: ComputeType, args, kernel: str) -> str:
    """The expression of op statement ``st`` from the op table's lowering for
    ``target``; an op without one, or a dtype its lowering refuses, is an
    :class:`EmitError` naming the op, the dtype and the kernel."""
    lower = st.op.lower.get(target)
    if lower is None:
        raise EmitError(f"the {target} emitter has no lowering for op {st.op.name!r} "
                        f"in kernel {kernel}")
    try:
        return lower(code, t, *args)
    except EmitError as exc:
        raise EmitError(f"the {target} emitter cannot lower {st.op.name} {exc} "
                        f"in kernel {kernel}") from None
