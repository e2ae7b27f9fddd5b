"""What an entry of the op table (:mod:`lazyrt.ops`) is: the kinds of op, the
cost classes, how a reduction or scan folds (:class:`Combine`, with its
identity) and the entry itself (:class:`OpDef`). The table is ``ops.py``."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import dtypes as D

LEAF, POINTWISE, REDUCTION, VIEW, MATMUL, OPAQUE, SCAN = (
    "leaf", "pointwise", "reduction", "view", "matmul", "opaque", "scan")

#: cost classes of pointwise ops: what a kernel's loop structure depends on
#: (a costly op makes a kernel compute-bound: its stores are not streamed, and
#: a row pass keeps its values in a buffer instead of recomputing them)
CHEAP, DIVIDES, COSTLY = "cheap", "divides", "costly"

#: the code-generation targets every pointwise op lowers to (or is refused by, by name)
TARGETS = ("c", "triton", "jax")


class Combine(enum.Enum):
    """How a reduction or a scan folds its elements: emitters lay a reduction out
    by it, never by the op's name, and render its identity as their own constant."""
    SUM, PROD, MAX, MIN = "sum", "prod", "max", "min"  # max, min: NaN propagates
    ANY, ALL, ARGMAX, ARGMIN = "any", "all", "argmax", "argmin"  # arg*: first index

    def identity(self, code: int):
        """The fold's start for dtype ``code`` (folding it with x gives x): 0, 1,
        False, True; max's (and argmax's best) the dtype's lowest value (-inf, the
        integer minimum, False), min's the highest."""
        if self in (Combine.SUM, Combine.PROD):
            return int(self is Combine.PROD)
        if self in (Combine.ANY, Combine.ALL):
            return self is Combine.ALL
        return _lowest(code) if self in (Combine.MAX, Combine.ARGMAX) else _highest(code)


@dataclass(frozen=True, eq=False)  # one object per op: compared and hashed by identity
class OpDef:
    name: str
    id: int
    kind: str
    arity: int                       # -1: variadic
    ref: Callable | None             # ref(*arrays, attrs) -> ndarray
    like: np.ufunc | None = None     # NumPy ufunc whose dtype rule this op follows
    unary_table: list = field(default=None, repr=False, compare=False)
    binary_table: tuple = field(default=None, repr=False, compare=False)
    doc: str = ""
    cost: str = CHEAP
    #: target -> lowering(code, compute_type, *operand_exprs) -> expression
    lower: dict = field(default_factory=dict, repr=False, compare=False)
    #: reductions and scans: how they fold (:class:`Combine`, which gives the
    #: identity), and the dtype every backend accumulates each argument dtype in
    combine: Combine | None = None
    accumulator: Callable | None = field(default=None, repr=False, compare=False)

    def identity(self, code: int):
        """The identity of this reduction or scan for argument dtype ``code``:
        its accumulator's starting value (:meth:`Combine.identity`)."""
        if self.combine is None:
            raise TypeError(f"op {self.name!r} is not a reduction or a scan: no identity")
        return self.combine.identity(code)

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"ops.{self.name.upper()}"


def _lowest(code):
    return -math.inf if code in D.FLOATING else (
        False if code == D.BOOL else int(np.iinfo(D.DTYPES[code]).min))


def _highest(code):
    return math.inf if code in D.FLOATING else (
        True if code == D.BOOL else int(np.iinfo(D.DTYPES[code]).max))
