# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Which user line recorded a node: the innermost frame that is not lazyrt's own
by :mod:`lazyrt._frames`'s rule (the one rule; torch's folder counts as lazyrt's
once ``lazyrt.torch`` is imported), kept as ``(code object, bytecode offset)``
and formatted only when shown (:func:`source_line`).

The recorder (:mod:`lazyrt._recorder`) calls :func:`user_frame` for every node
it records, so the walk is C: each frame's code object is classified once (by
``_frames.is_internal``) and cached in a direct-mapped table by pointer.
Metrics (fallbacks and materializations) ask :func:`user_source` from Python.
"""
from cpython.object cimport PyObject

cdef extern from *:
    """
    #include <frameobject.h>
    /* The frame's current bytecode offset (3.11+), or minus its line number before. */
    static int lz_frame_at(PyFrameObject *f) {
    #if PY_VERSION_HEX >= 0x030B0000
        return PyFrame_GetLasti(f);
    #else
        return -PyFrame_GetLineNumber(f);
    #endif
    }
    """
    ctypedef struct PyFrameObject
    PyFrameObject* PyEval_GetFrame()
    PyFrameObject* PyFrame_GetBack(PyFrameObject*)
    int lz_frame_at(PyFrameObject*)

from cpython.ref cimport Py_XDECREF

from lazyrt import _frames

cdef dict _INTERNAL_CODE = {}   # id(code) -> (code, whether it is lazyrt's own)
# a direct-mapped cache in front of it, by code pointer: the dict holds a reference
# to every code object it has seen, so a cached pointer is never reused
DEF CODE_SLOTS = 256
cdef PyObject* _code_slot[CODE_SLOTS]
cdef bint _code_internal[CODE_SLOTS]


cdef bint _is_internal(object code):
    cdef PyObject* p = <PyObject*>code
    cdef size_t h = (<size_t>p >> 4) & (CODE_SLOTS - 1)
    cdef bint internal
    if _code_slot[h] == p:
        return _code_internal[h]
    if len(_INTERNAL_CODE) > 65536:  # generated code without end: start over
        _forget()
    internal = _frames.is_internal(code.co_filename)
    _INTERNAL_CODE[<Py_ssize_t>p] = (code, internal)
    _code_slot[h] = p
    _code_internal[h] = internal
    return internal


def _forget():
    """Drop every cached classification (the rule changed, or the table is full)."""
    _INTERNAL_CODE.clear()
    for i in range(CODE_SLOTS):
        _code_slot[i] = NULL


_frames.on_change(_forget)


def skip_source_dir(str path):
    """Treat frames of files under the folder ``path`` as lazyrt's own when finding
    the user's line (:func:`lazyrt._frames.skip_folder`). ``lazyrt.torch`` adds
    torch's package: a node's line is then the user's model or training code
    (``model.py:27``), not the torch module that made the aten call
    (``linear.py:134``), as its materializations, fallbacks and barriers are."""
    _frames.skip_folder(path)


cdef object user_frame(int* offset):
    """The code object of the innermost caller outside lazyrt (the user's call),
    and its bytecode offset in ``offset``; None when every frame is lazyrt's."""
    cdef PyFrameObject* f = PyEval_GetFrame()
    cdef PyFrameObject* back
    cdef object code
    cdef object found = None
    cdef bint owned = False
    while f != NULL:
        code = (<object><PyObject*>f).f_code  # (PyFrame_GetCode measured slower)
        if not _is_internal(code):
            found = code
            offset[0] = lz_frame_at(f)
            break
        back = PyFrame_GetBack(f)  # a new reference
        if owned:
            Py_XDECREF(<PyObject*>f)
        f, owned = back, True
    if owned and f != NULL:
        Py_XDECREF(<PyObject*>f)
    return found


def user_source():
    """``(code, offset)`` of the user's call that reached lazyrt (``(None, 0)``
    when there is none): the same rule that gives each node its source line.
    Format it with :func:`source_line`."""
    cdef int offset = 0
    cdef object code = user_frame(&offset)
    return (code, offset)


def source_line(object code, int offset):
    """``"file:line"`` of a node's recorded source (``None`` when unknown); a node
    the torch.compile backend recorded from an FX node (a code object named
    ``<fx NAME>``, :mod:`lazyrt.torch.user_lines`) adds ``" (FX node NAME)"``."""
    if code is None:
        return None
    name = code.co_name
    fx = f" (FX node {name[4:-1]})" if name.startswith("<fx ") else ""
    if offset < 0:
        return f"{code.co_filename}:{-offset}{fx}"
    line = code.co_firstlineno
    for start, end, ln in code.co_lines():
        if start <= offset < end and ln is not None:
            line = ln
            break
    return f"{code.co_filename}:{line}{fx}"
