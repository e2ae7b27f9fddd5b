"""Creation functions against NumPy: values, default dtypes, shapes incl. 0-d
and size 0, and value semantics of the data they take in.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lazyrt as lr
from conftest import DTYPES, arrays, assert_exact, assert_matches, shapes


@given(data=st.data())
def test_tensor_and_asarray_round_trip_any_array(backend, data):
    dt = data.draw(st.sampled_from(DTYPES))
    a = data.draw(arrays(dt, shapes()))
    assert_exact(lr.tensor(a), a)
    assert_exact(lr.asarray(a), a)
    if a.size:
        assert_exact(lr.tensor(a.tolist(), dtype=dt), a)
    assert lr.tensor(a).shape == a.shape and lr.tensor(a).size == a.size


@pytest.mark.parametrize("dt", [None, "bool", "int8", "uint8", "int32", "int64", "float16",
                                "float32", "float64"])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 4), (2, 3, 1)], ids=str)
def test_zeros_ones_full_empty_match_numpy(backend, dt, shape):
    kw = {} if dt is None else {"dtype": dt}
    assert_exact(lr.zeros(shape, **kw), np.zeros(shape, **kw))
    assert_exact(lr.ones(shape, **kw), np.ones(shape, **kw))
    assert_exact(lr.empty(shape, **kw), np.zeros(shape, **kw))  # never uninitialized
    fill = 1 if dt in ("bool", "uint8") else -3 if dt and dt[0] == "i" else 2.5
    assert_exact(lr.full(shape, fill, **kw), np.full(shape, fill, **kw))


def test_zeros_accepts_an_int_shape(backend):
    assert_exact(lr.zeros(4), np.zeros(4))
    assert lr.zeros(4).dtype == np.float64


@pytest.mark.parametrize("dt", [None, "int32", "float16", "bool"])
def test_like_functions_take_shape_and_dtype(backend, dt):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = lr.tensor(a) * 2  # pending: *_like only reads shape and dtype
    kw = {} if dt is None else {"dtype": dt}
    assert_exact(lr.zeros_like(t, **kw), np.zeros_like(a, **kw))
    assert_exact(lr.ones_like(t, **kw), np.ones_like(a, **kw))
    assert_exact(lr.empty_like(t, **kw), np.zeros_like(a, **kw))
    assert_exact(lr.full_like(t, 7, **kw), np.full_like(a, 7, **kw))
    assert t.is_pending


@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 10, 3), (10, 1, -2), (0,), (0.5, 3.0, 0.5),
                                  (3, 3)], ids=str)
@pytest.mark.parametrize("dt", [None, "int32", "float32", "float64"])
def test_arange_matches_numpy(backend, args, dt):
    kw = {} if dt is None else {"dtype": dt}
    assert_exact(lr.arange(*args, **kw), np.arange(*args, **kw))


def test_arange_with_keyword_step(backend):
    assert_exact(lr.arange(10, step=3), np.arange(0, 10, 3))


@pytest.mark.parametrize("args", [(0, 1, 5), (-2, 2, 7), (1, 1, 1), (0, 1, 0)], ids=str)
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_linspace_matches_numpy(backend, args, endpoint, dt):
    assert_matches(lr.linspace(*args, endpoint=endpoint, dtype=dt),
                   np.linspace(*args, endpoint=endpoint, dtype=dt))


@pytest.mark.parametrize("args", [(3,), (2, 4), (4, 3, 1), (3, 3, -1), (0,)], ids=str)
def test_eye_matches_numpy(backend, args):
    assert_exact(lr.eye(*args), np.eye(*args))
    assert_exact(lr.eye(*args, dtype="int8"), np.eye(*args, dtype=np.int8))


def test_creation_results_compose_with_ops(backend):
    x = lr.arange(6, dtype="float32").reshape(2, 3)
    out = x + lr.ones((3,), "float32") * 2 - lr.eye(2, 3, dtype="float32")
    expected = np.arange(6, dtype=np.float32).reshape(2, 3) + 2 - np.eye(2, 3, dtype=np.float32)
    assert_matches(out, expected)


def test_asarray_of_a_tensor_is_the_tensor(backend):
    t = lr.tensor([1.0, 2.0])
    assert lr.asarray(t) is t
    assert_exact(lr.asarray(t, dtype="int32"), np.array([1, 2], np.int32))


def test_numpy_scalars_and_nested_lists(backend):
    assert_exact(lr.tensor(np.float32(1.5)), np.float32(1.5))
    assert_exact(lr.tensor([[1, 2], [3, 4]], dtype="uint8"), np.array([[1, 2], [3, 4]], np.uint8))
    assert_exact(lr.tensor([]), np.array([]))


def test_full_fill_value_out_of_range_for_dtype(backend):
    with pytest.raises(OverflowError):
        lr.full((2,), 300, dtype="uint8")
    with pytest.raises(TypeError, match="Python scalar"):
        lr.full((2,), lr.tensor(1.0))


def test_asarray_input_cannot_be_changed_through_lazyrt(backend):
    source = np.arange(3.0)
    t = lr.asarray(source)
    out = (t + 1).numpy()
    assert_exact(out, np.arange(3.0) + 1)
    with pytest.raises(ValueError):
        t.numpy()[0] = 5.0


def test_torch_tensors_are_accepted_when_torch_is_installed(backend):
    torch = pytest.importorskip("torch")
    src = torch.arange(4, dtype=torch.float32).requires_grad_()
    assert_exact(lr.asarray(src) * 2, np.arange(4, dtype=np.float32) * 2)
