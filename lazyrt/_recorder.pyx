# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The graph recorder: nodes, their 64-bit structural hashes, the hot paths
of the tensor operators, and graph capture.

Recording an op must cost less than running it eagerly would, so everything
a ``a + b`` touches is here, in Cython: operand checks, NumPy-style dtype
resolution (table lookups into tables built from :mod:`lazyrt.ops`),
broadcasting, the node and its hash (a murmur-style mix in C, computed once
from op, dtype, shape, attrs and the inputs' hashes), and the Tensor object.

Leaves hash by shape and dtype only, never by content: a training loop that
feeds new data every step produces the same graph key every step.
"""
from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memcpy
from cpython.object cimport PyObject, PyTypeObject
cimport cython

import sys
import numpy as np

from lazyrt import ops as _ops
from lazyrt import dtypes as _D
from lazyrt.errors import ShapeError, DTypeError

# --- hashing ----------------------------------------------------------------

cdef uint64_t _shape_hash(tuple shape) except? 0:
    cdef uint64_t h = 0x9e3779b97f4a7c15ULL + <uint64_t>len(shape)
    cdef object d
    for d in shape:
        h = mix(h, <uint64_t><int64_t>d)
    return h


cdef uint64_t stable_hash(object obj) except? 0:
    """A hash of an attrs value that is the same in every process.

    Python's own ``hash`` of a str changes per process, which would make
    graph keys differ between runs and defeat the on-disk cache.
    """
    cdef uint64_t h
    cdef double f
    cdef bytes b
    cdef unsigned char c
    if obj is None:
        return 0x51ed270b27d4a1c3ULL
    if obj is True or obj is False:
        return 0x2545f4914f6cdd1dULL + <uint64_t>(obj is True)
    if isinstance(obj, int):
        return mix(0x1, <uint64_t><int64_t>obj)
    if isinstance(obj, float):
        f = obj
        memcpy(&h, &f, 8)
        return mix(0x2, h)
    if isinstance(obj, str):
        b = (<str>obj).encode()
        h = 0xcbf29ce484222325ULL
        for c in b:
            h = (h ^ c) * 0x100000001b3ULL
        return mix(0x3, h)
    if isinstance(obj, tuple):
        h = mix(0x4, <uint64_t>len(obj))
        for item in obj:
            if type(item) is int:  # shapes, axes, slice specs: skip the type dispatch
                h = mix(h, mix(0x1, <uint64_t><int64_t>item))
            else:
                h = mix(h, stable_hash(item))
        return h
    raise TypeError(f"lazyrt: op attribute {obj!r} is not hashable across processes")


# --- the op table, as C arrays ------------------------------------------------

DEF MAXOPS = 128
DEF ND = 8

cdef signed char BIN_COMP[MAXOPS][ND][ND]
cdef signed char BIN_OUT[MAXOPS][ND][ND]
cdef signed char SCA_COMP[MAXOPS][ND][3]
cdef signed char SCA_OUT[MAXOPS][ND][3]
cdef signed char UN_COMP[MAXOPS][ND]
cdef signed char UN_OUT[MAXOPS][ND]
cdef list OP_NAMES = [op.name for op in _ops.OPS]
cdef uint64_t LEAF_SALT[ND]

cdef int OP_DATA = _ops.DATA.id
cdef int OP_SCALAR = _ops.SCALAR.id
cdef int OP_CONST = _ops.CONST.id
cdef int OP_CAST = _ops.CAST.id
cdef int OP_POW = _ops.POW.id
cdef int OP_EXPAND = _ops.EXPAND.id
cdef int OP_EQ = _ops.EQ.id      # EQ, NE, LT, LE, GT, GE are consecutive in the op table
cdef int OP_GE = _ops.GE.id
cdef int D_BOOL = _D.BOOL
cdef int D_FLOAT16 = _D.FLOAT16
cdef int D_INT64 = _D.INT64
cdef int D_FLOAT64 = _D.FLOAT64


def _load_tables():
    cdef int i, a, b
    if len(_ops.OPS) > MAXOPS:
        raise RuntimeError("lazyrt: op table outgrew the recorder's MAXOPS")
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
    for a in range(ND):
        LEAF_SALT[a] = fmix(mix(0xdada, <uint64_t>a))


_load_tables()

# --- counters (read by lazyrt.metrics) --------------------------------------

cdef uint64_t _ops_recorded = 0
cdef uint64_t _pending_since_cut = 0
cdef uint64_t _cut_limit = 100000
cdef object _cut_hook = None


def counters():
    return {"ops_recorded": _ops_recorded}


def reset_counters():
    global _ops_recorded
    _ops_recorded = 0


def set_cut(uint64_t limit, hook):
    """Cut the graph (sync every live tensor) after ``limit`` recorded ops
    without a full barrier, so a loop that never syncs stays bounded."""
    global _cut_limit, _cut_hook
    _cut_limit = limit
    _cut_hook = hook


def full_barrier_done():
    global _pending_since_cut
    _pending_since_cut = 0


# --- nodes --------------------------------------------------------------------

@cython.final
cdef class Node:
    """One recorded op: (op, dtype, shape, inputs, attrs) and its hash.

    A node that has been computed is turned into a data leaf in place: its
    value is bound and its inputs dropped, releasing the graph behind it.
    Fields are declared in ``_recorder.pxd``.
    """

    @property
    def opname(self):
        return OP_NAMES[self.op]

    @property
    def is_leaf(self):
        return self.op == OP_DATA or self.op == OP_SCALAR or self.op == OP_CONST

    def bind(self, value):
        """Make this node a data leaf holding ``value`` (an ndarray)."""
        self.value = value
        self.op = OP_DATA
        self.inputs = ()
        self.attrs = None
        self.hash = fmix(mix(LEAF_SALT[self.dtype], self.shape_hash))

    def __repr__(self):
        return (f"Node({OP_NAMES[self.op]}, {_D.NAMES[self.dtype]}, {self.shape}, "
                f"inputs={len(self.inputs)}, hash={self.hash:016x})")


cdef Node _new_node(int op, int dtype, tuple shape, uint64_t shape_hash,
                    tuple inputs, object attrs):
    global _ops_recorded, _pending_since_cut
    cdef Node n = Node.__new__(Node)
    cdef uint64_t h = mix(<uint64_t>op * 0x100 + <uint64_t>dtype, shape_hash)
    cdef Node i
    n.op = op
    n.dtype = dtype
    n.shape = shape
    n.shape_hash = shape_hash
    n.inputs = inputs
    n.attrs = attrs
    for i in inputs:
        h = mix(h, i.hash)
    if attrs is not None:
        h = mix(h, stable_hash(attrs))
    n.hash = fmix(h)
    _ops_recorded += 1
    _pending_since_cut += 1
    return n


def data_node(value, int dtype):
    """A parameter leaf holding an ndarray of lazyrt dtype ``dtype``."""
    cdef tuple shape = value.shape
    cdef Node n = Node.__new__(Node)
    n.op = OP_DATA
    n.dtype = dtype
    n.shape = shape
    n.shape_hash = _shape_hash(shape)
    n.inputs = ()
    n.value = value
    n.hash = fmix(mix(LEAF_SALT[dtype], n.shape_hash))
    return n


cdef tuple EMPTY = ()
cdef uint64_t EMPTY_SHAPE_HASH = _shape_hash(())


cdef object _scalar_value(object value, int dtype):
    """``value`` as the Python type of ``dtype``, C-cast like ``astype`` (bool,
    int, float): backends pass integer scalars as exact int64 words, floats as
    doubles, and tell them apart by this type."""
    cdef type t = type(value)
    if dtype == D_BOOL:
        return value if t is bool else bool(value)
    if dtype < D_FLOAT16:
        if t is int:
            return value
        if t is bool:
            return int(value)
        with np.errstate(all="ignore"):  # NaN/inf to int: what astype does
            return np.array(value, np.float64).astype(_D.DTYPES[dtype]).item()
    return value if t is float else float(value)


cdef Node _scalar_node(object value, int dtype, bint baked):
    """A 0-d leaf for a Python scalar: a runtime parameter, or baked in the key."""
    cdef Node n = Node.__new__(Node)
    if not baked:
        value = _scalar_value(value, dtype)
    n.dtype = dtype
    n.shape = EMPTY
    n.shape_hash = EMPTY_SHAPE_HASH
    n.inputs = EMPTY
    n.value = value
    if baked:
        n.op = OP_CONST
        n.hash = fmix(mix(mix(0xc0de, <uint64_t>dtype), stable_hash(value)))
    else:
        n.op = OP_SCALAR
        n.hash = fmix(mix(0x5ca1, <uint64_t>dtype))
    return n


def scalar_node(value, int dtype, bint baked=False):
    return _scalar_node(value, dtype, baked)


def record(int op, int dtype, tuple shape, tuple inputs, attrs=None):
    """Record a node whose dtype and shape the caller has already checked."""
    return _new_node(op, dtype, shape, _shape_hash(shape), inputs, attrs)


cdef Node _cast(Node n, int dtype):
    if n.op == OP_SCALAR or n.op == OP_CONST:
        return _scalar_node(n.value, dtype, n.op == OP_CONST)
    return _new_node(OP_CAST, dtype, n.shape, n.shape_hash, (n,), (dtype,))


def cast(Node n, int dtype):
    return n if n.dtype == dtype else _cast(n, dtype)


# --- broadcasting -------------------------------------------------------------

cdef tuple _broadcast(tuple a, tuple b, int op):
    cdef Py_ssize_t na = len(a), nb = len(b), n = na if na > nb else nb, i
    cdef list out = [None] * n
    cdef object da, db
    for i in range(n):
        da = a[i - (n - na)] if i >= n - na else 1
        db = b[i - (n - nb)] if i >= n - nb else 1
        if da == db or db == 1:
            out[i] = da
        elif da == 1:
            out[i] = db
        else:
            raise ShapeError(
                f"lazyrt.{OP_NAMES[op]}: shapes {a} and {b} cannot be broadcast together "
                f"(dimension {i}: {da} vs {db})")
    return tuple(out)


# --- the tensor ----------------------------------------------------------------

cdef object _TensorType = None      # lazyrt.tensor.Tensor, set at import
cdef object _materialize = None     # lazyrt.runtime.materialize(tensor) -> ndarray
cdef object _to_tensor = None       # lazyrt.creation.asarray
cdef PyObject* _live_head = NULL    # intrusive list of every live tensor


def install(tensor_type, materialize, to_tensor):
    global _TensorType, _materialize, _to_tensor
    _TensorType = tensor_type
    _materialize = materialize
    _to_tensor = to_tensor


cdef TensorBase _wrap(Node node):
    cdef TensorBase t = (<PyTypeObject*>_TensorType).tp_new(<type>_TensorType, <PyObject*>EMPTY, NULL)
    t._node = node
    if _pending_since_cut >= _cut_limit and _cut_hook is not None:
        _cut_hook()
    return t


def wrap(Node node):
    return _wrap(node)


cdef inline bint _pending(Node n):
    """Not yet computed: neither data nor a scalar leaf."""
    return not (n.op == OP_DATA or n.op == OP_SCALAR or n.op == OP_CONST)


def any_live_pending():
    """Whether some live tensor still waits for a barrier."""
    cdef PyObject* p = _live_head
    cdef TensorBase t
    while p != NULL:
        t = <TensorBase>p
        if t._node is not None and _pending(t._node):
            return True
        p = t._next
    return False


def live_pending():
    """Every live tensor whose value has not been computed yet."""
    cdef list out = []
    cdef PyObject* p = _live_head
    cdef TensorBase t
    while p != NULL:
        t = <TensorBase>p
        if t._node is not None and _pending(t._node):
            out.append(t)
        p = t._next
    return out


cdef int _scalar_kind(object v) noexcept:
    """0 bool, 1 int, 2 float; -1: not a Python scalar."""
    cdef type t = type(v)
    if t is float:
        return 2
    if t is int:
        return 1
    if t is bool:
        return 0
    return -1


cdef object _dtype_error(int op, Node a, object b):
    bdesc = _D.NAMES[(<Node>b).dtype] if isinstance(b, Node) else type(b).__name__
    return DTypeError(
        f"lazyrt.{OP_NAMES[op]}: not defined for {_D.NAMES[a.dtype]} and {bdesc} "
        f"(shapes {a.shape}" + (f" and {(<Node>b).shape})" if isinstance(b, Node) else ")"))


cdef bint _int_fits(object value, int dtype):
    info = np.iinfo(_D.DTYPES[dtype])
    return info.min <= value <= info.max


cdef object _check_int_range(int op, object value, int dtype):
    # NumPy refuses Python ints that do not fit a weak-typed int operand
    if not _int_fits(value, dtype):
        raise OverflowError(
            f"lazyrt.{OP_NAMES[op]}: Python integer {value} is out of bounds for "
            f"{_D.NAMES[dtype]}")
    return None


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
        return _to_tensor(v)
    if _scalar_kind(v) < 0 and isinstance(v, (int, float)):  # int/float subclasses
        return _to_tensor(v)
    if hasattr(v, "__torch_function__") and type(v).__module__.startswith("torch"):
        return _to_tensor(v)
    return NotImplemented


cdef object _as_tensor(object x):
    return x if isinstance(x, TensorBase) else _to_tensor(x)


cdef int binary_comp(int op, int a, int b) noexcept:
    """The computation dtype of tensor(a) OP tensor(b); -1: not defined."""
    return BIN_COMP[op][a][b] if BIN_OUT[op][a][b] >= 0 else -1


cdef int scalar_comp(int op, int a, int kind) noexcept:
    """The computation dtype of tensor(a) OP <Python scalar of ``kind``>; -1: not defined."""
    return SCA_COMP[op][a][kind] if SCA_OUT[op][a][kind] >= 0 else -1


def binary(int op, x, y):
    """Record a binary pointwise op; either side may be a Python scalar."""
    if not isinstance(x, TensorBase) and not isinstance(y, TensorBase):
        x = _to_tensor(x)
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


cdef class TensorBase:
    """The recorded half of :class:`lazyrt.Tensor`: its node and operators.

    Shape, dtype and friends never compute anything; the materializing calls
    (``numpy()``, ``item()``, ``bool()``, printing...) are barriers.
    """
    def __cinit__(self):
        global _live_head
        self._prev = NULL
        self._next = _live_head
        if _live_head != NULL:
            (<TensorBase>_live_head)._prev = <PyObject*>self
        _live_head = <PyObject*>self

    def __dealloc__(self):
        global _live_head
        if self._prev != NULL:
            (<TensorBase>self._prev)._next = self._next
        else:
            _live_head = self._next
        if self._next != NULL:
            (<TensorBase>self._next)._prev = self._prev

    # -- metadata: never materializes --
    @property
    def shape(self):
        return self._node.shape

    @property
    def dtype(self):
        return _D.DTYPES[self._node.dtype]

    @property
    def ndim(self):
        return len(self._node.shape)

    @property
    def size(self):
        cdef Py_ssize_t n = 1
        for d in self._node.shape:
            n *= d
        return n

    def __len__(self):
        if not self._node.shape:
            raise TypeError("lazyrt: len() of a 0-d tensor")
        return self._node.shape[0]

    @property
    def is_pending(self):
        """True while the value has not been computed (no barrier yet)."""
        return _pending(self._node)

    # -- materializing --
    def numpy(self):
        """The value as a read-only NumPy array (a barrier)."""
        if self._node.op == OP_DATA:
            return self._node.value
        return _materialize(self)

    # the other materializing methods (item, tolist, bool...) are in lazyrt/tensor.py

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

    def __neg__(self): return unary(NEG, self)
    def __pos__(self): return self
    def __abs__(self): return unary(ABS, self)
    def __invert__(self): return unary(INVERT, self)
