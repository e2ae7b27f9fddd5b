"""lazyrt as an array API (2023.12) namespace: the protocol, inspection, the
data type functions against array_api_strict (which implements the standard
exactly), devices, DLPack, the standard's signatures, boolean-mask
assignment, and the functions with data-dependent output shapes.
"""
from __future__ import annotations

import inspect
import itertools
import math

import array_api_strict as xps
import numpy as np
import pytest

import lazyrt as lr
from conftest import DTYPE_NAMES, assert_exact

# --- the protocol -----------------------------------------------------------------------


def test_tensor_names_lazyrt_as_its_namespace():
    x = lr.asarray([1.0, 2.0])
    assert x.__array_namespace__() is lr
    assert x.__array_namespace__(api_version="2023.12") is lr
    assert lr.__array_api_version__ == "2023.12"


def test_an_unknown_api_version_is_refused_by_name():
    with pytest.raises(ValueError, match="2099.12"):
        lr.asarray([1.0]).__array_namespace__(api_version="2099.12")


def test_array_api_compat_finds_lazyrt():
    import array_api_compat
    x = lr.asarray([1.0, 2.0])
    assert array_api_compat.array_namespace(x) is lr
    assert array_api_compat.array_namespace(x, lr.ones(2)) is lr
    assert array_api_compat.device(x) == "cpu"


def test_constants():
    assert (lr.e, lr.pi) == (math.e, math.pi)
    assert math.isinf(lr.inf) and lr.inf > 0 and math.isnan(lr.nan)
    assert lr.newaxis is None
    assert lr.ones((2, 3))[:, lr.newaxis].shape == (2, 1, 3)


# --- inspection -------------------------------------------------------------------------

KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating",
         "complex floating", "numeric")


def _names(d):
    return {name: str(dt) for name, dt in d.items()}


def test_capabilities_are_truthful():
    caps = lr.__array_namespace_info__().capabilities()
    assert caps == {"boolean indexing": True, "data-dependent shapes": True}
    x = lr.asarray([1.0, -2.0, 3.0])
    assert x[x > 0].numpy().tolist() == [1.0, 3.0]     # boolean indexing
    assert lr.unique_values(x).shape == (3,)            # data-dependent shapes


def test_default_device_and_dtypes():
    info = lr.__array_namespace_info__()
    assert info.default_device() == "cpu" and info.devices() == [lr.Device("cpu")]
    assert info.default_dtypes() == {"real floating": lr.float64, "complex floating": None,
                                     "integral": lr.int64, "indexing": lr.int64}
    assert info.default_dtypes(device="cpu") == info.default_dtypes()
    assert lr.zeros(2).dtype == info.default_dtypes()["real floating"]
    assert lr.arange(2).dtype == info.default_dtypes()["integral"]


@pytest.mark.parametrize("kind", [None, *KINDS, ("bool", "real floating"),
                                  ("signed integer", "unsigned integer")], ids=str)
def test_dtypes_of_each_kind_are_strict_s_within_lazyrt_s_dtypes(kind):
    ours = lr.__array_namespace_info__().dtypes(kind=kind)
    strict = xps.__array_namespace_info__().dtypes(kind=kind)
    # float16, lazyrt's extra dtype, is not listed: the standard does not have it
    assert _names(ours) == {n: n for n in strict if n in DTYPE_NAMES}
    assert all(ours[n] == getattr(lr, n if n != "bool" else "bool_") for n in ours)


def test_dtypes_refuses_an_unknown_kind_and_device():
    info = lr.__array_namespace_info__()
    with pytest.raises(ValueError, match="unknown kind 'floats'"):
        info.dtypes(kind="floats")
    with pytest.raises(ValueError, match="device 'cuda'"):
        info.dtypes(device="cuda")


@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_finfo_matches_numpy_as_python_floats(name):
    fi, ref = lr.finfo(name), np.finfo(name)
    assert (fi.bits, fi.eps, fi.max, fi.min, fi.smallest_normal) == (
        ref.bits, float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal))
    assert all(type(v) is float for v in (fi.eps, fi.max, fi.min, fi.smallest_normal))
    assert fi.dtype == np.dtype(name)
    assert lr.finfo(lr.ones(2, dtype=name)) == fi


@pytest.mark.parametrize("name", ["int8", "uint8", "int32", "int64"])
def test_iinfo_matches_numpy(name):
    ii, ref = lr.iinfo(getattr(lr, name)), np.iinfo(name)
    assert (ii.bits, ii.max, ii.min, ii.dtype) == (ref.bits, ref.max, ref.min, np.dtype(name))
    assert type(ii.max) is int


def test_finfo_and_iinfo_refuse_the_other_kind_and_foreign_dtypes():
    with pytest.raises(TypeError, match="lazyrt.finfo: int32"):
        lr.finfo(lr.int32)
    with pytest.raises(TypeError, match="lazyrt.iinfo: float32"):
        lr.iinfo(lr.float32)
    with pytest.raises(lr.DTypeError, match="int16 is not a lazyrt dtype"):
        lr.iinfo(np.int16)


# --- data type functions against array_api_strict ------------------------------------------

PAIRS = list(itertools.product(DTYPE_NAMES, repeat=2))

#: where the standard defines a promotion and lazyrt's differs (README lists them)
DEVIATIONS = {("int8", "uint8"): "int32", ("uint8", "int8"): "int32"}


def _strict(name):
    return getattr(xps, name)


def _strict_result(a, b):
    """The standard's promotion of two dtype names, or None where it has none."""
    if "float16" in (a, b):
        return None  # float16 is lazyrt's (and NumPy's) extra dtype, not the standard's
    try:
        return str(xps.result_type(_strict(a), _strict(b))).rsplit(".", 1)[-1]
    except TypeError:
        return None  # the standard leaves mixed kinds to the library


PAIR_IDS = [f"{a}-{b}" for a, b in PAIRS]


@pytest.mark.parametrize("a,b", PAIRS, ids=PAIR_IDS)
def test_result_type_is_the_standard_s_where_it_is_defined(a, b):
    ours = lr.result_type(getattr(lr, a if a != "bool" else "bool_"), np.dtype(b))
    expected = DEVIATIONS.get((a, b), _strict_result(a, b))
    if expected is None:   # mixed kinds: NumPy's promotion, which every lazyrt op follows
        expected = str(np.result_type(a, b))
    assert str(ours) == expected


@pytest.mark.parametrize("a,b", PAIRS, ids=PAIR_IDS)
def test_an_op_gives_the_dtype_result_type_says(a, b):
    x, y = lr.ones(2, dtype=a), lr.ones(2, dtype=b)
    assert (x + y).dtype == lr.result_type(x, y) == lr.result_type(a, y)
    assert lr.where(x > 0, x, y).dtype == lr.result_type(x, y)


@pytest.mark.parametrize("a,b", PAIRS, ids=PAIR_IDS)
def test_can_cast_is_the_standard_s_within_a_kind(a, b):
    ours = lr.can_cast(np.dtype(a), np.dtype(b))
    assert ours == (lr.result_type(a, b) == np.dtype(b))
    if _strict_result(a, b) is not None:
        assert ours == xps.can_cast(_strict(a), _strict(b))
    elif a == b:
        assert ours
    assert lr.can_cast(lr.ones(1, dtype=a), np.dtype(b)) == ours


@pytest.mark.parametrize("a", DTYPE_NAMES)
@pytest.mark.parametrize("kind", [*KINDS, ("bool", "integral"), "float32", "int8"], ids=str)
def test_isdtype_matches_strict(a, kind):
    if a == "float16":   # not a standard dtype: lazyrt's extra real floating one
        expected = kind in ("real floating", "numeric") or kind == "float16"
        assert lr.isdtype(lr.float16, kind if kind not in DTYPE_NAMES else np.dtype(kind)) \
            == expected
        return
    strict_kind = _strict(kind) if kind in DTYPE_NAMES else kind
    ours_kind = np.dtype(kind) if kind in DTYPE_NAMES else kind
    assert lr.isdtype(np.dtype(a), ours_kind) == xps.isdtype(_strict(a), strict_kind)


def test_isdtype_refuses_unknown_kinds_and_tensors():
    with pytest.raises(ValueError, match="'floating'"):
        lr.isdtype(lr.float32, "floating")
    with pytest.raises(TypeError, match="x.dtype"):
        lr.isdtype(lr.ones(1), "numeric")
    with pytest.raises(TypeError, match="flat tuple"):
        lr.isdtype(lr.float32, (("numeric",),))


@pytest.mark.parametrize("a", DTYPE_NAMES)
@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_result_type_with_python_scalars_is_nep50(a, scalar):
    assert lr.result_type(np.dtype(a), scalar) == lr.result_type(lr.ones(1, dtype=a), scalar) \
        == (lr.ones(1, dtype=a) + scalar).dtype == np.result_type(np.dtype(a), scalar)


def test_result_type_needs_a_dtype_and_refuses_complex():
    with pytest.raises(ValueError, match="at least one"):
        lr.result_type(1, 2.0)
    with pytest.raises(TypeError, match="complex"):
        lr.result_type(lr.float32, 1j)


def test_dtypes_compare_as_the_standard_asks():
    x = lr.ones(3, dtype="float32")
    assert x.dtype == lr.float32 and x.dtype != lr.float64 and x.dtype == "float32"
    assert {lr.float32: 1}[x.dtype] == 1


# --- devices ----------------------------------------------------------------------------

CREATION = {
    "zeros": lambda **kw: lr.zeros((2, 3), **kw),
    "ones": lambda **kw: lr.ones((2, 3), **kw),
    "empty": lambda **kw: lr.empty((2, 3), **kw),
    "full": lambda **kw: lr.full((2, 3), 7, **kw),
    "arange": lambda **kw: lr.arange(5, **kw),
    "linspace": lambda **kw: lr.linspace(0, 1, num=5, **kw),
    "eye": lambda **kw: lr.eye(3, **kw),
    "asarray": lambda **kw: lr.asarray([1, 2], **kw),
    "zeros_like": lambda **kw: lr.zeros_like(lr.ones(2), **kw),
    "ones_like": lambda **kw: lr.ones_like(lr.ones(2), **kw),
    "empty_like": lambda **kw: lr.empty_like(lr.ones(2), **kw),
    "full_like": lambda **kw: lr.full_like(lr.ones(2), 3, **kw),
    "from_dlpack": lambda **kw: lr.from_dlpack(np.arange(3.0), **kw),
    "astype": lambda **kw: lr.astype(lr.ones(2), "int8", **kw),
}


def test_a_tensor_lives_on_the_cpu_device():
    x = lr.ones(3) * 2
    assert x.device == "cpu" and x.device == lr.Device("cpu") and x.device == x.device
    assert hash(x.device) == hash(lr.Device("cpu")) and x.is_pending
    y = x.to_device(x.device)
    assert y is not x and y.device == x.device and y.numpy().tolist() == [2.0, 2.0, 2.0]
    assert x.to_device("cpu").shape == (3,)


@pytest.mark.parametrize("fn", CREATION)
def test_every_creation_function_takes_device(fn):
    make = CREATION[fn]
    base = make()
    for device in ("cpu", lr.Device("cpu"), base.device, None):
        out = make(device=device)
        assert out.device == "cpu" and out.dtype == base.dtype
        assert_exact(out, base.numpy())
    with pytest.raises(ValueError, match=f"lazyrt.{fn}: device 'cuda:0' is not supported"):
        make(device="cuda:0")


def test_to_device_refuses_other_devices_and_streams():
    with pytest.raises(ValueError, match="to_device: device 'gpu'"):
        lr.ones(2).to_device("gpu")
    with pytest.raises(ValueError, match="stream"):
        lr.ones(2).to_device("cpu", stream=1)
    with pytest.raises(ValueError, match="not a lazyrt device"):
        lr.Device("tpu")


# --- DLPack -----------------------------------------------------------------------------

def test_dlpack_device_is_the_cpu():
    assert lr.ones(2).__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dt", DTYPE_NAMES)
def test_numpy_reads_a_lazy_tensor_through_dlpack_without_a_copy(backend, dt):
    a = np.arange(6).reshape(2, 3).astype(dt)
    x = lr.asarray(a) * 1 if dt != "bool" else lr.asarray(a) & True
    out = np.from_dlpack(x)
    assert_exact(out, a)
    assert np.shares_memory(out, x.numpy())
    assert not out.flags.writeable   # lazyrt's values are read-only; DLPack 1.0 says so


@pytest.mark.parametrize("dt", DTYPE_NAMES)
def test_torch_reads_a_lazy_tensor_through_dlpack(backend, dt):
    torch = pytest.importorskip("torch")
    a = np.arange(6).reshape(2, 3).astype(dt)
    x = lr.asarray(a)[:, ::-1] + (0 if dt != "bool" else False)
    t = torch.from_dlpack(x)
    np.testing.assert_array_equal(t.numpy(), a[:, ::-1])
    assert t.data_ptr() == x.numpy().ctypes.data   # zero-copy


def test_dlpack_copy_and_stream_options():
    x = lr.arange(4.0) + 1
    copied = np.from_dlpack(x, copy=True)
    assert not np.shares_memory(copied, x.numpy()) and copied.tolist() == [1, 2, 3, 4]
    with pytest.raises(BufferError, match="stream"):
        x.__dlpack__(stream=1)


def test_a_pre_1_0_dlpack_consumer_gets_a_copy_of_the_read_only_value():
    x = lr.arange(3.0) * 2
    versioned = np.from_dlpack(x)                       # DLPack 1.0: read-only, shared
    assert np.shares_memory(versioned, x.numpy())
    legacy = x.__dlpack__()                              # no max_version: before 1.0
    assert type(legacy).__name__ == "PyCapsule"
    with pytest.raises(BufferError, match="read-only"):
        x.__dlpack__(copy=False)


@pytest.mark.parametrize("dt", DTYPE_NAMES)
def test_from_dlpack_reads_numpy_and_torch(backend, dt):
    torch = pytest.importorskip("torch")
    a = np.arange(6).reshape(3, 2).astype(dt)
    assert_exact(lr.from_dlpack(a) * 1 if dt != "bool" else lr.from_dlpack(a), a)
    assert_exact(lr.from_dlpack(torch.from_numpy(a.copy())), a)


def test_from_dlpack_copies_writable_memory_unless_told_not_to():
    a = np.arange(3.0)
    safe, shared, copied = lr.from_dlpack(a), lr.from_dlpack(a, copy=False), \
        lr.from_dlpack(a, copy=True)
    a[0] = 9.0
    assert safe.numpy()[0] == 0.0 and copied.numpy()[0] == 0.0 and shared.numpy()[0] == 9.0


def test_from_dlpack_of_a_lazy_tensor_keeps_it_lazy():
    x = lr.ones(2) * 3
    y = lr.from_dlpack(x)
    assert y is not x and y.is_pending and y.numpy().tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="no __dlpack__"):
        lr.from_dlpack([1, 2])


# --- Python scalars and operators ----------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    (True, 1 + 0j), (False, 0j), (-3, -3 + 0j), (2.5, 2.5 + 0j), (float("inf"), complex("inf")),
    (float("-inf"), complex("-inf"))])
def test_complex_converts_one_element_as_the_standard_says(backend, value, expected):
    assert complex(lr.asarray(value) + (False if isinstance(value, bool) else 0)) == expected


def test_complex_of_nan_is_nan_nan_j():
    out = complex(lr.asarray(float("nan")))
    assert math.isnan(out.real) and math.isnan(out.imag)
    with pytest.raises(ValueError, match="2 elements"):
        complex(lr.ones(2))


def test_scalar_conversions(backend):
    assert float(lr.asarray(2.5) * 2) == 5.0 and int(lr.asarray(7) + 1) == 8
    assert bool(lr.asarray(0.0)) is False and bool(lr.asarray(2) > 1) is True
    assert [10, 20, 30][lr.asarray(1, dtype="int8")] == 20
    with pytest.raises(TypeError, match="integer tensors"):
        [1][lr.asarray(True)]
    with pytest.raises(ValueError):
        int(lr.asarray(float("nan")))
    with pytest.raises(OverflowError):
        int(lr.asarray(float("inf")))


def test_unary_plus_is_a_new_tensor_with_the_same_value(backend):
    x = lr.asarray([1.0, -2.0])
    y = +x
    y += 1
    assert y is not x and x.numpy().tolist() == [1.0, -2.0]


# --- signatures ---------------------------------------------------------------------------

def _kinds(fn):
    return {p.name: p.kind for p in inspect.signature(fn).parameters.values()}


P, K = inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("fn,positional_only,keyword_only", [
    (lr.reshape, ["x"], ["copy"]),
    (lr.astype, ["x", "dtype"], ["copy", "device"]),
    (lr.clip, ["x"], []),
    (lr.concat, ["tensors"], []),
    (lr.asarray, ["obj"], ["device"]),
    (lr.arange, ["start"], ["device"]),
    (lr.linspace, ["start", "stop"], ["device"]),
    (lr.eye, ["n", "m"], ["device"]),
    (lr.zeros_like, ["x"], ["device"]),
    (lr.full_like, ["x"], ["device"]),
    (lr.from_dlpack, ["x"], ["device", "copy"]),
    (lr.nonzero, ["x"], []),
    (lr.unique_all, ["x"], []),
    (lr.Tensor.to_device, ["self", "device"], ["stream"]),
    (lr.Tensor.__array_namespace__, ["self"], ["api_version"]),
], ids=lambda v: getattr(v, "__qualname__", None))
def test_signatures_are_the_standard_s(fn, positional_only, keyword_only):
    kinds = _kinds(fn)
    assert [n for n, k in kinds.items() if k == P] == positional_only
    assert set(keyword_only) <= {n for n, k in kinds.items() if k == K}


def test_reshape_copy_false_refuses_where_numpy_would_copy(backend):
    a = np.arange(12.0).reshape(3, 4)
    x = lr.asarray(a)
    assert_exact(lr.reshape(x, (4, 3), copy=False), a.reshape(4, 3))
    assert_exact(lr.reshape(x[1:], (8,), copy=False), a[1:].reshape(8))
    assert_exact(lr.reshape(x * 2, (2, 6), copy=False), (a * 2).reshape(2, 6))
    assert_exact(lr.reshape(x, shape=(-1,), copy=True), a.reshape(-1))
    # a[:, ::2] has one stride (2) across its rows: NumPy reshapes it without a copy
    assert_exact(lr.reshape(x[:, ::2], (6,), copy=False), a[:, ::2].reshape(6))
    for view in (x.T, x[:, :2], x[::2, 1:]):
        with pytest.raises(ValueError, match="copy=False"):
            lr.reshape(view, (-1,), copy=False)
        assert_exact(lr.reshape(view, (-1,)), np.asarray(view.numpy()).reshape(-1))
    with pytest.raises(ValueError, match="copy=False"):
        lr.reshape(lr.asarray(a[:, :3], copy=False), (9,), copy=False)  # a strided NumPy leaf


def test_astype_copy_false_returns_x_for_the_same_dtype(backend):
    x = lr.ones(2, dtype="float32")
    assert lr.astype(x, "float32", copy=False) is x and x.astype("float32", copy=False) is x
    assert lr.astype(x, "float32") is not x
    assert_exact(lr.astype(x, "int8", copy=False), np.ones(2, np.int8))


def test_clip_without_bounds_is_a_copy_and_takes_tensor_bounds(backend):
    a = np.array([[-3.0, 0.5, 4.0], [np.nan, 2.0, -1.0]])
    x = lr.asarray(a)
    y = lr.clip(x)
    assert y is not x
    assert_exact(y, a)
    lo, hi = np.array([-1.0, 0.0, 1.0]), np.array([[0.0], [1.5]])
    assert_exact(lr.clip(x, lr.asarray(lo), lr.asarray(hi)), np.clip(a, lo, hi))
    assert_exact(lr.clip(x, min=lr.asarray(lo)), np.clip(a, lo, None))
    assert_exact(lr.clip(x, max=1.0), np.clip(a, None, 1.0))


def test_concat_axis_none_flattens(backend):
    a, b = np.arange(6).reshape(2, 3), np.array(7)
    assert_exact(lr.concat([lr.asarray(a), lr.asarray(b)], axis=None),
                 np.concatenate([a.reshape(-1), b.reshape(-1)]))
    assert_exact(lr.concat([lr.asarray(a).T], axis=None), a.T.reshape(-1))


@pytest.mark.parametrize("make,expected", [
    (lambda: lr.full(2, 1), "int64"), (lambda: lr.full(2, 1.0), "float64"),
    (lambda: lr.full(2, True), "bool"), (lambda: lr.arange(3), "int64"),
    (lambda: lr.arange(0, 3, 0.5), "float64"), (lambda: lr.arange(3.0), "float64"),
    (lambda: lr.zeros(2), "float64"), (lambda: lr.ones(2), "float64"),
    (lambda: lr.empty(2), "float64"), (lambda: lr.eye(2), "float64"),
    (lambda: lr.linspace(0, 1, num=3), "float64"), (lambda: lr.asarray(1), "int64"),
    (lambda: lr.asarray([1.5]), "float64"), (lambda: lr.asarray(True), "bool"),
    (lambda: lr.full_like(lr.ones(2, dtype="int8"), 3), "int8"),
])
def test_default_dtypes_of_creation_functions(make, expected):
    assert make().dtype == np.dtype(expected)
