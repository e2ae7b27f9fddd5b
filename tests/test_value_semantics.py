"""Value semantics: a tensor's value is fixed when its op is recorded.

"Copies" are new tensors (an in-place operator on one never changes another),
host arrays are read as they were at the call, and Python scalars are weak
(NEP 50): rounded to the dtype they meet before any arithmetic. Each test
here is a regression test for a silent wrong result found outside the suite.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr
from conftest import assert_exact

COPIES = {
    "x[:]": lambda x: x[:],
    "x[0:]": lambda x: x[0:],
    "x[...]": lambda x: x[...],
    "x[:, :]": lambda x: x[:, :],
    "reshape(x, x.shape)": lambda x: lr.reshape(x, x.shape),
    "x.reshape(x.shape)": lambda x: x.reshape(x.shape),
    "astype(x, x.dtype)": lambda x: lr.astype(x, x.dtype),
    "x.astype(x.dtype)": lambda x: x.astype(x.dtype),
    "asarray(x, copy=True)": lambda x: lr.asarray(x, copy=True),
    "tensor(x)": lambda x: lr.tensor(x),
    "permute(x, (0, 1))": lambda x: lr.permute(x, (0, 1)),
    "broadcast_to(x, x.shape)": lambda x: lr.broadcast_to(x, x.shape),
    "squeeze(x)": lambda x: lr.squeeze(x),
    "concat([x])": lambda x: lr.concat([x]),
    "+x": lambda x: +x,
}


@pytest.mark.parametrize("make_copy", COPIES.values(), ids=COPIES.keys())
@pytest.mark.parametrize("pending", [False, True], ids=["data", "pending"])
def test_in_place_on_a_copy_leaves_the_original_alone(backend, make_copy, pending):
    a = np.arange(6.0).reshape(2, 3)
    x = lr.tensor(a)
    if pending:
        x = x * 1.0
    y = make_copy(x)
    assert y is not x
    y += 100
    y[0, 0] = -1
    assert_exact(x, a)
    expected = a + 100
    expected[0, 0] = -1
    assert_exact(y, expected)


@pytest.mark.parametrize("make_copy", COPIES.values(), ids=COPIES.keys())
def test_in_place_on_the_original_leaves_a_copy_alone(backend, make_copy):
    a = np.arange(6.0).reshape(2, 3)
    x = lr.tensor(a)
    y = make_copy(x)
    x *= 2
    x[1] = 7
    assert_exact(y, a)


def test_asarray_of_a_tensor_without_copy_is_the_tensor_itself():
    x = lr.tensor([1.0, 2.0])
    assert lr.asarray(x) is x  # as np.asarray of an ndarray
    with pytest.raises(ValueError, match="copy=False"):
        lr.asarray(x, dtype="float32", copy=False)


# --- host data is read at the call --------------------------------------------

def test_asarray_reads_host_data_at_the_call_not_at_the_barrier(backend):
    a = np.array([1.0, 2.0])
    x = lr.asarray(a)
    y = x * 2
    a[0] = 100
    assert_exact(y, np.array([2.0, 4.0]))
    assert_exact(x, np.array([1.0, 2.0]))


def test_tensor_copies_host_data(backend):
    a = np.array([1.0, 2.0])
    x = lr.tensor(a)
    a[:] = -5
    assert_exact(x + 0, np.array([1.0, 2.0]))


def test_host_array_in_an_operator_is_read_at_the_op(backend):
    a = np.array([1.0, 2.0])
    x = lr.tensor([10.0, 20.0])
    y = x + a
    z = a * x
    a[:] = 0
    assert_exact(y, np.array([11.0, 22.0]))
    assert_exact(z, np.array([10.0, 40.0]))


def test_host_view_written_through_its_base_is_read_at_the_call(backend):
    base = np.arange(4.0)
    view = base[1:]
    view.flags.writeable = False  # read-only view, but its base is not
    x = lr.asarray(view)
    base[1] = 50
    assert_exact(x * 1, np.array([1.0, 2.0, 3.0]))


def test_asarray_copy_false_shares_memory_as_documented():
    a = np.array([1.0, 2.0])
    x = lr.asarray(a, copy=False)
    assert np.shares_memory(x.numpy(), a)
    with pytest.raises(ValueError):
        lr.asarray(np.array([1.0, 2.0]), dtype="float32", copy=False)  # needs a copy


def test_asarray_of_a_computed_value_shares_it_without_copying():
    with lr.backend("numpy"):
        v = (lr.tensor(np.arange(5.0)) * 2).numpy()
    x = lr.asarray(v)
    assert np.shares_memory(x.numpy(), v)


def test_asarray_of_a_torch_tensor_reads_it_at_the_call(backend):
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 2.0])
    x = lr.asarray(t)
    t[0] = 100
    assert_exact(x * 1, np.array([1.0, 2.0], "float32"))


# --- weak Python scalars are rounded to the tensor's dtype ----------------------

FLOAT16_VALUES = np.array([0.1, 1 / 3, 2.0, -0.7, 65504.0, 1e-5], "float16")


@pytest.mark.parametrize("scalar", [0.1, 1 / 3, 2.0, -0.7, 1e-5, 7, 65519.0, 1e6])
def test_float16_compares_with_a_python_scalar_rounded_to_float16(backend, scalar):
    t = lr.tensor(FLOAT16_VALUES)
    with np.errstate(all="ignore"):
        for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
            assert_exact(getattr(t, op)(scalar), getattr(FLOAT16_VALUES, op)(scalar))


@pytest.mark.parametrize("dt", ["float16", "float32"])
@pytest.mark.parametrize("scalar", [0.1, 1 / 3, -2.7182818284590451, 1e-3, 16777217])
def test_arithmetic_with_a_python_scalar_is_bit_exact(backend, dt, scalar):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(257) * 10).astype(dt)
    t = lr.tensor(a)
    with np.errstate(all="ignore"):
        for op in ("__add__", "__sub__", "__mul__", "__truediv__", "__radd__", "__rsub__",
                   "__rmul__", "__rtruediv__"):
            assert_exact(getattr(t, op)(scalar), getattr(a, op)(scalar))
        assert_exact(lr.where(t > 0, t, scalar), np.where(a > 0, a, np.array(scalar, dt)))
        assert_exact(lr.maximum(t, scalar), np.maximum(a, scalar))


def test_float16_power_with_a_float_exponent_uses_the_rounded_exponent(backend):
    a = np.linspace(0.5, 40, 64).astype("float16")
    with np.errstate(all="ignore"):
        assert_exact(lr.tensor(a) ** 0.1, a ** 0.1)


# --- default dtypes ---------------------------------------------------------------

@pytest.mark.parametrize("make", [lr.zeros, lr.ones, lr.empty])
def test_creation_with_dtype_none_gives_the_default_float(backend, make):
    assert make((2, 3), dtype=None).dtype == np.float64
    assert make(4, None).dtype == np.float64
    assert_exact(make((2,), dtype=None), np.zeros(2) if make is not lr.ones else np.ones(2))


def test_eye_and_linspace_with_dtype_none_give_the_default_float():
    assert lr.eye(3, dtype=None).dtype == np.float64
    assert lr.linspace(0, 1, 5, dtype=None).dtype == np.float64


def test_float64_to_float16_rounds_once_like_numpy(backend):
    # each value sits just above a float16 rounding tie: through float32 it rounds to
    # the tie, then to even (2048, 1.0, -0.5); NumPy rounds once (2050, 1.001, -0.5005)
    rng = np.random.default_rng(11)
    ties = np.array([2049.0000001, 1 + 2**-11 + 2**-30, -(0.5 + 2**-12 + 2**-35)])
    halfway = (np.arange(1, 2000, dtype=np.float16).astype(np.float64)
               + np.spacing(np.arange(1, 2000, dtype=np.float16)).astype(np.float64) / 2)
    a = np.concatenate([ties, halfway * (1 + 1e-12), halfway * (1 - 1e-12),
                        rng.standard_normal(500) * 1e4])
    assert_exact(lr.tensor(a).astype("float16"), a.astype(np.float16))
    x = lr.zeros(len(a), "float16")
    x += lr.tensor(a)
    assert_exact(x, a.astype(np.float16))
    y = lr.zeros(3, "float16")
    y[...] = 1.0004882821440697
    assert_exact(y, np.full(3, 1.0004882821440697).astype(np.float16))
