"""The spec both emitters read for a ``gather`` or ``scatter_add`` kernel.

These two ops (``lazyrt/ops.py``: ``take_along_axis``, ``scatter_add``) are
opaque steps of a plan (``OpaqueStep``) unless the backend's kernels gather
(``Capabilities.gather_in_kernels``: then a gather is a ``gather`` statement of
the kernels that use it, and only scatter_add is a step). The C and Triton
backends turn such a step into a :class:`GatherScatterSpec` and emit it as its
own kernel (``c_gather.py``, ``triton_gather.py``).

Both iterate over ``shape``, the (broadcast) indices' shape, in C order:

- gather:      ``out[p] = data[p with p[axis] = wrap(idx[p])]``; ``data`` is the
  source, strided over its own axes (equal to ``shape`` off ``axis``), ``size``
  its length along ``axis``; ``out`` is contiguous over ``shape``.
- scatter_add: ``out[p with p[axis] = wrap(idx[p])] += data[p]``; ``data`` is the
  values, strided over ``shape``; ``out`` is contiguous over ``shape`` with
  ``size`` along ``axis``, zeroed first.

``wrap`` adds ``size`` to a negative index when ``negative`` (NumPy's rule) and
then clamps into [0, size): the launcher has checked the range and raised
IndexError before the kernel runs (:func:`index_bounds`), and the clamp is the
kernel's own guarantee that it never touches memory outside its buffers.
"""
from __future__ import annotations

from dataclasses import dataclass

from lazyrt import dtypes as D
from lazyrt.ops import CHECKED_NAMES, index_error

GATHER, SCATTER_ADD = "gather", "scatter_add"


@dataclass(frozen=True)
class GatherScatterSpec:
    kind: str                 # GATHER or SCATTER_ADD
    dtype: int                # the data's (and result's) dtype
    index_dtype: int          # int32 or int64
    axis: int
    negative: bool            # an index in [-size, 0) counts from the end
    shape: tuple              # iteration domain: the indices' shape
    size: int                 # length of ``axis`` in the source (gather) / result (scatter)
    data_offset: int
    data_strides: tuple       # gather: over the source's axes; scatter: over ``shape``
    index_offset: int
    index_strides: tuple      # over ``shape`` (0 where broadcast)

    @property
    def out_shape(self) -> tuple:
        if self.kind == GATHER:
            return self.shape
        return tuple(self.size if k == self.axis else d for k, d in enumerate(self.shape))

    @property
    def name(self) -> str:
        """``gather_float32_by_int64_r2_axis0``: what the kernel does, for its symbol."""
        return (f"{self.kind}_{D.NAMES[self.dtype]}_by_{D.NAMES[self.index_dtype]}"
                f"_r{len(self.shape)}_axis{self.axis}{'' if self.negative else '_nonneg'}")

    def iargs(self) -> tuple:
        """The runtime integer arguments, in the order both emitters read them:
        shape, data offset and strides, index offset and strides, size."""
        return (tuple(self.shape) + (self.data_offset,) + tuple(self.data_strides)
                + (self.index_offset,) + tuple(self.index_strides) + (self.size,))


def spec_of(kind, attrs, data_view, index_view, index_dtype, dtype) -> GatherScatterSpec:
    """The spec of a plan's gather / scatter_add step from its operands' strided
    views (planner ``Strided``: shape, strides, offset) and its attrs."""
    if kind == GATHER:
        axis, negative = attrs
        size = data_view.shape[axis]
    elif kind == SCATTER_ADD:
        axis, size, negative = attrs
    else:
        raise ValueError(f"lazyrt internal: {kind!r} is not a gather or scatter_add step")
    if index_dtype not in (D.INT32, D.INT64):
        raise ValueError(f"lazyrt internal: {kind} indices must be int32 or int64, not "
                         f"{D.NAMES[index_dtype]}")
    return GatherScatterSpec(kind, dtype, index_dtype, axis, bool(negative),
                             tuple(index_view.shape), int(size), data_view.offset,
                             tuple(data_view.strides), index_view.offset,
                             tuple(index_view.strides))


def index_bounds(spec: GatherScatterSpec) -> tuple:
    """The [low, high) every index must lie in."""
    return (-spec.size if spec.negative else 0), spec.size


def out_of_range_message(spec: GatherScatterSpec, bad: int) -> str:
    """The IndexError a launcher raises for index ``bad``."""
    return index_error(CHECKED_NAMES[spec.kind], bad, f"axis {spec.axis} of size {spec.size} (indices of shape "
                       f"{spec.shape})", spec.size, spec.negative)
