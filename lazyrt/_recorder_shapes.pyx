# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The recorder's ops whose shape rule is more than broadcasting: reductions,
reshape, basic indexing, matmul and ``where``.

They are as hot as ``a + b`` in real code (``x.sum(-1)``, ``x[:, 1:]``,
``x @ w``), so the whole call is here in Cython: argument parsing, checks
with the user-facing errors, dtype lookup, the result shape, the node. The
Python modules (:mod:`lazyrt.api.reductions`, :mod:`lazyrt.api.views`,
:mod:`lazyrt.api.linalg`, :mod:`lazyrt.api.pointwise`) re-export these and add the
composites built from them.
"""
from cpython.slice cimport PySlice_GetIndicesEx
cimport cython

import operator

import numpy as np

from lazyrt._recorder cimport (Node, TensorBase, _shape_hash, _new_node, _scalar_node,
                               _cast, _broadcast, _wrap, _scalar_kind, _check_int_range,
                               _as_tensor)
from lazyrt._recorder_pointwise cimport binary_comp, scalar_comp
from lazyrt import ops as _ops
from lazyrt import dtypes as _D
from lazyrt.errors import AxisError, DTypeError, ShapeError

DEF MAXOPS = 128
DEF ND = 9  # lazyrt.dtypes.NDTYPES (checked at import)

cdef int SUM = _ops.SUM.id, PROD = _ops.PROD.id, MAX = _ops.MAX.id, MIN = _ops.MIN.id
cdef int ARGMAX = _ops.ARGMAX.id, ARGMIN = _ops.ARGMIN.id, ANY = _ops.ANY.id, ALL = _ops.ALL.id
cdef int RESHAPE = _ops.RESHAPE.id, SLICE = _ops.SLICE.id, MATMUL = _ops.MATMUL_OP.id
cdef int WHERE = _ops.WHERE.id, ADD = _ops.ADD.id
cdef int D_BOOL = _D.BOOL
cdef list OP_NAMES = [op.name for op in _ops.OPS]
cdef list DTYPE_NAMES = list(_D.NAMES)

cdef signed char RED_OUT[MAXOPS][ND]   # reduction result dtype by input dtype
cdef signed char MM_COMP[ND][ND]        # matmul computation dtype, -1: refused
cdef signed char MM_OUT[ND][ND]
cdef list ALL_AXES = [tuple(range(n)) for n in range(65)]


def _load_tables():
    cdef int i, a, b
    for i in range(MAXOPS):
        for a in range(ND):
            RED_OUT[i][a] = -1
    for op in (_ops.SUM, _ops.PROD, _ops.MAX, _ops.MIN, _ops.ARGMAX, _ops.ARGMIN,
               _ops.ANY, _ops.ALL):
        for a in range(ND):
            RED_OUT[op.id][a] = _ops.reduction_dtype(op, a)
    for a in range(ND):
        for b in range(ND):
            MM_COMP[a][b], MM_OUT[a][b] = _D.resolve_matmul(a, b)


_load_tables()


cdef inline Node _view(int op, Node n, tuple shape, object attrs):
    return _new_node(op, n.dtype, shape, _shape_hash(shape), (n,), attrs)


# --- reductions -----------------------------------------------------------------

cpdef tuple normalize_axes(str name, tuple shape, object axis):
    """``axis`` as a sorted tuple of non-negative ints, checked against ``shape``."""
    cdef Py_ssize_t ndim = len(shape), a
    cdef list out
    if axis is None:
        return ALL_AXES[ndim] if ndim < 65 else tuple(range(ndim))
    if type(axis) is int:
        a = axis
        if -ndim <= a < ndim:
            return (a + ndim if a < 0 else a,)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for item in axes:
        try:
            a = operator.index(item)
        except TypeError as exc:
            raise TypeError(f"lazyrt.{name}: axis must be an int or tuple of ints, "
                            f"not {axis!r}") from exc
        if not -ndim <= a < ndim:
            raise AxisError(f"lazyrt.{name}: axis {a} is out of range for a tensor of "
                            f"shape {shape} (rank {ndim})")
        out.append(a + ndim if a < 0 else a)
    if len(set(out)) != len(out):
        raise AxisError(f"lazyrt.{name}: repeated axis in {axis!r}")
    out.sort()
    return tuple(out)


cdef object _reduce(int op, object x, object axis, object keepdims):
    cdef TensorBase t = _as_tensor(x)
    cdef Node n = t._node
    cdef str name = OP_NAMES[op]
    cdef tuple shape = n.shape
    cdef tuple axes = normalize_axes(name, shape, axis)
    cdef Py_ssize_t ndim = len(shape), i, k = 0, na = len(axes)
    cdef bint keep = bool(keepdims), empty = False
    cdef int code = RED_OUT[op][n.dtype]
    cdef list out = []
    for i in range(ndim):
        if k < na and <Py_ssize_t>axes[k] == i:
            k += 1
            if shape[i] == 0:
                empty = True
            if keep:
                out.append(1)
        else:
            out.append(shape[i])
    if empty and (op == MAX or op == MIN or op == ARGMAX or op == ARGMIN):
        raise ShapeError(f"lazyrt.{name}: zero-size reduction over axis {axis} of a tensor "
                         f"of shape {shape} has no identity")
    if (op == ARGMAX or op == ARGMIN) and na > 1 and na != ndim:
        raise AxisError(f"lazyrt.{name}: reduces over one axis or all of them (axis=None), "
                        f"not {axis!r}")
    if (op == SUM or op == PROD) and n.dtype != code:
        n = _cast(n, code)
    shape = tuple(out)
    return _wrap(_new_node(op, code, shape, _shape_hash(shape), (n,), (axes, keep)))


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (int, tuple or None: all); ints and bools sum in int64."""
    return _reduce(SUM, x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    """Product over ``axis``; ints and bools multiply in int64."""
    return _reduce(PROD, x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; NaN propagates, as ``np.max``."""
    return _reduce(MAX, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Minimum over ``axis``; NaN propagates, as ``np.min``."""
    return _reduce(MIN, x, axis, keepdims)


def argmax(x, axis=None, keepdims=False):
    """Index of the first maximum along ``axis`` (flattened when None)."""
    return _reduce(ARGMAX, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """Index of the first minimum along ``axis`` (flattened when None)."""
    return _reduce(ARGMIN, x, axis, keepdims)


def any(x, axis=None, keepdims=False):
    """Whether any element along ``axis`` is nonzero."""
    return _reduce(ANY, x, axis, keepdims)


def all(x, axis=None, keepdims=False):
    """Whether every element along ``axis`` is nonzero."""
    return _reduce(ALL, x, axis, keepdims)


# --- reshape ------------------------------------------------------------------------

cdef tuple _shape_of(tuple args):
    """reshape's ``*shape``: ints, or one sequence of ints."""
    cdef object shape = args
    if len(args) == 1 and type(args[0]) is not int:
        shape = args[0]
        shape = (shape,) if hasattr(shape, "__index__") else tuple(shape)
    for d in shape:
        if type(d) is not int:
            return tuple([operator.index(e) for e in shape])
    return shape


cdef Node _reshape_node(Node n, tuple shape):
    """``n`` reshaped to ``shape``; -1 infers one dimension."""
    cdef Py_ssize_t size = 1, known = 1, d, infer = -1, i
    for d in n.shape:
        size *= d
    for i in range(len(shape)):
        d = shape[i]
        if d == -1 and infer < 0:
            infer = i
        elif d < 0:
            raise ShapeError(f"lazyrt.reshape: invalid shape {shape} for a tensor of shape "
                             f"{n.shape}")
        else:
            known *= d
    if infer >= 0:
        if known == 0 or size % known:
            raise ShapeError(f"lazyrt.reshape: cannot reshape {n.shape} (size {size}) "
                             f"into {shape}")
        shape = shape[:infer] + (size // known,) + shape[infer + 1:]
    elif known != size:
        raise ShapeError(f"lazyrt.reshape: cannot reshape {n.shape} (size {size}) into {shape}")
    if shape == n.shape:
        return n
    return _view(RESHAPE, n, shape, (shape,))


def reshape(x, *shape):
    """``x`` with a new shape of the same size; one dimension may be -1.

    ``x.reshape(2, 8)`` and ``x.reshape((2, 8))`` are the same.
    """
    cdef TensorBase t = _as_tensor(x)
    # always a new tensor, even for the same shape: `y = x.reshape(x.shape); y += 1`
    # rebinds y only (value semantics; the node itself is shared, nothing is copied)
    return _wrap(_reshape_node(t._node, _shape_of(shape)))


# --- basic indexing ------------------------------------------------------------------

DEF MAXDIMS = 64


cdef int _parse(tuple shape, object index, Py_ssize_t *start, Py_ssize_t *step,
                Py_ssize_t *length, list out_shape) except -2:
    """Basic indexing → per-axis (start, step, length) in the arrays and the
    result shape in ``out_shape`` (int-indexed axes out, None axes in).
    Returns -1 for advanced indexing (arrays, masks, tensors), else 1 when an
    int or None index makes the result shape differ from the sliced lengths,
    else 0."""
    cdef tuple items = index if type(index) is tuple else (index,)
    cdef Py_ssize_t ndim = len(shape), n_real = 0, ellipses = 0, axis = 0, fill, j
    cdef Py_ssize_t dim, stop, k
    cdef int reshaped = 0
    cdef object i
    for i in items:
        if type(i) is slice or type(i) is int:
            n_real += 1
        elif i is None:
            continue
        elif i is Ellipsis:
            ellipses += 1
        elif isinstance(i, (TensorBase, np.ndarray, list)):
            return -1
        else:
            n_real += 1
    if ellipses > 1:
        raise IndexError("lazyrt: an index can only have a single ellipsis ('...')")
    if n_real > ndim:
        raise IndexError(f"lazyrt: too many indices for a tensor of shape {shape}: "
                         f"{n_real} were given")
    if ndim > MAXDIMS:
        raise IndexError(f"lazyrt: indexing supports up to {MAXDIMS} dimensions, "
                         f"not {ndim}")
    fill = ndim - n_real
    for i in items:
        if type(i) is slice:
            dim = shape[axis]
            PySlice_GetIndicesEx(i, dim, &start[axis], &stop, &step[axis], &length[axis])
            if length[axis] == 0:
                start[axis] = 0
            out_shape.append(length[axis])
            axis += 1
        elif i is None:
            out_shape.append(1)
            reshaped = 1
        elif i is Ellipsis:
            for j in range(fill):
                dim = shape[axis]
                start[axis], step[axis], length[axis] = 0, 1, dim
                out_shape.append(dim)
                axis += 1
            fill = 0
        else:
            dim = shape[axis]
            try:
                k = i if type(i) is int else operator.index(i)
            except TypeError as exc:
                raise IndexError(f"lazyrt: only ints, slices, None and ... are valid "
                                 f"indices, not {i!r}") from exc
            if not -dim <= k < dim:
                raise IndexError(f"lazyrt: index {k} is out of bounds for axis {axis} "
                                 f"with size {dim} (shape {shape})")
            start[axis], step[axis], length[axis] = (k + dim if k < 0 else k), 1, 1
            axis += 1
            reshaped = 1
    for j in range(fill):  # axes after the last index are taken whole
        dim = shape[axis]
        start[axis], step[axis], length[axis] = 0, 1, dim
        out_shape.append(dim)
        axis += 1
    return reshaped


cdef tuple _spec(Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *step, Py_ssize_t *length):
    return tuple([(start[j], step[j], length[j]) for j in range(n)])


def parse_index(tuple shape, object index):
    """Basic indexing → (per-axis (start, step, length), result shape), or None
    for advanced indexing (arrays, masks, tensors), which the caller handles.

    The result shape keeps int-indexed axes out and None axes in.
    """
    cdef Py_ssize_t start[MAXDIMS]
    cdef Py_ssize_t step[MAXDIMS]
    cdef Py_ssize_t length[MAXDIMS]
    cdef list out_shape = []
    if _parse(shape, index, start, step, length, out_shape) < 0:
        return None
    return _spec(len(shape), start, step, length), tuple(out_shape)


cdef object _advanced_getitem = None


def set_advanced_getitem(fn):
    """Where indexing with arrays, masks or tensors goes (``lazyrt.api.views``)."""
    global _advanced_getitem
    _advanced_getitem = fn


def getitem(TensorBase x, index):
    """``x[index]`` for basic indexing, recorded as one SLICE view (plus a reshape
    for int and None axes); advanced indexing goes to ``lazyrt.api.views``."""
    cdef Node n = x._node
    cdef Py_ssize_t start[MAXDIMS]
    cdef Py_ssize_t step[MAXDIMS]
    cdef Py_ssize_t length[MAXDIMS]
    cdef list out_shape = []
    cdef tuple shape = n.shape, result
    cdef Py_ssize_t j, ndim = len(shape)
    cdef bint identity = True
    cdef int parsed = _parse(shape, index, start, step, length, out_shape)
    if parsed < 0:
        return _advanced_getitem(x, index)
    for j in range(ndim):
        if start[j] != 0 or step[j] != 1 or length[j] != <Py_ssize_t>shape[j]:
            identity = False
            break
    if not identity:
        n = _view(SLICE, n, tuple(out_shape) if parsed == 0 else
                  tuple([length[j] for j in range(ndim)]),
                  (_spec(ndim, start, step, length),))
    if parsed:  # an int or None index: the sliced lengths are reshaped
        result = tuple(out_shape)
        if result != n.shape:
            n = _view(RESHAPE, n, result, (result,))
    return _wrap(n)  # x[:] is a new tensor too: in-place ops on it must not rebind x


# --- matmul -------------------------------------------------------------------------

@cython.wraparound(True)
def matmul(a, b):
    """``a @ b``: (..., n, k) @ (..., k, m) -> (..., n, m), batch axes broadcast.

    1-D operands are promoted (a leading or trailing 1) and the extra axis is
    dropped again, as NumPy does. The MATMUL op itself always sees two
    operands of equal rank >= 2, which is what the planner and emitters assume.
    """
    cdef Node x = (<TensorBase>_as_tensor(a))._node
    cdef Node y = (<TensorBase>_as_tensor(b))._node
    cdef int comp, out
    cdef bint drop_n, drop_m
    cdef Py_ssize_t rank
    cdef tuple batch, shape
    if not x.shape or not y.shape:
        raise ShapeError(f"lazyrt.matmul: operands must have at least one dimension, "
                         f"got shapes {x.shape} and {y.shape}")
    comp, out = MM_COMP[x.dtype][y.dtype], MM_OUT[x.dtype][y.dtype]
    if comp < 0:
        raise DTypeError(f"lazyrt.matmul: not defined for {DTYPE_NAMES[x.dtype]} and "
                         f"{DTYPE_NAMES[y.dtype]} (shapes {x.shape} and {y.shape})")
    if x.dtype != comp:
        x = _cast(x, comp)
    if y.dtype != comp:
        y = _cast(y, comp)
    drop_n, drop_m = len(x.shape) == 1, len(y.shape) == 1
    if drop_n:
        x = _reshape_node(x, (1,) + x.shape)
    if drop_m:
        y = _reshape_node(y, y.shape + (1,))
    if x.shape[-1] != y.shape[-2]:
        raise ShapeError(f"lazyrt.matmul: contracted dimensions differ: {x.shape} @ {y.shape} "
                         f"({x.shape[-1]} != {y.shape[-2]})")
    rank = len(x.shape) if len(x.shape) > len(y.shape) else len(y.shape)
    if len(x.shape) < rank:
        x = _reshape_node(x, (1,) * (rank - len(x.shape)) + x.shape)
    if len(y.shape) < rank:
        y = _reshape_node(y, (1,) * (rank - len(y.shape)) + y.shape)
    batch = x.shape[:-2]
    if rank > 2 and batch != y.shape[:-2]:
        try:
            batch = _broadcast(batch, y.shape[:-2], MATMUL)
        except ShapeError:
            raise ShapeError(f"lazyrt.matmul: batch dimensions do not broadcast: {x.shape} @ "
                             f"{y.shape} (batch {x.shape[:-2]} vs {y.shape[:-2]})") from None
    shape = batch + (x.shape[-2], y.shape[-1])
    cdef Node r = _new_node(MATMUL, out, shape, _shape_hash(shape), (x, y), None)
    if drop_n or drop_m:
        shape = batch + (() if drop_n else (x.shape[-2],)) + (() if drop_m else (y.shape[-1],))
        r = _reshape_node(r, shape)
    return _wrap(r)


def rmatmul(b, a):
    """``a @ b`` where ``b`` is the tensor (``__rmatmul__``)."""
    return matmul(a, b)


# --- where --------------------------------------------------------------------------

cdef Node _where_operand(object v, int kind, int code):
    """A ``where`` branch as a node of dtype ``code``: tensors cast, Python scalars
    become runtime scalar parameters (changing them does not recompile)."""
    cdef Node n
    if kind < 0:
        n = (<TensorBase>v)._node
        return n if n.dtype == code else _cast(n, code)
    if kind == 1 and 0 < code < 5:
        _check_int_range(WHERE, v, code)
    return _scalar_node(v, code, False)


def where(cond, a, b):
    """``a`` where ``cond`` is true, else ``b``; all three broadcast together.

    ``a`` and ``b`` promote like ``a + b`` (Python scalars are weak).
    """
    cdef Node c = (<TensorBase>_as_tensor(cond))._node
    cdef int ka = _scalar_kind(a), kb = _scalar_kind(b), code
    cdef Node na, nb
    cdef tuple shape
    if c.dtype != D_BOOL:
        c = _cast(c, D_BOOL)
    if ka < 0:
        a = _as_tensor(a)
    if kb < 0:
        b = _as_tensor(b)
    if ka >= 0 and kb >= 0:  # two Python scalars: the first takes its default dtype
        a = _as_tensor(a)
        ka = -1
    if ka < 0 and kb < 0:
        code = binary_comp(ADD, (<TensorBase>a)._node.dtype, (<TensorBase>b)._node.dtype)
    elif ka < 0:
        code = scalar_comp(ADD, (<TensorBase>a)._node.dtype, kb)
    else:
        code = scalar_comp(ADD, (<TensorBase>b)._node.dtype, ka)
    if code < 0:
        raise DTypeError(f"lazyrt.where: no common dtype for "
                         f"{getattr(a, 'dtype', type(a).__name__)} and "
                         f"{getattr(b, 'dtype', type(b).__name__)}")
    na = _where_operand(a, ka, code)
    nb = _where_operand(b, kb, code)
    shape = c.shape
    if na.shape != shape:
        shape = _broadcast(shape, na.shape, WHERE)
    if nb.shape != shape:
        shape = _broadcast(shape, nb.shape, WHERE)
    return _wrap(_new_node(WHERE, code, shape, _shape_hash(shape), (c, na, nb), None))
