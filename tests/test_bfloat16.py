"""bfloat16 (ml_dtypes' NumPy dtype) on every backend, against the numpy reference.

bfloat16 follows float16's rule: every op computes in float32 and rounds its
result once to bfloat16 (ml_dtypes' loops do the same), so most results are
equal to the bit; transcendentals may differ by one bfloat16 ulp where float32
libm results differ. Promotion is NumPy's with ml_dtypes' casts.
"""
import math

import ml_dtypes
import numpy as np
import pytest

import lazyrt as lr
from lazyrt import dtypes as D
from conftest import assert_matches, flushes_subnormals

BF = np.dtype(ml_dtypes.bfloat16)
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3.0e38],
                   np.float32)
SUBNORMAL = np.float32(1e-40)  # a bfloat16 subnormal too (jax flushes them: documented)


def _special():
    return SPECIAL if flushes_subnormals() else np.append(SPECIAL, SUBNORMAL)


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def _same_bits(got, want):
    """Equal to the bit, every NaN counted as a NaN (payloads aside)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == BF, (got.dtype, want.dtype)
    assert got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan])


def test_bfloat16_is_a_lazyrt_dtype():
    assert lr.bfloat16 == BF and D.code_of("bfloat16") == D.BFLOAT16
    assert lr.isdtype(lr.bfloat16, "real floating")
    assert "bfloat16" not in lr.__array_namespace_info__().dtypes()
    assert lr.finfo(lr.bfloat16).eps == 2.0 ** -7
    assert lr.tensor(np.ones(3, BF)).dtype == BF


@pytest.mark.parametrize("other, expected", [
    ("bool", BF), ("int8", BF), ("uint8", BF), ("int32", np.float64), ("int64", np.float64),
    ("float16", np.float32), ("float32", np.float32), ("float64", np.float64), (BF, BF)])
def test_promotion_follows_numpy_and_ml_dtypes(other, expected):
    a, b = lr.zeros(2, lr.bfloat16), lr.zeros(2, other)
    assert (a + b).dtype == np.dtype(expected) == (b + a).dtype
    assert lr.result_type(lr.bfloat16, other) == np.dtype(expected)


def test_weak_python_scalars_take_bfloat16_and_are_rounded_to_it():
    x = lr.tensor(np.array([1.0, 2.0], BF))
    assert (x * 2.5).dtype == BF and (x + 1).dtype == BF and (x > 0.5).dtype == np.bool_
    # 1.00390625 is halfway between the bfloat16 neighbours of 1: ties to even, 1.0
    assert (x == 1.00390625).numpy().tolist() == [True, False]


def test_chain_rounds_after_every_op_bit_for_bit(backend):
    """Rounding only at the store would differ: the data is chosen so it does."""
    rng = np.random.default_rng(16)
    x = rng.uniform(-4, 4, 4096).astype(BF)
    y = rng.uniform(-4, 4, 4096).astype(BF)
    expected = (x * y + BF.type(1)) / BF.type(3)
    once = ((x.astype(np.float32) * y.astype(np.float32) + 1) / 3).astype(BF)
    assert np.any(_bits(once) != _bits(expected))
    _same_bits((lr.tensor(x) * lr.tensor(y) + 1) / 3, expected)


def test_special_values_and_ties_round_to_nearest_even(backend):
    """NaN stays NaN, inf and -0.0 are kept, the largest float32 overflows to inf,
    values below bfloat16's range flush through its subnormals, and each tie
    rounds to the even neighbour, on the way in (cast) and out of arithmetic."""
    # 1 + k/256 for odd k is halfway between two bfloat16 values
    ties = (1 + np.arange(1, 64, 2) / 256).astype(np.float32)
    data = np.concatenate([_special(), ties, -ties, [np.float32(3.4028235e38)]])
    _same_bits(lr.astype(lr.tensor(data), lr.bfloat16), data.astype(BF))
    wide = data.astype(np.float64) * (1 + 2.0 ** -30)  # just above the ties: rounds up
    _same_bits(lr.astype(lr.tensor(wide), lr.bfloat16), wide.astype(BF))
    x = data.astype(BF)
    with np.errstate(over="ignore"):
        _same_bits(lr.tensor(x) * 1.0 + lr.tensor(x), x + x)


@pytest.mark.parametrize("fn", ["exp", "log", "tanh", "sqrt", "sin", "sigmoid", "abs",
                                "neg", "floor", "round", "sign"])
def test_unary_ops_match_the_reference(backend, fn):
    rng = np.random.default_rng(3)
    x = np.concatenate([_special(), rng.uniform(-6, 6, 200).astype(np.float32)]).astype(BF)
    ref = {"neg": np.negative, "abs": np.abs, "round": np.round,
           "sigmoid": lambda a: (1 / (1 + np.exp(-a.astype(np.float64)))).astype(BF)}
    with np.errstate(all="ignore"):
        want = ref.get(fn, getattr(np, fn, None))(x)
    got = getattr(lr, {"neg": "negative"}.get(fn, fn))(lr.tensor(x))
    assert_matches(got, want)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                "maximum", "minimum", "lt", "eq"])
def test_binary_ops_match_numpy_bit_for_bit(backend, op):
    rng = np.random.default_rng(4)
    a = np.concatenate([SPECIAL, rng.uniform(-8, 8, 300).astype(np.float32)]).astype(BF)
    b = np.concatenate([SPECIAL[::-1], rng.uniform(0.5, 3, 300).astype(np.float32)]).astype(BF)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide,
          "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "eq": np.equal}[op]
    lazy = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
            "truediv": lambda x, y: x / y, "floordiv": lambda x, y: x // y,
            "mod": lambda x, y: x % y, "pow": lambda x, y: x ** y,
            "maximum": lr.maximum, "minimum": lr.minimum, "lt": lambda x, y: x < y,
            "eq": lambda x, y: x == y}[op]
    with np.errstate(all="ignore"):
        want = fn(a, b)
    got = lazy(lr.tensor(a), lr.tensor(b))
    if want.dtype == BF and op != "pow":
        _same_bits(got, want)
    else:
        assert_matches(got, want)


def test_reductions_accumulate_wide_and_round_once(backend):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (16, 300)).astype(BF)
    t = lr.tensor(x)
    _same_bits(lr.sum(t, axis=1), x.astype(np.float64).sum(axis=1).astype(BF))
    _same_bits(lr.max(t, axis=0), np.max(x, axis=0))
    assert_matches(lr.mean(t, axis=1), x.astype(np.float32).mean(axis=1).astype(BF))
    assert lr.argmax(t, axis=1).numpy().tolist() == np.argmax(x, axis=1).tolist()


def test_matmul_accumulates_in_float32_and_gives_bfloat16(backend):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 17, 33)).astype(BF)
    b = rng.standard_normal((33, 9)).astype(BF)
    got = lr.tensor(a) @ lr.tensor(b)
    assert got.dtype == BF
    assert_matches(got, (a.astype(np.float32) @ b.astype(np.float32)).astype(BF))


def test_casts_to_and_from_every_dtype(backend):
    x = np.array([0.0, -0.0, 1.5, -2.5, 100.0, 255.0, np.inf, np.nan], np.float32).astype(BF)
    t = lr.tensor(x)
    for name in D.NAMES:
        if name in ("int8", "uint8", "int32", "int64"):
            finite = x[:6]
            assert_matches(lr.astype(lr.tensor(finite), name),
                           finite.astype(np.float32).astype(name))
        elif name != "bfloat16":
            assert_matches(lr.astype(t, name), x.astype(name))
    # ints round once to bfloat16, also past float32's 24 bits
    ints = np.array([2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 257, 2**24 + 1], np.int64)
    for dt in ("int64", "int32"):
        _same_bits(lr.astype(lr.tensor(ints.astype(dt)), lr.bfloat16), ints.astype(dt).astype(BF))


@pytest.mark.parametrize("shape", [(0,), (3, 0), ()])
def test_empty_and_zero_d(backend, shape):
    x = np.full(shape, 1.5, BF)
    t = lr.tensor(x)
    _same_bits(t * 2 + 1, x * BF.type(2) + BF.type(1))
    assert_matches(lr.sum(t), np.asarray(x.astype(np.float64).sum()).astype(BF))


def test_scatter_add_and_gather(backend):
    rng = np.random.default_rng(7)
    values = rng.standard_normal((6, 4)).astype(BF)
    idx = rng.integers(0, 3, (6, 4))
    got = lr.scatter_add(lr.zeros((3, 4), lr.bfloat16), lr.tensor(idx), lr.tensor(values))
    want = np.zeros((3, 4), np.float32)
    np.add.at(want, (idx, np.arange(4)[None, :]), values.astype(np.float32))
    assert_matches(got, want.astype(BF))
    src = rng.standard_normal((5, 4)).astype(BF)
    gidx = rng.integers(0, 5, (3, 4))
    _same_bits(lr.take_along_axis(lr.tensor(src), lr.tensor(gidx), axis=0),
               np.take_along_axis(src, gidx, axis=0))


def test_sort_concat_and_views(backend):
    x = np.array([3, np.nan, -1, 2, -np.inf, 0.5], np.float32).astype(BF)
    t = lr.tensor(x)
    _same_bits(lr.sort(t), np.sort(x))
    _same_bits(lr.concat([t, t[::-2]]), np.concatenate([x, x[::-2]]))
    _same_bits(lr.reshape(t, (2, 3)).T + 0.0, x.reshape(2, 3).T)


def test_numpy_and_asarray_round_trip():
    x = np.array([1.5, -0.0, np.inf], BF)
    t = lr.asarray(x)
    assert t.dtype == BF and _bits(t.numpy()).tolist() == _bits(x).tolist()
    assert math.isinf(float(t[2]))
    assert np.asarray(t).dtype == BF


def test_dlpack_of_bfloat16_refuses_clearly():
    """NumPy's DLPack cannot carry ml_dtypes' bfloat16: say so, and what to use."""
    t = lr.tensor(np.ones(2, BF))
    with pytest.raises(BufferError, match="bfloat16"):
        t.__dlpack__()


def test_the_oracle_check_compares_bfloat16_as_floats():
    """``lazyrt check`` takes NaN for NaN and a bfloat16 ulp as a match."""
    from lazyrt.check import compare
    want = np.array([np.nan, 1.0, 2.0], np.float32).astype(BF)
    got = np.array([np.nan, 1.0078125, 2.0], np.float32).astype(BF)
    assert compare(got, want) is None
    assert compare(np.array([np.nan, 1.5, 2.0], np.float32).astype(BF), want) is not None


def test_torch_bfloat16_tensors_enter_through_dlpack_and_asarray():
    """NumPy refuses bfloat16 DLPack capsules: lazyrt reads them itself (a copy)."""
    torch = pytest.importorskip("torch")
    base = torch.randn(6, 8).to(torch.bfloat16)
    for t in (base, base.T, base[1:5:2, ::3], torch.zeros(0, 3, dtype=torch.bfloat16),
              torch.tensor(2.5, dtype=torch.bfloat16)):
        want = t.float().numpy().astype(BF)
        _same_bits(lr.from_dlpack(t).numpy(), want)
        _same_bits(lr.asarray(t).numpy(), want)
    with pytest.raises(BufferError, match="bfloat16"):
        lr.from_dlpack(base, copy=False)


def test_cli_random_inputs_of_a_bfloat16_graph_are_floats():
    """``lazyrt kernels``/``bench`` feed a graph random inputs: bfloat16 ones are floats
    (its NumPy kind is "V"), and a bfloat16 runtime scalar a Python float."""
    from lazyrt import ops
    from lazyrt.cli.show import random_params

    class Node:
        def __init__(self, op, shape):
            self.op, self.dtype, self.shape = op, D.BFLOAT16, shape

    class Graph:
        nodes = [Node(ops.DATA, (50,)), Node(ops.SCALAR, ())]
        params = [0, 1]

    data, scalar = random_params(Graph())
    values = data.astype(np.float32)
    assert data.dtype == BF and not np.all(values == np.round(values))
    assert type(scalar) is float
