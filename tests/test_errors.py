"""Errors fail at the offending call, before any barrier, naming the op and
the shapes or dtypes involved, with the exception types eager code raises.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyrt as lr


@pytest.fixture
def nothing_runs(fresh_metrics):
    """Asserts after the test that no graph was executed."""
    yield
    assert lr.metrics.snapshot()["graphs_executed"] == 0


def _f(*shape, dtype="float32"):
    return lr.tensor(np.zeros(shape, dtype))


def test_broadcast_mismatch_names_op_and_shapes(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match=r"lazyrt\.add.*\(2, 3\).*\(4,\)") as info:
        _f(2, 3) + _f(4)
    assert isinstance(info.value, ValueError)
    with pytest.raises(lr.ShapeError, match=r"lazyrt\.mul"):
        _f(3, 1, 5) * _f(2, 4)
    with pytest.raises(lr.ShapeError, match="where|broadcast"):
        lr.where(_f(2, dtype="bool"), _f(3), 0.0)


def test_bad_reshape_names_shapes(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match=r"reshape.*\(2, 3\).*\(4, 2\)"):
        _f(2, 3).reshape(4, 2)
    with pytest.raises(lr.ShapeError, match="reshape"):
        _f(2, 3).reshape(-1, -1)
    with pytest.raises(lr.ShapeError, match="reshape"):
        _f(2, 3).reshape(4, -1)
    with pytest.raises(ValueError):
        _f(0, 3).reshape(0, -1)


@pytest.mark.parametrize("call", [
    lambda t: lr.sum(t, axis=2),
    lambda t: t.mean(axis=-3),
    lambda t: lr.max(t, axis=(0, 0)),
    lambda t: lr.argmax(t, axis=5),
    lambda t: t.squeeze(7),
    lambda t: t.unsqueeze(4),
    lambda t: lr.permute(t, (0, 0)),
    lambda t: lr.concat([t, t], axis=2),
    lambda t: lr.stack([t, t], axis=4),
    lambda t: lr.nn.softmax(t, axis=3),
])
def test_bad_axis_raises_axis_error(backend, nothing_runs, call):
    t = _f(2, 3)
    with pytest.raises(lr.AxisError, match=r"lazyrt\.\w+.*(axis|axes|permutation)"):
        call(t)


def test_axis_error_is_an_index_error_and_value_error():
    assert issubclass(lr.AxisError, IndexError) and issubclass(lr.AxisError, ValueError)
    assert issubclass(lr.DTypeError, TypeError) and issubclass(lr.ShapeError, ValueError)


def test_matmul_mismatch_names_shapes(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        _f(2, 3) @ _f(4, 5)
    with pytest.raises(lr.ShapeError, match="matmul"):
        lr.matmul(_f(3), _f(2))
    with pytest.raises(lr.ShapeError, match="matmul"):
        _f(2, 2, 3) @ _f(3, 3, 4)        # batch dims 2 vs 3
    with pytest.raises(lr.ShapeError, match="matmul"):
        lr.matmul(_f(), _f(3))


def test_invert_on_float_names_dtype(backend, nothing_runs):
    with pytest.raises(lr.DTypeError, match=r"invert.*float32"):
        ~_f(3)
    with pytest.raises(lr.DTypeError, match=r"bitwise_and.*float64"):
        lr.tensor([1.0]) & lr.tensor([1.0])
    with pytest.raises(TypeError, match=r"bitwise_or"):
        lr.tensor([1.5]) | 1


def test_in_place_float_into_int_is_refused(backend, nothing_runs):
    t = lr.tensor(np.arange(3, dtype=np.int32))
    with pytest.raises(lr.DTypeError, match=r"float64.*int32|int32.*float64"):
        t += 0.5
    with pytest.raises(lr.DTypeError, match="int32"):
        t /= 2
    with pytest.raises(lr.ShapeError, match=r"\(3,\).*\(2, 3\)|\(2, 3\).*\(3,\)"):
        t += lr.tensor(np.ones((2, 3), np.int32))


def test_out_of_range_int_scalar_for_int8(backend, nothing_runs):
    t = lr.tensor(np.array([1, 2], np.int8))
    with pytest.raises(OverflowError, match=r"1000.*int8"):
        t * 1000
    with pytest.raises(OverflowError, match="int8"):
        lr.full((2,), 1000, dtype="int8")


def test_setitem_out_of_range_int_scalar_for_int8(backend):
    t = lr.zeros(3, "int8")
    with pytest.raises(OverflowError, match="int8"):
        t[0] = 1000


def test_layer_norm_shape_mismatch_names_shapes(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match=r"layer_norm.*\(5,\).*\(2, 4\)"):
        lr.nn.layer_norm(_f(2, 4), (5,))
    with pytest.raises(lr.ShapeError, match="layer_norm"):
        lr.nn.layer_norm(_f(2, 4), ())
    with pytest.raises(lr.DTypeError, match="layer_norm"):
        lr.nn.layer_norm(lr.tensor(np.zeros((2, 4), np.int64)), 4)


def test_item_of_multi_element_tensor(backend):
    with pytest.raises(ValueError, match=r"item.*\(2, 2\).*4 elements"):
        (_f(2, 2) + 1).item()
    assert (_f(1, 1) + 1).item() == 1.0


def test_truth_value_is_ambiguous_for_several_elements(backend):
    with pytest.raises(ValueError, match=r"\(3,\).*ambiguous.*any\(\).*all\(\)"):
        bool(_f(3) + 1)
    with pytest.raises(ValueError, match="ambiguous"):
        if _f(0):
            pass
    assert bool(_f(1) + 1) is True


def test_indexing_errors(backend, nothing_runs):
    t = _f(2, 3)
    with pytest.raises(IndexError, match=r"out of bounds.*axis 1.*size 3"):
        t[0, 3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="ellipsis"):
        t[..., ...]
    with pytest.raises(IndexError, match="basic indexing"):
        t[[0, 1]] = 1.0
    with pytest.raises(TypeError, match="integer tensors"):
        [1, 2][lr.tensor(np.float32(1.0))]


def test_creation_and_joining_errors(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match="negative"):
        lr.zeros((2, -1))
    with pytest.raises(TypeError, match="dtype"):
        lr.zeros(3, dtype="complex64")
    with pytest.raises((TypeError, ValueError)):
        lr.tensor([[1, 2], [3]])
    with pytest.raises(lr.ShapeError, match=r"concat.*\(2, 3\).*\(2, 4\)"):
        lr.concat([_f(2, 3), _f(2, 4)], axis=0)
    with pytest.raises(lr.ShapeError, match="stack"):
        lr.stack([_f(2), _f(3)])
    with pytest.raises(lr.ShapeError, match="broadcast_to"):
        lr.broadcast_to(_f(3), (2, 4))
    with pytest.raises(lr.ShapeError, match="squeeze"):
        _f(2, 3).squeeze(0)


def test_reduction_with_no_identity(backend, nothing_runs):
    with pytest.raises(lr.ShapeError, match=r"max.*\(0, 3\)"):
        lr.max(_f(0, 3), axis=0)
    with pytest.raises(lr.ShapeError, match="argmin"):
        lr.argmin(_f(0))


def test_sync_rejects_non_tensors():
    with pytest.raises(TypeError, match="sync"):
        lr.sync(np.zeros(2))


def test_int_to_negative_int_power_is_refused_at_the_call(backend, nothing_runs):
    with pytest.raises(ValueError, match="negative"):
        lr.tensor(np.array([1, 2], np.int32)) ** -1


# --- conversions a newcomer tries (issue 9, item 9) ------------------------------

def test_unsupported_dtype_raises_the_exported_dtype_error(nothing_runs):
    for bad in ("complex64", "uint64", "object"):
        with pytest.raises(lr.DTypeError, match="dtype|not a dtype"):
            lr.zeros(3, bad)
    with pytest.raises(lr.DTypeError):
        lr.tensor([1.0]).astype("complex128")


def test_python_int_too_large_for_any_dtype_says_so(nothing_runs):
    with pytest.raises(OverflowError, match=r"1180591620717411303424 does not fit"):
        lr.tensor([2**70])
    with pytest.raises(OverflowError, match="does not fit"):
        lr.asarray([[1, 2], [3, -2**64]])
    with pytest.raises(ValueError, match="inhomogeneous"):
        lr.tensor([[1, 2], [3]])


def test_pickling_a_tensor_pickles_its_value(backend):
    import pickle
    a = np.arange(6.0, dtype="float32").reshape(2, 3)
    t = lr.tensor(a) * 2
    back = pickle.loads(pickle.dumps(t))
    assert isinstance(back, lr.Tensor)
    np.testing.assert_array_equal(back.numpy(), a * 2)
    assert back.dtype == np.float32


def test_torch_tensor_of_a_lazy_tensor_takes_its_value(backend):
    torch = pytest.importorskip("torch")
    t = lr.tensor(np.array([[1.0, 2.0], [3.0, 4.0]], "float32")) + 1
    got = torch.tensor(t)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), [[2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_array_equal(np.from_dlpack(t), [[2.0, 3.0], [4.0, 5.0]])


def test_demo_with_an_unknown_backend_is_a_usage_error(capsys):
    from lazyrt.cli import main
    with pytest.raises(SystemExit) as info:
        main(["demo", "--backend", "bogus"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown backend 'bogus'" in err and "Traceback" not in err


def test_numpy_backend_does_not_leak_numpy_warnings(recwarn):
    import warnings
    with lr.backend("numpy"):
        x = lr.tensor(np.array([0.0, 1.0, -1.0, np.inf]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (lr.log(x) / x + lr.sqrt(x) * np.inf - x ** 1e10).numpy()
            (lr.tensor(np.array([1, 2], "int32")) // 0).numpy()
            x.astype("int32").numpy()  # NaN/inf to int: NumPy warns 'invalid value'
            (x * 1e5).astype("float16").numpy()  # NumPy warns 'overflow in cast'
