"""The C emitter's fast reduction forms, against NumPy.

* A full reduction over one axis splits each thread's chunk into
  ``FULL_STREAMS`` parts read side by side, plus a tail of up to 3 elements:
  every element must be counted once, at every size around the split and the
  parallel threshold, for every reduction kind.
* Row passes of float32/float16 sums add blocks of ``ROW_BLOCK`` in float
  (float64 rows stay in double), a compute-bound last pass prefetches the next
  row, and a row kernel whose store loop is cheap (softmax) streams its output.

Values are chosen so a lost or doubled element changes the result (small
integers: sums are exact), and NaN is placed at the first, last and tail
positions.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import lazyrt as lr
from conftest import assert_matches
from lazyrt.lowering.c import PARALLEL_THRESHOLD
from lazyrt.codegen.c_reduce import FULL_STREAMS, ROW_BLOCK

T = PARALLEL_THRESHOLD


@pytest.fixture
def backend():
    """Only ``c``: these tests pin the C emitter's loop forms, and the generic
    reduction suites (test_reductions.py) run every backend. On the
    interpreted Triton backend their 300001-element cases alone took 13
    minutes of CI."""
    chosen = os.environ.get("LAZYRT_TEST_BACKENDS")
    if "c" not in lr.available_backends() or (chosen and "c" not in chosen.split(",")):
        pytest.skip("the c backend is not under test")
    with lr.backend("c"):
        yield "c"
#: sizes around the stream split (tails of 0..3) and the parallel threshold
FULL_SIZES = sorted({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 4 * FULL_STREAMS + 3, 1000,
                     T - 1, T, T + 1, T + 2, T + 3, T + 5, 2 * T + 7, 300_001})
KINDS = ("sum", "prod", "max", "min", "any", "all")


def _values(n, dtype, kind, seed=0):
    """Data whose reduction is exact in every dtype: small integers, and for
    prod mostly ones with a few -1/2 so the product neither overflows nor
    underflows."""
    rng = np.random.default_rng(seed + n)
    if kind == "prod":
        v = np.ones(n)
        idx = rng.choice(n, size=min(n, 20), replace=False) if n else []
        v[idx] = rng.choice([-1.0, 2.0], size=len(idx))
    elif kind in ("any", "all"):
        v = np.ones(n) if kind == "all" else np.zeros(n)
    else:
        v = rng.integers(-8, 9, n).astype(np.float64)
    if dtype == np.bool_:
        return v != 0
    if np.dtype(dtype).kind == "u":
        v = np.abs(v)
    return v.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64,
                                   np.uint8, np.bool_])
@pytest.mark.parametrize("kind", KINDS)
def test_full_reduction_counts_every_element_once_at_every_size(backend, kind, dtype):
    for n in FULL_SIZES:
        if n == 0 and kind in ("max", "min"):
            continue  # NumPy raises: no identity
        a = _values(n, dtype, kind)
        if kind in ("any", "all") and n:
            a[n - 1 - (n % 3)] = not a[0] if dtype == np.bool_ else (0 if kind == "all" else 1)
        out = getattr(lr, kind)(lr.tensor(a))
        assert_matches(out, getattr(np, kind)(a), rtol=0, atol=0), (kind, n)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_full_max_min_find_the_extreme_at_any_position(backend, kind):
    """The extreme at a stream boundary or in the tail is not lost."""
    for n in (5, 7, T + 3, 4 * 1031 + 3, 300_001):
        base = np.zeros(n, np.float32)
        q = n // 2 // FULL_STREAMS  # a stream length on one of two threads
        for p in sorted({0, 1, n - 1, n - 2, n - 3, q - 1, q, 2 * q, n // 2, n // 2 - 1}):
            if not 0 <= p < n:
                continue
            a = base.copy()
            a[p] = 5.0 if kind == "max" else -5.0
            assert getattr(lr, kind)(lr.tensor(a)).item() == a[p], (n, p)


@pytest.mark.parametrize("n", [1, 5, 7, T + 3, 300_001])
def test_nan_anywhere_makes_full_max_min_sum_nan(backend, n):
    for p in sorted({0, n - 1, n - 2, n - 3, n // 2}):
        if not 0 <= p < n:
            continue
        a = np.arange(n, dtype=np.float32)
        a[p] = np.nan
        t = lr.tensor(a)
        for kind in ("max", "min", "sum", "prod"):
            assert np.isnan(getattr(lr, kind)(t).item()), (kind, n, p)


def test_float32_sum_of_2_24_values_is_accurate_to_1e_6():
    """Full float32 sums accumulate in double: 2^24 random values within 1e-6
    (relative) of the float64 sum."""
    if "c" not in lr.available_backends():
        pytest.skip("no c backend")
    x = np.random.default_rng(3).standard_normal(1 << 24, dtype=np.float32) + np.float32(0.5)
    exact = x.astype(np.float64).sum()
    with lr.backend("c"):
        got = float(lr.tensor(x).sum().item())
        sq = float((lr.tensor(x) * lr.tensor(x)).sum().item())
    assert abs(got - exact) <= 1e-6 * abs(exact)
    exact_sq = np.square(x.astype(np.float64)).sum()
    assert abs(sq - exact_sq) <= 1e-6 * exact_sq


@pytest.mark.parametrize("n", [3, 6, T + 1, 300_001])
def test_two_pass_and_fused_full_reductions(backend, n):
    """A full reduction that needs another (variance), two in one pass
    (max - min), a strided input and a 2-D transposed input."""
    a = np.random.default_rng(n).integers(-50, 50, n).astype(np.float32)
    t = lr.tensor(a)
    assert_matches(((t - t.mean()) ** 2).sum(), ((a - a.mean(dtype=np.float64)) ** 2).sum()
                   .astype(np.float32), rtol=1e-5)
    assert_matches(t.max() - t.min(), a.max() - a.min(), rtol=0, atol=0)
    assert_matches(t[::3].sum(), a[::3].sum(), rtol=0, atol=0)
    assert_matches(t[::-1][1:].max(), a[::-1][1:].max(), rtol=0, atol=0)
    m = a[: n - n % 3].reshape(3, -1)
    assert_matches(lr.tensor(m).T.sum(), m.T.sum(), rtol=0, atol=0)
    assert_matches(lr.tensor(m)[:, 1:].sum(), m[:, 1:].sum(), rtol=0, atol=0)


ROW_SIZES = (1, 2, ROW_BLOCK - 1, ROW_BLOCK, ROW_BLOCK + 1, 4097)


def _rows(cols, rows=5, seed=0):
    a = np.random.default_rng(seed + cols).standard_normal((rows, cols)).astype(np.float32) * 4
    a[1, 0] = np.nan                   # a NaN row
    a[2, cols - 1] = np.inf            # +inf: the row is NaN except where it is inf
    a[3, :] = -np.inf                  # all -inf: NaN row
    return a


def _softmax(a, axis=-1):
    a64 = a.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(a64 - a64.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(a.dtype)


def _log_softmax(a, axis=-1):
    a64 = a.astype(np.float64)
    with np.errstate(all="ignore"):
        m = a64.max(axis=axis, keepdims=True)
        s = a64 - m
        return (s - np.log(np.exp(s).sum(axis=axis, keepdims=True))).astype(a.dtype)


@pytest.mark.parametrize("cols", ROW_SIZES)
def test_softmax_and_log_softmax_rows_of_every_block_size(backend, cols):
    a = _rows(cols)
    t = lr.tensor(a)
    assert_matches(lr.nn.softmax(t, axis=-1), _softmax(a), rtol=1e-6, atol=1e-9)
    assert_matches(lr.nn.log_softmax(t, axis=-1), _log_softmax(a), rtol=1e-5, atol=1e-5)


def test_softmax_of_strided_and_transposed_rows(backend):
    """Rows that are not contiguous (a column slice, a transpose: the output's
    row is strided too and is stored directly)."""
    a = _rows(2 * ROW_BLOCK + 3, rows=7)
    t = lr.tensor(a)
    assert_matches(lr.nn.softmax(t[:, ::2], axis=-1), _softmax(a[:, ::2]), rtol=1e-6, atol=1e-9)
    b = np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-3.0)
    assert_matches(lr.nn.softmax(lr.tensor(b), axis=0), _softmax(b, axis=0),
                   rtol=1e-6, atol=1e-9)
    assert_matches(lr.nn.softmax(lr.tensor(b).T, axis=-1), _softmax(b.T), rtol=1e-6, atol=1e-9)


def test_large_softmax_and_log_softmax_stream_their_rows():
    """Outputs over LZ_STREAM_MIN_BYTES (8 MiB) are streamed out of L1 tiles;
    the row length 4097 leaves a partial tile and a partial block."""
    if "c" not in lr.available_backends():
        pytest.skip("no c backend")
    a = _rows(4097, rows=600)
    with lr.backend("c"):
        t = lr.tensor(a)
        sm = lr.nn.softmax(t, axis=-1).numpy()
        lsm = lr.nn.log_softmax(t, axis=-1).numpy()
    assert_matches(sm, _softmax(a), rtol=1e-6, atol=1e-9)
    assert_matches(lsm, _log_softmax(a), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_row_sums_add_every_block(backend, dtype):
    """Row sums (float32/float16 in float blocks, float64 in double) of small
    integers are exact at every row length."""
    for cols in ROW_SIZES + (3 * ROW_BLOCK,):
        a = np.random.default_rng(cols).integers(-4, 5, (3, cols)).astype(dtype)
        t = lr.tensor(a)
        assert_matches(t.sum(axis=-1), a.sum(axis=-1), rtol=0, atol=0)
        assert_matches((t * t).sum(axis=-1) - t.max(axis=-1), (a * a).sum(axis=-1) - a.max(axis=-1),
                       rtol=0, atol=0)


def test_float64_row_sums_stay_in_double(backend):
    """1e8 + 1 + 1 + ... is exact in double, not in float."""
    a = np.ones((2, 3 * ROW_BLOCK), np.float64)
    a[:, 0] = 1e8
    assert_matches(lr.tensor(a).sum(axis=-1), a.sum(axis=-1), rtol=0, atol=0)


def test_float32_row_sums_are_accurate(backend):
    """Blocks of ROW_BLOCK summed in float, blocks in double: long rows of
    random float32 within 1e-6 of the float64 sum."""
    x = np.random.default_rng(9).standard_normal((4, 1 << 16), dtype=np.float32) + 1
    exact = x.astype(np.float64).sum(axis=-1)
    got = lr.tensor(x).sum(axis=-1).numpy().astype(np.float64)
    np.testing.assert_allclose(got, exact, rtol=1e-6)


@pytest.mark.parametrize("cols", [1, ROW_BLOCK - 1, ROW_BLOCK + 1, 4097])
def test_layer_norm_rows(backend, cols):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((6, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    want = ((x64 - mu) / np.sqrt(var + 1e-5) * w + b).astype(np.float32)
    out = lr.nn.layer_norm(lr.tensor(x), (cols,), lr.tensor(w), lr.tensor(b))
    assert_matches(out, want, rtol=1e-4, atol=1e-4)


def _kernel_sources():
    from lazyrt.runtime import program_cache
    program = next(reversed(program_cache._programs.values()))
    return [k.source for k in program.record.kernels]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64, np.bool_])
def test_column_sums_add_every_row_and_lane(backend, dtype):
    """Sums over axis 0 of a row-major matrix (a bias's gradient) walk rows,
    COLUMN_LANES columns at once: exact for small integers at every row count
    around ROW_BLOCK and column count around the lane block, with a fused
    producer and a row value read per column."""
    from lazyrt.codegen.c_reduce import COLUMN_LANES
    for rows in (1, ROW_BLOCK - 1, ROW_BLOCK, ROW_BLOCK + 1, 3 * ROW_BLOCK + 5):
        for cols in (1, 3, COLUMN_LANES, COLUMN_LANES + 1, 2 * COLUMN_LANES + 7):
            rng = np.random.default_rng(rows * 1000 + cols)
            a = rng.integers(-4, 5, (rows, cols)).astype(dtype)
            b = rng.integers(-2, 3, cols).astype(dtype)
            t = lr.tensor(a)
            assert_matches(t.sum(axis=0), a.sum(axis=0), rtol=0, atol=0)
            if rows > 1 and cols > 1:  # (a size-1 axis is no column walk)
                assert any(f"c1 += {COLUMN_LANES}" in src for src in _kernel_sources())
            if dtype != np.bool_:
                want = (a * b).sum(axis=0) + b
                assert_matches((t * lr.tensor(b)).sum(axis=0) + lr.tensor(b), want,
                               rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", [(3, 5, 70), (2, ROW_BLOCK + 1, 65), (4, 1, 3), (2, 3, 4, 66)])
def test_column_sums_over_several_leading_axes(backend, dtype, shape):
    """A LayerNorm weight's gradient sums (batch, seq, features) over batch and
    seq: every leading axis a row loop around the lane block, with a value
    constant along the kept axis (the row's mean) read once per row; exact for
    small integers, NaN confined to its own column."""
    from lazyrt.codegen.c_reduce import COLUMN_LANES
    rng = np.random.default_rng(sum(shape))
    lead = tuple(range(len(shape) - 1))
    # a slice along axis 1 keeps the leading axes from merging into one
    wide = rng.integers(-4, 5, shape[:1] + (shape[1] + 1,) + shape[2:]).astype(dtype)
    a = wide[:, 1:]
    g = rng.integers(-2, 3, shape).astype(dtype)
    mean = rng.integers(-3, 4, shape[:-1] + (1,)).astype(dtype)
    t, tg, tm = lr.tensor(wide)[:, 1:], lr.tensor(g), lr.tensor(mean)
    assert_matches(t.sum(axis=lead), a.sum(axis=lead), rtol=0, atol=0)
    assert_matches(((t - tm) * tg).sum(axis=lead), ((a - mean) * g).sum(axis=lead),
                   rtol=0, atol=0)
    if shape[-1] > 1 and shape[1] > 1:
        assert any(re.search(rf"c\d \+= {COLUMN_LANES}\)", src) for src in _kernel_sources())
    if dtype != np.int64:
        wide[(0, 1) + (0,) * (len(lead) - 2) + (2,)] = np.nan  # (a row inside the slice)
        assert_matches(lr.tensor(wide)[:, 1:].sum(axis=lead), wide[:, 1:].sum(axis=lead),
                       rtol=0, atol=0)


def test_column_sums_of_nan_inf_and_views(backend):
    """NaN and inf reach their own column only; a strided (every other row) view
    and a wide float32 sum stay accurate."""
    a = np.arange(300 * 70, dtype=np.float32).reshape(300, 70) % 7 - 3
    a[5, 2], a[200, 69], a[0, 64] = np.nan, np.inf, -np.inf
    assert_matches(lr.tensor(a).sum(axis=0), a.sum(axis=0), rtol=0, atol=0)
    assert_matches(lr.tensor(a)[::2].sum(axis=0), a[::2].sum(axis=0), rtol=0, atol=0)
    x = np.random.default_rng(3).standard_normal((1 << 14, 130), dtype=np.float32) + 1
    got = lr.tensor(x).sum(axis=0).numpy().astype(np.float64)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=0), rtol=1e-6)


def _run_spec(spec, inputs, outputs):
    """Compile the C emitter's source for ``spec`` and run it on NumPy arrays
    (buffers in the order inputs, outputs), as a program launches a kernel."""
    import ctypes
    from lazyrt.backends.c import CBackend
    from lazyrt.codegen.c import emit_c
    kernel = emit_c(spec)
    fn = getattr(CBackend().compiler.load(kernel.name, kernel.source), kernel.symbol)
    arrays = list(inputs) + list(outputs)
    bufs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    ia = (ctypes.c_int64 * max(1, len(kernel.iargs)))(*kernel.iargs)
    fn(bufs, ia, None)
    return kernel.source


@pytest.mark.parametrize("rows,cols", [(1, 2), (5, 70), (ROW_BLOCK + 3, 64), (300, 130)])
def test_column_walk_stores_element_outputs_as_it_goes(backend, rows, cols):
    """A column sum that also stores an element output needing no sum (a
    LayerNorm weight gradient beside the embedding sum it stores) keeps the
    column walk and stores each element once, in the lane loop: squares and
    their column sums equal NumPy's, every element written."""
    from lazyrt import ops
    from lazyrt import dtypes as D
    from lazyrt.planner.kernel_ir import IndexMap, KernelInput, KernelOutput, KernelSpec, Stmt
    a = np.random.default_rng(rows + cols).integers(-9, 10, (rows, cols)).astype(np.float32)
    body = (Stmt(0, "load", D.FLOAT32, (), 0), Stmt(1, ops.MUL, D.FLOAT32, (0, 0)),
            Stmt(2, "reduce", D.FLOAT32, (1,), "sum", D.FLOAT64))
    spec = KernelSpec("k0_fused_mul_sum", (rows, cols), (0,),
                      (KernelInput(0, D.FLOAT32, IndexMap(0, (cols, 1))),), (), body,
                      (KernelOutput(1, D.FLOAT32, IndexMap(0, (0, 1)), 2),
                       KernelOutput(2, D.FLOAT32, IndexMap(0, (cols, 1)), 1)))
    sums, squares = np.full(cols, np.nan, np.float32), np.full((rows, cols), np.nan, np.float32)
    source = _run_spec(spec, [a], [sums, squares])
    np.testing.assert_array_equal(squares, a * a)
    np.testing.assert_array_equal(sums, (a * a).sum(axis=0))
    if rows > 1:
        assert re.search(r"part\d+\[j\] \+= v\d+;\n\s+out1\[", source), source
