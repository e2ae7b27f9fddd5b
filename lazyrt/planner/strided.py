"""Strided views: how the planner folds view ops into index maps.

A :class:`Strided` describes where element ``i`` of a logical shape lives in
a flat buffer: ``offset + sum(i[k] * strides[k])``. Permute, expand (stride
0), slices (offset, scaled stride; negative steps included) always fold;
reshape folds when NumPy could do it without a copy, and otherwise
:func:`apply_view` returns None so the planner knows a copy is needed.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strided:
    shape: tuple
    strides: tuple
    offset: int = 0

    @classmethod
    def contiguous(cls, shape) -> "Strided":
        return cls(tuple(shape), contiguous_strides(shape), 0)


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def permute(v: Strided, axes) -> Strided:
    return Strided(tuple(v.shape[a] for a in axes), tuple(v.strides[a] for a in axes), v.offset)


def swap_last(rank: int) -> tuple:
    """The permutation that swaps the last two of ``rank`` axes (a matrix transpose)."""
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def transposed(v: Strided) -> Strided:
    """``v`` with its last two axes swapped."""
    return permute(v, swap_last(len(v.shape)))


def expand(v: Strided, shape) -> Strided:
    """Broadcast to ``shape`` (rank may grow on the left); stride 0 where expanded."""
    lead = len(shape) - len(v.shape)
    src_shape = (1,) * lead + v.shape
    src_strides = (0,) * lead + v.strides
    strides = tuple(0 if s != t else st for s, t, st in zip(src_shape, shape, src_strides))
    return Strided(tuple(shape), strides, v.offset)


def slice_(v: Strided, spec) -> Strided:
    """Apply per-axis (start, step, length)."""
    offset = v.offset
    shape, strides = [], []
    for (start, step, length), st in zip(spec, v.strides):
        if length:
            offset += start * st
        shape.append(length)
        strides.append(st * step)
    return Strided(tuple(shape), tuple(strides), offset)


def reshape(v: Strided, shape) -> Strided | None:
    """The view of ``v`` as ``shape`` without moving data, or None if impossible."""
    shape = tuple(shape)
    if any(d == 0 for d in v.shape) or any(d == 0 for d in shape):
        return Strided(shape, contiguous_strides(shape), v.offset)
    old = [(d, s) for d, s in zip(v.shape, v.strides) if d != 1]
    new_dims = [d for d in shape]
    out_strides = [0] * len(shape)
    oi = ni = 0
    n_old, n_new = len(old), len(new_dims)
    # walk groups of old and new dims with equal element counts
    while oi < n_old or ni < n_new:
        while ni < n_new and new_dims[ni] == 1:
            ni += 1
        if oi >= n_old and ni >= n_new:
            break
        if oi >= n_old or ni >= n_new:
            return None
        o_end, n_end = oi + 1, ni + 1
        o_prod, n_prod = old[oi][0], new_dims[ni]
        while o_prod != n_prod:
            if o_prod < n_prod:
                if o_end >= n_old:
                    return None
                o_prod *= old[o_end][0]
                o_end += 1
            else:
                if n_end >= n_new:
                    return None
                n_prod *= new_dims[n_end]
                n_end += 1
        # the old group must be one contiguous run of memory
        for k in range(oi, o_end - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[o_end - 1][1]
        for k in range(n_end - 1, ni - 1, -1):
            out_strides[k] = stride
            stride *= new_dims[k]
        oi, ni = o_end, n_end
    # a size-1 dim's stride is free: give it the natural one (as if contiguous
    # with its right neighbour) so it merges with it like a batch of n would
    for k in range(len(shape) - 1, -1, -1):
        if shape[k] == 1:
            out_strides[k] = out_strides[k + 1] * shape[k + 1] if k + 1 < len(shape) else 1
    return Strided(shape, tuple(out_strides), v.offset)


def apply_view(v: Strided, opname: str, attrs) -> Strided | None:
    if opname == "reshape":
        return reshape(v, attrs[0])
    if opname == "permute":
        return permute(v, attrs[0])
    if opname == "expand":
        return expand(v, attrs[0])
    if opname == "slice":
        return slice_(v, attrs[0])
    raise ValueError(f"lazyrt: {opname} is not a view op")
