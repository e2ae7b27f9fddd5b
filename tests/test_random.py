"""Counter-based random numbers (issue 11): Philox4x32-10 keyed by runtime scalars.

The specification: the op table's Philox matches the published Random123
known-answer vectors; ``lr.random.uniform`` gives exactly the words of the
documented layout (computed here straight from the reference block function),
bit for bit on every backend, for 0-d, size-0, odd and large shapes, float32
and float64; a new seed or offset changes the values and compiles nothing;
the values are uniform (fixed seeds: deterministic statistics, never flaky);
dropout is one kernel with its consumers.

``numpy.random.Philox`` is Philox4x64 (64-bit words, a different generator), so
it cannot serve as an oracle: the Random123 vectors do.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import dtypes as D
from lazyrt import _recorder_pointwise as PW
from lazyrt import ops
from lazyrt._capture import capture
from lazyrt.errors import DTypeError
from lazyrt.graph import Graph
from lazyrt.planner import plan

# Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key, output
RANDOM123_KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

SHAPES = [(), (0,), (3, 0, 2), (1,), (1, 1), (7,), (5, 3), (2, 3, 5), (300, 257)]


def stream_words(seed: int, start: int, count: int) -> np.ndarray:
    """Words start .. start+count-1 of seed's stream, from the block function
    alone: word p is output p % 4 of block p // 4 (counter (b_lo, b_hi, 0, 0))."""
    s = seed % 2**64
    key = (s & 0xFFFFFFFF, s >> 32)
    first, last = start // 4, (start + count + 3) // 4
    blocks = np.arange(first, max(last, first + 1), dtype=np.uint64)
    words = ops.philox4x32_10((blocks & np.uint64(0xFFFFFFFF), blocks >> np.uint64(32), 0, 0),
                              key)
    flat = np.stack(words, axis=-1).reshape(-1)  # block by block, lanes in order
    return flat[start - 4 * first: start - 4 * first + count]


def expected_uniform(shape, seed, offset, dtype="float32") -> np.ndarray:
    n = math.prod(shape)
    if np.dtype(dtype) == np.float32:
        w = stream_words(seed, offset, n)
        return ((w >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)).reshape(shape)
    w = stream_words(seed, offset, 2 * n)
    high, low = w[0::2] >> np.uint64(5), w[1::2] >> np.uint64(6)
    bits = high * np.uint64(2 ** 26) + low
    return (bits.astype(np.float64) * 2.0 ** -53).reshape(shape)


def plan_of(*outs):
    return plan(Graph.from_capture(capture([t._node for t in outs])))


# --- the generator --------------------------------------------------------------------

@pytest.mark.parametrize("counter,key,want", RANDOM123_KAT)
def test_philox_matches_the_random123_known_answer_vectors(counter, key, want):
    got = ops.philox4x32_10(counter, key)
    assert tuple(int(w) for w in got) == want
    # vectorized: the same answer in every element of a batch
    batch = ops.philox4x32_10([np.full(3, c, np.uint64) for c in counter], key)
    assert all((np.asarray(b) == w).all() for b, w in zip(batch, want))


def test_the_philox_op_reads_word_p_from_lane_p_mod_4_of_block_p_div_4():
    seed = 0x299F31D0A4093822  # Random123's third key, as one 64-bit seed
    positions = np.arange(0, 24, dtype=np.int64)
    got = ops.reference(ops.PHILOX, [np.int64(seed), positions], None)
    assert got.dtype == np.int64 and ((got >= 0) & (got < 2**32)).all()
    assert np.array_equal(got, stream_words(seed, 0, 24).astype(np.int64))
    # a far block: counter (0x243f6a88, 0x05a308d3, 0, 0) holds words 4b .. 4b + 3
    block = 0x05A308D3243F6A88
    far = ops.reference(ops.PHILOX, [np.int64(seed), 4 * block + np.arange(4)], None)
    want = ops.philox4x32_10((0x243F6A88, 0x05A308D3, 0, 0), (0xA4093822, 0x299F31D0))
    assert [int(w) for w in far] == [int(w) for w in want]


# --- bit-identical values on every backend ---------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_gives_the_documented_bits_on_every_backend(backend, shape, dtype):
    if backend == "triton" and math.prod(shape) > 4096 and dtype == "float64":
        shape = (33, 257)  # the interpreter: keep the float64 case (two words) quick
    got = lr.random.uniform(shape, seed=1234, offset=40, dtype=dtype).numpy()
    want = expected_uniform(shape, 1234, 40, dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    assert np.array_equal(got, want)
    assert ((got >= 0) & (got < 1)).all()


def test_a_draw_fused_with_other_ops_gives_the_same_bits(backend):
    x = np.linspace(-1, 1, 6 * 7, dtype=np.float32).reshape(6, 7)
    u = lr.random.uniform((6, 7), seed=5, offset=3)
    got = (u * 2.0 + lr.tensor(x)).T.numpy()
    assert np.array_equal(got, (expected_uniform((6, 7), 5, 3) * np.float32(2) + x).T)


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -1,
                                  -2**63])
def test_every_64_bit_seed_keys_the_stream_mod_2_64(backend, seed):
    got = lr.random.uniform((4, 3), seed=seed, offset=2**40 + 1).numpy()
    assert np.array_equal(got, expected_uniform((4, 3), seed, 2**40 + 1))


def test_seed_and_offset_may_be_0d_integer_tensors(backend):
    seed, offset = lr.asarray(np.int64(77)), lr.asarray(np.int32(9))
    got = lr.random.uniform((3, 4), seed=seed, offset=offset, dtype="float64").numpy()
    assert np.array_equal(got, expected_uniform((3, 4), 77, 9, "float64"))


def test_positions_are_summed_in_int32_where_they_fit_else_int64(backend, monkeypatch):
    from lazyrt.api import random as random_api
    small = plan_of(lr.random.uniform((6, 5), seed=1))
    assert {i.dtype for i in small.kernels[0].inputs} == {D.INT32}
    lr.sync()
    monkeypatch.setattr(random_api, "NARROW_POSITIONS", 0)  # the path of 2^31 words or more
    for dtype in ("float32", "float64"):
        u = lr.random.uniform((6, 5), seed=1, offset=3, dtype=dtype)
        assert {i.dtype for i in plan_of(u).kernels[0].inputs} == {D.INT64}
        assert np.array_equal(u.numpy(), expected_uniform((6, 5), 1, 3, dtype))


# --- runtime scalars: no recompile ------------------------------------------------------

def test_a_new_seed_or_offset_changes_values_and_compiles_nothing(backend):
    x = lr.tensor(np.ones((8, 16), np.float32))
    first = lr.nn.dropout(x, 0.5, seed=1, offset=0).numpy()
    before = lr.metrics.snapshot()["compiles"]
    seen = {first.tobytes()}
    for seed, offset in [(2, 0), (1, 128), (3, 4096), (2**63 + 5, 7)]:
        out = lr.nn.dropout(x, 0.5, seed=seed, offset=offset).numpy()
        assert out.tobytes() not in seen
        seen.add(out.tobytes())
        want = np.where(expected_uniform((8, 16), seed, offset) >= np.float32(0.5), 2.0, 0.0)
        assert np.array_equal(out, want.astype(np.float32))
    assert lr.metrics.snapshot()["compiles"] == before


def test_successive_offsets_continue_one_stream(backend):
    a = lr.random.uniform((10,), seed=9, offset=0).numpy()
    nxt = lr.random.words((10,))
    assert nxt == 10 and lr.random.words((10,), "float64") == 20
    assert lr.random.words((10,), normal=True) == 20
    b = lr.random.uniform((6,), seed=9, offset=nxt).numpy()
    whole = lr.random.uniform((16,), seed=9, offset=0).numpy()
    assert np.array_equal(np.concatenate([a, b]), whole)
    c = lr.random.uniform((2, 3), seed=9, offset=4, dtype="float64").numpy()  # 2 words each
    assert np.array_equal(c.reshape(-1),
                          lr.random.uniform((8,), seed=9, offset=0, dtype="float64").numpy()[2:])


# --- statistics (fixed seeds: deterministic) ---------------------------------------------

def _ks_uniform(u: np.ndarray) -> float:
    """Kolmogorov–Smirnov distance of ``u`` from the uniform distribution on [0, 1)."""
    s = np.sort(u.astype(np.float64))
    n = s.size
    return float(max((np.arange(1, n + 1) / n - s).max(), (s - np.arange(n) / n).max()))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_values_pass_mean_variance_and_kolmogorov_smirnov(dtype):
    n = 1 << 18
    for seed in (0, 1, 2**40 + 3):
        u = lr.random.uniform((n,), seed=seed, offset=0, dtype=dtype).numpy()
        se = math.sqrt(1 / 12 / n)
        assert abs(u.mean() - 0.5) < 5 * se
        assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / n)
        assert _ks_uniform(u) < 1.95 / math.sqrt(n)  # the 0.1% critical value
        # neighbouring elements (lanes of one block, and across blocks) are uncorrelated
        assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(n)
        assert abs(np.corrcoef(u[:-4], u[4:])[0, 1]) < 5 / math.sqrt(n)
    # nearby seeds give unrelated streams
    a = lr.random.uniform((n,), seed=100, dtype=dtype).numpy()
    b = lr.random.uniform((n,), seed=101, dtype=dtype).numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(n)


def test_float32_uniforms_use_all_24_bits_and_float64_all_53():
    u = lr.random.uniform((1 << 16,), seed=3).numpy()
    scaled = u.astype(np.float64) * 2**24
    assert np.array_equal(scaled, np.floor(scaled)) and (scaled % 2 == 1).any()
    d = lr.random.uniform((1 << 12,), seed=3, dtype="float64").numpy()
    scaled = d * 2.0**53
    assert np.array_equal(scaled, np.floor(scaled)) and (scaled % 2 == 1).any()
    assert len(np.unique(d)) == d.size


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_is_box_muller_on_two_draws_on_every_backend(backend, dtype):
    shape = (40, 33)
    z = lr.random.normal(shape, seed=11, offset=5, dtype=dtype).numpy()
    u1 = expected_uniform(shape, 11, 5, dtype).astype(np.float64)
    u2 = expected_uniform(shape, 11, 5 + lr.random.words(shape, dtype), dtype).astype(np.float64)
    want = np.sqrt(-2 * np.log(1 - u1)) * np.cos(2 * np.pi * u2)
    assert z.dtype == np.dtype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12  # each backend's log and cos
    np.testing.assert_allclose(z, want, rtol=tol, atol=tol)


def test_normal_values_have_mean_0_variance_1():
    n = 1 << 18
    z = lr.random.normal((n,), seed=2024, dtype="float64").numpy()
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((np.abs(z) < 1.959963984540054).mean() - 0.95) < 5 * math.sqrt(0.95 * 0.05 / n)


# --- dropout ----------------------------------------------------------------------------

def test_dropout_and_its_consumers_are_one_kernel():
    x = lr.tensor(np.ones((64, 128), np.float32))
    y = lr.nn.dropout(x * 3.0, 0.1, seed=3, offset=0) + 1.0
    p = plan_of(y)
    assert len(p.kernels) == 1
    (k,) = p.kernels
    assert "philox" in [getattr(st.op, "name", st.op) for st in k.body]
    # the only full-size input is x; the stream positions come from one small leaf per axis
    full = [i for i in k.inputs if all(s != 0 for s in i.index.strides)]
    assert len(full) == 1 and full[0].dtype == D.FLOAT32 and len(k.inputs) == 3
    lr.sync()


def test_dropout_drops_p_of_the_elements_and_scales_the_rest(backend):
    shape = (64, 200)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for p in (0.1, 0.5, 0.9):
        got = lr.nn.dropout(lr.tensor(x), p, seed=42, offset=1000).numpy()
        keep = expected_uniform(shape, 42, 1000) >= np.float32(p)
        assert np.array_equal(got, np.where(keep, x * np.float32(1 / (1 - p)), 0))
        n = x.size
        assert abs((got == 0).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
        mask = lr.random.dropout_mask(shape, p, seed=42, offset=1000).numpy()
        assert np.array_equal(mask, keep)  # the backward recomputes the same mask


def test_dropout_edge_cases(backend):
    x = lr.tensor(np.arange(6, dtype=np.float64).reshape(2, 3))
    assert lr.nn.dropout(x, 0.0, seed=1) is x
    assert lr.nn.dropout(x, 0.7, seed=1, training=False) is x
    assert np.array_equal(lr.nn.dropout(x, 1.0, seed=1).numpy(), np.zeros((2, 3)))
    empty = lr.nn.dropout(lr.tensor(np.ones((0, 3), np.float32)), 0.5, seed=1).numpy()
    assert empty.shape == (0, 3)


# --- errors -----------------------------------------------------------------------------

def test_bad_arguments_fail_naming_the_function():
    with pytest.raises(TypeError, match=r"random\.uniform: dtype must be float32 or float64"):
        lr.random.uniform((2,), seed=1, dtype="int32")
    with pytest.raises(TypeError, match=r"random\.uniform: seed must be a Python int"):
        lr.random.uniform((2,), seed=1.5)
    with pytest.raises(TypeError, match=r"random\.normal: offset must be .* not a float32"):
        lr.random.normal((2,), seed=1, offset=lr.asarray(np.float32(1)))
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        lr.random.uniform((2,), seed=lr.asarray(np.array([1, 2])))
    with pytest.raises(ValueError, match=r"offset -1 is outside"):
        lr.random.uniform((2,), seed=1, offset=-1)
    with pytest.raises(ValueError, match=r"seed 18446744073709551616 is outside"):
        lr.random.uniform((2,), seed=2**64)
    with pytest.raises(ValueError, match=r"nn\.dropout: p must be a probability"):
        lr.nn.dropout(lr.tensor(np.ones(3)), 1.5, seed=1)
    with pytest.raises(DTypeError, match="dropout"):
        lr.nn.dropout(lr.tensor(np.ones(3, np.int64)), 0.5, seed=1)
    floats = lr.tensor(np.ones(3, np.float32))
    with pytest.raises(DTypeError, match="philox: not defined for float32"):
        PW.binary(ops.PHILOX.id, floats, floats)  # the op itself takes int64 only


# --- integers ---------------------------------------------------------------------------

def expected_integers(shape, low, high, seed, offset, dtype="int64") -> np.ndarray:
    """The documented layout: r = (a >> 1) * 2^32 + b from words offset + 2i, + 1."""
    w = stream_words(seed, offset, 2 * math.prod(shape))
    r = ((w[0::2] >> np.uint64(1)) << np.uint64(32)) + w[1::2]
    span = high - low
    values = [low + (int(v) % span) for v in r]     # Python ints: no int64 overflow
    return np.array(values, np.int64).reshape(shape).astype(dtype)


@pytest.mark.parametrize("shape", [(), (0,), (7,), (5, 3), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("low,high,dtype", [
    (0, 10, "int64"), (-5, 3, "int32"), (0, 2, "bool"), (0, 256, "uint8"), (3, 1000, "float32"),
    (-2**62, 2**62, "int64"), (0, 2**63, "int64"), (-2**63, 0, "int64"), (0, 2**53 + 1, "float64")])
def test_integers_give_the_documented_values_on_every_backend(backend, shape, low, high, dtype):
    got = lr.random.integers(shape, low, high, seed=2024, offset=6, dtype=dtype).numpy()
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    assert np.array_equal(got, expected_integers(shape, low, high, 2024, 6, dtype))


def test_new_integer_bounds_change_values_and_compile_nothing(backend):
    lr.random.integers((6, 4), 0, 10, seed=1).numpy()
    before = lr.metrics.snapshot()["compiles"]
    for low, high, seed in [(0, 10, 2), (5, 17, 1), (-3, 1000, 1), (0, 2**40 + 3, 9)]:
        got = lr.random.integers((6, 4), low, high, seed=seed).numpy()
        assert np.array_equal(got, expected_integers((6, 4), low, high, seed, 0))
    assert lr.metrics.snapshot()["compiles"] == before
    assert lr.random.words((6, 4), "int64") == 48


def test_integers_are_uniform_over_small_and_large_spans():
    n = 1 << 18
    for low, high in [(0, 10), (-7, 6), (0, 1000)]:
        x = lr.random.integers((n,), low, high, seed=11).numpy()
        assert x.min() == low and x.max() == high - 1
        counts = np.bincount(x - low, minlength=high - low)
        expect = n / (high - low)
        chi2 = float(((counts - expect) ** 2 / expect).sum())
        dof = high - low - 1
        assert chi2 < dof + 5 * math.sqrt(2 * dof)   # far past the 0.1% tail
    # a span over 2^32: the value's high bits are uniform too
    big = lr.random.integers((n,), 0, 3 * 2**40, seed=5).numpy()
    top = np.bincount(big // 2**40, minlength=3)
    assert abs(top - n / 3).max() < 5 * math.sqrt(n / 3)
    u = (big / (3 * 2**40)).astype(np.float64)
    assert _ks_uniform(u) < 1.95 / math.sqrt(n)


def test_bad_integer_draws_fail_naming_the_function():
    with pytest.raises(ValueError, match=r"random\.integers: needs low < high"):
        lr.random.integers((2,), 5, 5, seed=1)
    with pytest.raises(ValueError, match=r"high - low <= 2\^63"):
        lr.random.integers((2,), -2**63, 2**63, seed=1)
    with pytest.raises(ValueError, match=r"\[0, 300\) does not fit in uint8"):
        lr.random.integers((2,), 0, 300, seed=1, dtype="uint8")
    with pytest.raises(TypeError, match=r"random\.integers: high must be a Python int"):
        lr.random.integers((2,), 0, 2.5, seed=1)
    with pytest.raises(ValueError, match=r"random\.integers: offset -2 is outside"):
        lr.random.integers((2,), 0, 3, seed=1, offset=-2)


# --- the GPU target ---------------------------------------------------------------------

@pytest.mark.skipif("triton" not in lr.available_backends(), reason="no triton backend")
def test_dropout_compiles_for_sm90(monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    from lazyrt import runtime
    from lazyrt.backends import triton_aot as A
    from lazyrt.backends.triton import TritonBackend
    monkeypatch.setenv(A.ENV, "cuda:90")
    be = TritonBackend()
    be.salt = lr.backends.get("triton").salt
    lr.sync()
    x = np.random.default_rng(1).standard_normal((16, 40)).astype(np.float32)
    out = lr.nn.dropout(lr.tensor(x), 0.25, seed=2**63 + 9, offset=12) * 2.0
    f64 = lr.random.uniform((5, 7), seed=3, offset=1, dtype="float64")
    cap = runtime.capture([out._node, f64._node], be.salt)
    program = be.compile(Graph.from_capture(cap))
    kernels = [k for k in program.record.kernels if k.language == "triton"]
    assert kernels
    for k in kernels:
        (sm90,) = [r for r in k.resources if r.target == "sm_90"]
        assert 0 < sm90.regs <= 255 and sm90.spills == 0
    got = program.run(cap.values)
    keep = expected_uniform((16, 40), 2**63 + 9, 12) >= np.float32(0.25)
    assert np.array_equal(np.asarray(got[0]), np.where(keep, x * np.float32(4 / 3), 0) * 2)
    assert np.array_equal(np.asarray(got[1]), expected_uniform((5, 7), 3, 1, "float64"))
    del out, f64, cap
    lr.sync()


@pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="needs a GPU")
def test_a_large_draw_on_the_gpu_matches_the_reference():
    with lr.backend("triton"):
        got = lr.random.uniform((1 << 20,), seed=7, offset=3).numpy()
    assert np.array_equal(got, expected_uniform((1 << 20,), 7, 3))
