# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The graph recorder's core: nodes, their 64-bit structural hashes, scalar
leaves, casts, broadcasting, and the tensor base with its live-tensor list.

Recording an op must cost less than running it eagerly would, so the
recorder is Cython throughout: this module, the operators
(:mod:`lazyrt._recorder_pointwise`), reductions/views/indexing/matmul
(:mod:`lazyrt._recorder_shapes`) and capture (:mod:`lazyrt._capture`) share
the node and the C-level constructors through ``_recorder.pxd``. A node's
hash is a murmur-style mix in C, computed once from op, dtype, shape, attrs
and the inputs' hashes.

Leaves hash by shape and dtype only, never by content: a training loop that
feeds new data every step produces the same graph key every step.
"""
from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memcpy
from cpython.object cimport PyObject, PyTypeObject
cimport cython

import numpy as np

from lazyrt import ops as _ops
from lazyrt import dtypes as _D
from lazyrt.errors import ShapeError
from lazyrt._source_lines cimport user_frame
from lazyrt._source_lines import source_line

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
    cdef object item
    if type(obj) is tuple:  # attrs are mostly tuples (of ints): test that first
        h = mix(0x4, <uint64_t>len(<tuple>obj))
        for item in <tuple>obj:
            if type(item) is int:
                h = mix(h, mix(0x1, <uint64_t><int64_t>item))
            else:
                h = mix(h, stable_hash(item))
        return h
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
        return stable_hash(tuple(obj))
    raise TypeError(f"lazyrt: op attribute {obj!r} is not hashable across processes")


# --- source lines (lazyrt._source_lines finds them) -------------------------------

cdef void _take_source(Node n):
    """Remember the user's line that recorded ``n``."""
    cdef int offset = 0
    cdef object code = user_frame(&offset)
    if code is not None:
        n.source_code = code
        n.source_offset = offset


# --- the op table, as C arrays ------------------------------------------------

DEF MAXOPS = 128
DEF ND = 9  # lazyrt.dtypes.NDTYPES (checked at import)

cdef list OP_NAMES = [op.name for op in _ops.OPS]
cdef uint64_t LEAF_SALT[ND]

cdef int OP_DATA = _ops.DATA.id
cdef int OP_SCALAR = _ops.SCALAR.id
cdef int OP_CONST = _ops.CONST.id
cdef int OP_CAST = _ops.CAST.id
cdef int D_BOOL = _D.BOOL
cdef int D_FLOAT16 = _D.FLOAT16
cdef int D_FLOAT32 = _D.FLOAT32
cdef int D_BFLOAT16 = _D.BFLOAT16


def _load_tables():
    cdef int a
    if len(_ops.OPS) > MAXOPS:
        raise RuntimeError("lazyrt: op table outgrew the recorder's MAXOPS")
    if _D.NDTYPES != ND:
        raise RuntimeError("lazyrt: the recorder's ND is not lazyrt.dtypes.NDTYPES")
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
    """Call ``hook`` (which may cut the graph: sync every live tensor) once
    ``limit`` ops are counted since the count last started over, so a loop
    that never syncs stays bounded."""
    global _cut_limit, _cut_hook
    _cut_limit = limit
    _cut_hook = hook


def full_barrier_done():
    """Nothing is pending any more: the cut count starts over from zero."""
    global _pending_since_cut
    _pending_since_cut = 0


def restart_cut_count(uint64_t pending):
    """The cut count starts over from ``pending``, the ops still waiting for a
    barrier (the cut hook measured them and found no cut was needed)."""
    global _pending_since_cut
    _pending_since_cut = pending


# --- nodes --------------------------------------------------------------------

@cython.final
@cython.no_gc
cdef class Node:
    """One recorded op: (op, dtype, shape, inputs, attrs) and its hash.

    Not tracked by Python's cyclic garbage collector: a node refers only to its
    inputs (older nodes: a DAG), tuples of numbers, its value (an array or a
    number) and a code object, so it is never part of a reference cycle and
    reference counting frees it. A step's graph is a thousand nodes; tracked,
    they made most of the allocations that start the collector's young-generation
    passes and, surviving them until the barrier, fed its full collections.

    A node that has been computed is turned into a data leaf in place: its
    value is bound and its inputs dropped, releasing the graph behind it.
    Fields are declared in ``_recorder.pxd``.
    """

    @property
    def opname(self):
        return OP_NAMES[self.op]

    @property
    def source(self):
        """``"file:line"`` of the user code that recorded this op, or None."""
        return source_line(self.source_code, self.source_offset)

    @property
    def is_leaf(self):
        return self.op == OP_DATA or self.op == OP_SCALAR or self.op == OP_CONST

    def bind(self, value):
        """Make this node a data leaf holding ``value`` (an ndarray, or a device
        backend's array: see :func:`host_value`)."""
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
    _take_source(n)
    _ops_recorded += 1
    _pending_since_cut += 1
    return n


cpdef object host_value(Node n):
    """A data node's value as a read-only ndarray. A backend that keeps results
    on its device (``jax``) binds device arrays; the first host read copies
    one to the host and the node keeps that copy from then on."""
    cdef object v = n.value
    if isinstance(v, np.ndarray):
        return v
    v = np.array(v, dtype=_D.DTYPES[n.dtype], copy=True)
    v.flags.writeable = False
    n.value = v
    return v


cpdef keep_device_copy(Node n, object host, object device):
    """A device backend uploaded the data leaf ``n``'s read-only ``host`` array:
    the leaf holds the device copy from now on, so the next graph does not
    upload it again (a host read copies it back, once)."""
    if n.op == OP_DATA and n.value is host:
        n.value = device


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
    if dtype < D_FLOAT16:  # the integer codes (bfloat16's comes after the floats)
        if t is int:
            return value
        if t is bool:
            return int(value)
        with np.errstate(all="ignore"):  # NaN/inf to int: what astype does
            return np.array(value, np.float64).astype(_D.DTYPES[dtype]).item()
    return _round_to_float(value if t is float else float(value), dtype)


cdef object _round_to_float(double value, int dtype):
    """A weak Python float rounded to the float dtype it meets first (NEP 50):
    ``float16_tensor == 0.1`` compares with float16(0.1), as NumPy does. Kernels
    compute float16 and bfloat16 in float32, which then holds the rounded value
    exactly."""
    if dtype == D_FLOAT32:
        return <double><float>value  # IEEE round to nearest; overflow gives inf
    if dtype == D_FLOAT16:
        with np.errstate(over="ignore"):
            return float(np.float16(value))
    if dtype == D_BFLOAT16:  # from the double in one rounding (ml_dtypes' cast)
        with np.errstate(over="ignore"):
            return float(np.array(value).astype(_D.bfloat16))
    return value


cdef Node _scalar_node(object value, int dtype, bint baked):
    """A 0-d leaf for a Python scalar: a runtime parameter, or baked in the key."""
    cdef Node n = Node.__new__(Node)
    if not baked:
        value = _scalar_value(value, dtype)
    elif type(value) is float:  # a baked exponent is rounded to its dtype too
        value = _round_to_float(value, dtype)
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

cdef object _TensorType = None      # lazyrt.api.tensor.Tensor, set at import
cdef object _materialize = None     # lazyrt.runtime.materialize(tensor) -> ndarray
cdef object _to_tensor = None       # lazyrt.api.creation.asarray
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


cdef object _as_tensor(object x):
    return x if isinstance(x, TensorBase) else _to_tensor(x)


#: (min, max) of each integer dtype code (``np.iinfo`` costs microseconds a call)
cdef dict _INT_RANGES = {}


cdef bint _int_fits(object value, int dtype) except -1:
    bounds = _INT_RANGES.get(dtype)
    if bounds is None:
        info = np.iinfo(_D.DTYPES[dtype])
        bounds = _INT_RANGES[dtype] = (int(info.min), int(info.max))
    return bounds[0] <= value <= bounds[1]


cdef object _check_int_range(int op, object value, int dtype):
    # NumPy refuses Python ints that do not fit a weak-typed int operand
    if not _int_fits(value, dtype):
        raise OverflowError(
            f"lazyrt.{OP_NAMES[op]}: Python integer {value} is out of bounds for "
            f"{_D.NAMES[dtype]}")
    return None


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
            return host_value(self._node)
        return _materialize(self)

    # the other materializing methods (item, tolist, bool...) are in lazyrt/api/tensor.py
