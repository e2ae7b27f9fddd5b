# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Pointwise recording: the tensor operators (``a + b``, ``a * 2.0``, ``a += b``,
``-a``...) and ``lr.exp``-style unary functions, the recorder's hottest path.

Operand checks, NumPy's dtype rule (two table lookups into tables built from
:mod:`lazyrt.ops`, which takes them from NumPy's own ufunc resolution),
broadcasting and the node are all here in Cython; a Python scalar operand
becomes a runtime scalar parameter, except a ``**`` exponent, which is baked
into the graph key (``x ** 2`` becomes ``x * x``).
"""
from libc.stdint cimport uint64_t

from lazyrt._recorder cimport (Node, TensorBase, _shape_hash, _new_node, _scalar_node,
                               _cast, _broadcast, _wrap, _scalar_kind, _int_fits,
                               _check_int_range, _as_tensor)
import numpy as np

from lazyrt import ops as _ops
from lazyrt import dtypes as _D
from lazyrt.errors import ShapeError, DTypeError

DEF MAXOPS = 128
DEF ND = 9  # lazyrt.dtypes.NDTYPES (checked at import)

cdef signed char BIN_COMP[MAXOPS][ND][ND]
cdef signed char BIN_OUT[MAXOPS][ND][ND]
cdef signed char SCA_COMP[MAXOPS][ND][3]
cdef signed char SCA_OUT[MAXOPS][ND][3]
cdef signed char UN_COMP[MAXOPS][ND]
cdef signed char UN_OUT[MAXOPS][ND]
cdef list OP_NAMES = [op.name for op in _ops.OPS]

cdef int OP_POW = _ops.POW.id
cdef int OP_EQ = _ops.EQ.id      # EQ, NE, LT, LE, GT, GE are consecutive in the op table
cdef int OP_GE = _ops.GE.id
cdef int D_INT64 = _D.INT64, D_BOOL = _D.BOOL


def _load_tables():
    cdef int i, a, b
    for i in range(MAXOPS):
        for a in range(ND):
            UN_COMP[i][a] = UN_OUT[i][a] = -1
            for b in range(ND):
                BIN_COMP[i][a][b] = BIN_OUT[i][a][b] = -1
            for b in range(3):
                SCA_COMP[i][a][b] = SCA_OUT[i][a][b] = -1
    for op in _ops.OPS:
        i = op.id
        if op.unary_table is not None:
            for a in range(ND):
                UN_COMP[i][a], UN_OUT[i][a] = op.unary_table[a]
        if op.binary_table is not None:
            arrays, scalars = op.binary_table
            for a in range(ND):
                for b in range(ND):
                    BIN_COMP[i][a][b], BIN_OUT[i][a][b] = arrays[a][b]
                for b in range(3):
                    SCA_COMP[i][a][b], SCA_OUT[i][a][b] = scalars[a][b]


_load_tables()


cdef object _dtype_error(int op, Node a, object b):
    bdesc = _D.NAMES[(<Node>b).dtype] if isinstance(b, Node) else type(b).__name__
    return DTypeError(
        f"lazyrt.{OP_NAMES[op]}: not defined for {_D.NAMES[a.dtype]} and {bdesc} "
        f"(shapes {a.shape}" + (f" and {(<Node>b).shape})" if isinstance(b, Node) else ")"))


cdef Node _binary_nodes(int op, Node a, Node b):
    cdef int comp = BIN_COMP[op][a.dtype][b.dtype]
    cdef int out = BIN_OUT[op][a.dtype][b.dtype]
    cdef tuple shape
    cdef uint64_t sh
    if comp < 0 or out < 0:
        raise _dtype_error(op, a, b)
    if a.dtype != comp:
        a = _cast(a, comp)
    if b.dtype != comp:
        b = _cast(b, comp)
    if a.shape is b.shape or a.shape_hash == b.shape_hash and a.shape == b.shape:
        shape = a.shape
        sh = a.shape_hash
    else:
        shape = _broadcast(a.shape, b.shape, op)
        sh = _shape_hash(shape)
    return _new_node(op, out, shape, sh, (a, b), None)


cdef Node _binary_scalar(int op, Node a, object s, int kind, bint reflected):
    cdef int comp = SCA_COMP[op][a.dtype][kind]
    cdef int out = SCA_OUT[op][a.dtype][kind]
    cdef Node sn
    if comp < 0 or out < 0:
        raise _dtype_error(op, a, s)
    if kind == 1 and 0 < comp < 5:  # an int scalar meeting an int dtype
        if OP_EQ <= op <= OP_GE and comp != D_INT64 and not _int_fits(s, comp):
            comp = D_INT64  # NumPy compares an out-of-range int by value (uint8 == -1)
        _check_int_range(op, s, comp)
        if op == OP_POW and not reflected and s < 0:
            raise ValueError(f"lazyrt.pow: integers to negative integer powers are not "
                             f"allowed ({_D.NAMES[comp]} tensor ** {s}); use a float base")
    if a.dtype != comp:
        a = _cast(a, comp)
    # exponents are specialized on (x ** 2 becomes x * x); other scalars are runtime
    sn = _scalar_node(s, comp, op == OP_POW)
    if reflected:
        return _new_node(op, out, a.shape, a.shape_hash, (sn, a), None)
    return _new_node(op, out, a.shape, a.shape_hash, (a, sn), None)


cdef object _binop(int op, object x, object y):
    """x OP y where at least one side is a tensor; NotImplemented otherwise."""
    cdef int kind
    if isinstance(x, TensorBase):
        if isinstance(y, TensorBase):
            return _wrap(_binary_nodes(op, (<TensorBase>x)._node, (<TensorBase>y)._node))
        kind = _scalar_kind(y)
        if kind >= 0:
            return _wrap(_binary_scalar(op, (<TensorBase>x)._node, y, kind, False))
        y = _coerce(y)
        if y is NotImplemented:
            return y
        return _wrap(_binary_nodes(op, (<TensorBase>x)._node, (<TensorBase>y)._node))
    kind = _scalar_kind(x)
    if kind >= 0:
        return _wrap(_binary_scalar(op, (<TensorBase>y)._node, x, kind, True))
    x = _coerce(x)
    if x is NotImplemented:
        return x
    return _wrap(_binary_nodes(op, (<TensorBase>x)._node, (<TensorBase>y)._node))


cdef object _coerce(object v):
    """NumPy arrays and NumPy scalars become data leaves (they are not weak)."""
    if isinstance(v, (np.ndarray, np.generic, list)):
        return _as_tensor(v)
    if _scalar_kind(v) < 0 and isinstance(v, (int, float)):  # int/float subclasses
        return _as_tensor(v)
    if hasattr(v, "__torch_function__") and type(v).__module__.startswith("torch"):
        return _as_tensor(v)
    return NotImplemented


cdef int binary_comp(int op, int a, int b) noexcept:
    """The computation dtype of tensor(a) OP tensor(b); -1: not defined."""
    return BIN_COMP[op][a][b] if BIN_OUT[op][a][b] >= 0 else -1


cdef int scalar_comp(int op, int a, int kind) noexcept:
    """The computation dtype of tensor(a) OP <Python scalar of ``kind``>; -1: not defined."""
    return SCA_COMP[op][a][kind] if SCA_OUT[op][a][kind] >= 0 else -1


def binary(int op, x, y):
    """Record a binary pointwise op; either side may be a Python scalar."""
    if not isinstance(x, TensorBase) and not isinstance(y, TensorBase):
        x = _as_tensor(x)
    return _binop(op, x, y)


def unary(int op, TensorBase x):
    """Record a unary pointwise op with NumPy's dtype rule for it."""
    cdef Node a = x._node
    cdef int comp = UN_COMP[op][a.dtype], out = UN_OUT[op][a.dtype]
    if comp < 0 or out < 0:
        raise DTypeError(f"lazyrt.{OP_NAMES[op]}: not defined for {_D.NAMES[a.dtype]} "
                         f"(shape {a.shape})")
    if a.dtype != comp:
        a = _cast(a, comp)
    return _wrap(_new_node(op, out, a.shape, a.shape_hash, (a,), None))


cdef object _inplace(int op, TensorBase self, object other):
    cdef object r = _binop(op, self, other)
    if r is NotImplemented:
        return r
    cdef Node n = (<TensorBase>r)._node
    if n.dtype != self._node.dtype:
        if not _D.can_cast_same_kind(n.dtype, self._node.dtype):
            raise DTypeError(
                f"lazyrt.{OP_NAMES[op]} (in place): result {_D.NAMES[n.dtype]} cannot be "
                f"stored back into {_D.NAMES[self._node.dtype]} (NumPy's same_kind rule)")
        n = _cast(n, self._node.dtype)
    if n.shape != self._node.shape:
        raise ShapeError(
            f"lazyrt.{OP_NAMES[op]} (in place): result shape {n.shape} does not match "
            f"the target's shape {self._node.shape}")
    self._node = n
    return self


cdef int ADD = _ops.ADD.id, SUB = _ops.SUB.id, MUL = _ops.MUL.id, TRUEDIV = _ops.TRUEDIV.id
cdef int FLOORDIV = _ops.FLOORDIV.id, MOD = _ops.MOD.id, POW = _ops.POW.id
cdef int EQ = _ops.EQ.id, NE = _ops.NE.id, LT = _ops.LT.id, LE = _ops.LE.id
cdef int GT = _ops.GT.id, GE = _ops.GE.id
cdef int BITAND = _ops.BITAND.id, BITOR = _ops.BITOR.id, BITXOR = _ops.BITXOR.id
cdef int NEG = _ops.NEG.id, ABS = _ops.ABS.id, INVERT = _ops.INVERT.id
cdef int LSHIFT = _ops.LSHIFT.id, RSHIFT = _ops.RSHIFT.id


cdef class PointwiseTensor(TensorBase):
    """The operators of :class:`lazyrt.Tensor`; each records one node (plus a
    cast where NumPy's rule computes in a wider dtype)."""

    # -- arithmetic: the recorder's hot path --
    def __add__(self, o): return _binop(ADD, self, o)
    def __radd__(self, o): return _binop(ADD, o, self)
    def __sub__(self, o): return _binop(SUB, self, o)
    def __rsub__(self, o): return _binop(SUB, o, self)
    def __mul__(self, o): return _binop(MUL, self, o)
    def __rmul__(self, o): return _binop(MUL, o, self)
    def __truediv__(self, o): return _binop(TRUEDIV, self, o)
    def __rtruediv__(self, o): return _binop(TRUEDIV, o, self)
    def __floordiv__(self, o): return _binop(FLOORDIV, self, o)
    def __rfloordiv__(self, o): return _binop(FLOORDIV, o, self)
    def __mod__(self, o): return _binop(MOD, self, o)
    def __rmod__(self, o): return _binop(MOD, o, self)
    def __pow__(self, o, mod=None): return _binop(POW, self, o)
    def __rpow__(self, o, mod=None): return _binop(POW, o, self)
    def __and__(self, o): return _binop(BITAND, self, o)
    def __rand__(self, o): return _binop(BITAND, o, self)
    def __or__(self, o): return _binop(BITOR, self, o)
    def __ror__(self, o): return _binop(BITOR, o, self)
    def __xor__(self, o): return _binop(BITXOR, self, o)
    def __rxor__(self, o): return _binop(BITXOR, o, self)
    # shifts: NumPy's results for any amount (see ops.LSHIFT, ops.RSHIFT)
    def __lshift__(self, o): return _binop(LSHIFT, self, o)
    def __rlshift__(self, o): return _binop(LSHIFT, o, self)
    def __rshift__(self, o): return _binop(RSHIFT, self, o)
    def __rrshift__(self, o): return _binop(RSHIFT, o, self)
    def __eq__(self, o): return _binop(EQ, self, o)
    def __ne__(self, o): return _binop(NE, self, o)
    def __lt__(self, o): return _binop(LT, self, o)
    def __le__(self, o): return _binop(LE, self, o)
    def __gt__(self, o): return _binop(GT, self, o)
    def __ge__(self, o): return _binop(GE, self, o)

    def __iadd__(self, o): return _inplace(ADD, self, o)
    def __isub__(self, o): return _inplace(SUB, self, o)
    def __imul__(self, o): return _inplace(MUL, self, o)
    def __itruediv__(self, o): return _inplace(TRUEDIV, self, o)
    def __ifloordiv__(self, o): return _inplace(FLOORDIV, self, o)
    def __imod__(self, o): return _inplace(MOD, self, o)
    def __ipow__(self, o): return _inplace(POW, self, o)
    def __iand__(self, o): return _inplace(BITAND, self, o)
    def __ior__(self, o): return _inplace(BITOR, self, o)
    def __ixor__(self, o): return _inplace(BITXOR, self, o)
    def __ilshift__(self, o): return _inplace(LSHIFT, self, o)
    def __irshift__(self, o): return _inplace(RSHIFT, self, o)

    def __neg__(self): return unary(NEG, self)
    def __pos__(self):
        """A new tensor over the same node (+ndarray is a copy); bool refused, as NumPy."""
        if self._node.dtype == D_BOOL:
            raise DTypeError(f"lazyrt.positive: not defined for bool (shape "
                             f"{self._node.shape}), as np.positive; use the tensor itself")
        return _wrap(self._node)
    def __abs__(self): return unary(ABS, self)
    def __invert__(self): return unary(INVERT, self)
