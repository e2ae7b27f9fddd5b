"""What every lowering function receives besides its operands.

A lowering is ``lower(code, t, *operands) -> expression``: ``code`` is the
operands' dtype and ``t`` the result's compute type in the target language,
a :class:`ComputeType` that also knows the result's lazyrt dtype (a cast to
float16 computes in float, but must round once, from the source, to float16).
"""
from __future__ import annotations


class ComputeType(str):
    """A target type name (``"float"``, ``"tl.float32"``) that remembers the
    lazyrt dtype it computes (``dtype``)."""

    dtype: int

    def __new__(cls, name: str, dtype: int):
        self = super().__new__(cls, name)
        self.dtype = dtype
        return self
