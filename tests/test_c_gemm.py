"""The c backend's matmul: OpenBLAS called once per lazyrt OpenMP thread
(lazyrt.backends.c_gemm), checked against NumPy on the shapes, views and dtypes
that take that path, the ones that fall back to ``np.matmul``, and OpenBLAS's
thread count, which must come back as it was; through every instance it may
call (NumPy's own, a private copy running the other kernel family, MKL where
installed), and how lazyrt.backends.c_blas chooses between OpenBLAS's families
(MKL's part of the choice: tests/test_c_blas_mkl.py)."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import lazyrt as lr
from lazyrt.backends import c_blas, c_gemm, c_mkl
from lazyrt.runtime import program_cache

pytestmark = [
    pytest.mark.skipif("c" not in lr.available_backends(),
                       reason="no C compiler: the c backend is unavailable"),
    pytest.mark.skipif(c_gemm.numpy_openblas() is None,
                       reason="NumPy's BLAS is not an ILP64 OpenBLAS"),
]


@pytest.fixture(params=["numpy", "private", "mkl"])
def blas_instance(request, monkeypatch):
    """Run the test through NumPy's OpenBLAS instance, then through a private
    copy running the other kernel family this CPU can run (skipped where none),
    then through MKL (skipped where it is not installed)."""
    monkeypatch.delenv("LAZYRT_BLAS", raising=False)
    monkeypatch.delenv("LAZYRT_BLAS_CORETYPE", raising=False)
    if request.param == "numpy":
        monkeypatch.setenv("LAZYRT_BLAS_CORETYPE", "numpy")
    elif request.param == "mkl":
        if c_mkl.mkl_path() is None:
            pytest.skip("MKL is not installed (pip install mkl)")
        monkeypatch.setenv("LAZYRT_BLAS", "mkl")
    else:
        own = c_blas._numpy_instance(c_gemm.numpy_openblas())
        other = c_blas.other_family(own.core, c_blas.cpu_flags())
        if other is None:
            pytest.skip(f"OpenBLAS runs {own.core} here and no other kernel family")
        monkeypatch.setenv("LAZYRT_BLAS_CORETYPE", other)
    chosen = c_blas.gemm_library(c_gemm.numpy_openblas())
    assert chosen.private == (request.param != "numpy"), chosen.why
    assert (chosen.blas == "MKL") == (request.param == "mkl"), chosen.why
    program_cache.clear()  # compiled launches hold the library's addresses
    yield chosen
    program_cache.clear()


def _launch_names():
    program = next(reversed(program_cache._programs.values()))
    return [launch.name for launch in program.launches]


def _blas_threads():
    lib = c_gemm.numpy_openblas()[0]
    return getattr(lib, c_blas.symbol(lib, "openblas_get_num_threads"))()


def _operand(rng, shape, dtype, layout):
    """A (rows, cols) operand laid out as ``layout``: contiguous, transposed
    (column-major), or a strided slice of a bigger array (offset, wide rows)."""
    r, c = shape
    if layout == "transposed":
        return np.ascontiguousarray(rng.standard_normal((c, r)).astype(dtype)).T
    if layout == "sliced":
        return rng.standard_normal((r + 3, c + 5)).astype(dtype)[2:2 + r, 3:3 + c]
    return rng.standard_normal((r, c)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (2, 3, 1), (1, 7, 300), (70, 65, 3), (3, 90, 130),
                                 (129, 257, 65), (300, 40, 301)])
@pytest.mark.parametrize("layouts", [("contiguous", "contiguous"), ("transposed", "sliced"),
                                     ("sliced", "transposed")])
def test_blas_matmul_matches_numpy(dtype, mkn, layouts, blas_instance):
    """Small products run on the calling thread, big ones split rows (M >= N)
    or columns (N > M) across threads; every layout BLAS reads in place."""
    m, k, n = mkn
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = _operand(rng, (m, k), dtype, layouts[0])
    b = _operand(rng, (k, n), dtype, layouts[1])
    with lr.backend("c"):
        out = (lr.tensor(a) @ lr.tensor(b)).numpy()
        assert "matmul_blas" in _launch_names()
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * np.sqrt(k))
    assert out.dtype == dtype


@pytest.mark.parametrize("case", ["int64", "float16", "five_batch_dims", "broadcast_rows",
                                  "empty"])
def test_matmuls_blas_cannot_take_fall_back_to_numpy(case):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((30, 50)).astype(np.float32)
    if case == "int64":
        a, b = (a * 10).astype(np.int64), (b * 10).astype(np.int64)
    elif case == "float16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    elif case == "five_batch_dims":
        a, b = a[:8].reshape(1, 2, 1, 2, 2, 1, 30), b.reshape(1, 1, 1, 1, 1, 30, 50)
    elif case == "broadcast_rows":
        a = np.broadcast_to(a[:1], a.shape)  # recorded lazily below: a stride-0 view
    else:
        a = a[:, :0]
        b = b[:0]
    with lr.backend("c"):
        ta = lr.broadcast_to(lr.tensor(a[:1]), a.shape) if case == "broadcast_rows" else \
            lr.tensor(a)
        out = (ta @ lr.tensor(b)).numpy()
        assert "matmul_blas" not in _launch_names()
    tol = 2e-2 if case == "float16" else 1e-4
    np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [
    ((3, 20, 30), (3, 30, 10)),            # fewer products than... or as many as threads
    ((1, 70, 33), (1, 33, 90)),            # one product, split by rows
    ((5, 1, 9, 7), (1, 4, 7, 6)),          # both broadcast along a batch dim
    ((2, 3, 65, 64), (64, 70)),            # a 2-D operand under a batched one
    ((40, 8), (2, 2, 8, 300)),             # and the other way round, column split
    ((2, 3, 1, 2, 4, 5), (3, 2, 2, 5, 3)),  # four batch dims
])
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_batched_blas_matmul_matches_numpy(dtype, shapes, layout, blas_instance):
    """Batched and broadcast products (attention's bmm) take the BLAS launch too,
    from permuted views (batch strides not collapsible) as well as contiguous."""
    rng = np.random.default_rng(len(shapes[0]) * 31 + shapes[1][-1])

    def operand(shape):
        if layout == "permuted" and len(shape) >= 3:  # a (B, H, S, D)-from-(B, S, H, D) view
            base = rng.standard_normal(shape[1:2] + shape[:1] + shape[2:]).astype(dtype)
            return np.swapaxes(base, 0, 1)
        return rng.standard_normal(shape).astype(dtype)
    a, b = operand(shapes[0]), operand(shapes[1])
    with lr.backend("c"):
        la, lb = lr.tensor(np.ascontiguousarray(np.swapaxes(a, 0, 1)) if a.ndim >= 3
                           and layout == "permuted" else a), lr.tensor(b)
        if a.ndim >= 3 and layout == "permuted":
            la = lr.swapaxes(la, 0, 1)
        out = (la @ lb).numpy()
        assert "matmul_blas" in _launch_names()
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * 10)
    assert out.dtype == dtype and out.shape == expected.shape


def test_blas_operand_rules():
    from lazyrt.planner.strided import Strided
    assert c_gemm._blas_operand(Strided((3, 4), (4, 1), 2)) == (2, 0, 4)
    assert c_gemm._blas_operand(Strided((3, 4), (1, 3), 0)) == (0, 1, 3)
    assert c_gemm._blas_operand(Strided((3, 4), (9, 1), 0)) == (0, 0, 9)
    assert c_gemm._blas_operand(Strided((1, 4), (0, 1), 0)) == (0, 0, 4)  # one row: any stride
    assert c_gemm._blas_operand(Strided((3, 4), (0, 1), 0)) is None  # broadcast rows
    assert c_gemm._blas_operand(Strided((3, 4), (2, 1), 0)) is None  # rows overlap
    assert c_gemm._blas_operand(Strided((3, 4), (8, 2), 0)) is None  # no unit stride
    assert c_gemm._blas_operand(Strided((3, 4), (-4, 1), 8)) is None  # reversed rows


def test_blas_thread_count_is_restored_even_with_concurrent_matmuls(blas_instance):
    """Each lz_gemm on NumPy's instance sets it to one thread and the last one
    out restores it; a private instance leaves NumPy's alone. Four Python threads
    running big matmuls at once must leave it as it was, with right values."""
    before = _blas_threads()
    rng = np.random.default_rng(1)
    mats = [rng.standard_normal((160, 160)).astype(np.float32) for _ in range(4)]
    errors = []

    def work(m):
        try:
            with lr.backend("c"):
                for _ in range(10):
                    out = (lr.tensor(m) @ lr.tensor(m) + 1.0).numpy()
                    np.testing.assert_allclose(out, m @ m + 1.0, rtol=1e-4, atol=1e-3)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in mats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _blas_threads() == before


# --- which OpenBLAS (lazyrt.backends.c_blas) ------------------------------------


def test_other_family_is_the_other_vector_width():
    avx512 = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                        "avx512cd"})
    assert c_blas.other_family("SkylakeX", avx512) == "Haswell"
    assert c_blas.other_family("Cooperlake", avx512) == "Haswell"
    assert c_blas.other_family("Haswell", avx512) == "SkylakeX"
    assert c_blas.other_family("Zen", avx512) == "SkylakeX"
    assert c_blas.other_family("Zen", frozenset({"avx2", "fma", "avx512f"})) is None
    assert c_blas.other_family("Haswell", frozenset({"avx2", "fma"})) is None
    assert c_blas.other_family("Sandybridge", avx512) is None


@pytest.fixture
def fresh_choice(tmp_path, monkeypatch):
    """An empty cache, no override and no MKL: what a first process on a host
    without MKL sees."""
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(c_mkl, "mkl_path", lambda: None)
    monkeypatch.delenv("LAZYRT_BLAS", raising=False)
    monkeypatch.delenv("LAZYRT_BLAS_CORETYPE", raising=False)
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    return c_blas._chosen.__wrapped__, c_gemm.numpy_openblas()


def test_the_measurement_is_made_once_per_host_and_remembered(fresh_choice, monkeypatch):
    _, blas = fresh_choice
    probes = []

    def probe(path, core, symbols):
        probes.append(core)  # each kind: the best of the two rounds
        return {kind: {"": 100.0, "Other": 90.0}[core] + i + len(probes)
                for i, kind in enumerate(c_blas.KINDS)}
    monkeypatch.setattr(c_blas, "_probe", probe)
    expected = {kind: {"": 103.0 + i, "Other": 94.0 + i} for i, kind in enumerate(c_blas.KINDS)}
    assert c_blas._measured(blas[0], "Other") == expected
    assert probes == ["", "Other", "", "Other"]  # two alternating rounds

    def no_probe(*args):
        raise AssertionError("measured again")
    monkeypatch.setattr(c_blas, "_probe", no_probe)
    assert c_blas._measured(blas[0], "Other") == expected


def test_a_measurement_of_another_shape_is_made_again(fresh_choice, monkeypatch):
    """A remembered file from a lazyrt that measured one kind only is measured over."""
    _, blas = fresh_choice
    c_blas._folder().write(f"choice-{c_blas._library_key(blas[0]._name)}.json",
                           b'{"": 100.0, "Other": 90.0}')
    monkeypatch.setattr(c_blas, "_probe", lambda path, core, symbols: dict.fromkeys(
        c_blas.KINDS, 50.0))
    assert c_blas._measured(blas[0], "Other") == dict.fromkeys(
        c_blas.KINDS, {"": 50.0, "Other": 50.0})


def test_product_kinds():
    assert c_blas.product_kind(512, 512, 512, 0, 0) == "large"
    assert c_blas.product_kind(100, 100, 100, 0, 0) == "small nn"  # exactly SMALL_MNK
    assert c_blas.product_kind(100, 100, 101, 1, 0) == "large"
    assert c_blas.product_kind(64, 64, 32, 0, 1) == "small nt"
    assert c_blas.product_kind(64, 64, 32, 1, 0) == "small tn"
    assert c_blas.product_kind(1, 1, 1, 1, 1) == "small tt"
    assert set(c_blas._PROBED) == set(c_blas.KINDS)


@pytest.mark.parametrize("speeds,private", [((100.0, 104.0), True), ((100.0, 102.0), False),
                                            ((100.0, 90.0), False)])
def test_the_other_family_must_win_by_the_margin(fresh_choice, monkeypatch, speeds, private):
    choose, blas = fresh_choice
    own = c_blas._numpy_instance(blas)
    other = c_blas.other_family(own.core, c_blas.cpu_flags())
    if other is None:
        pytest.skip(f"OpenBLAS runs {own.core} here and no other kernel family")
    monkeypatch.setattr(c_blas, "_measured", lambda lib, o, mkl: dict.fromkeys(
        c_blas.KINDS, {"": speeds[0], o: speeds[1]}))
    chosen = choose("", blas)["large"]
    assert chosen.private == private, chosen.why
    assert (chosen.core.lower() == other.lower()) == private
    assert f"{speeds[1]:.0f} vs" in chosen.why


def test_each_kind_of_product_calls_the_instance_measured_faster_for_it(fresh_choice,
                                                                          monkeypatch):
    """Large products and small ones of each transposition are chosen apart: with
    a measurement that splits them between the two instances, each launch calls
    its own kind's instance, and every value is right."""
    _, blas = fresh_choice
    own = c_blas._numpy_instance(blas)
    other = c_blas.other_family(own.core, c_blas.cpu_flags())
    if other is None:
        pytest.skip(f"OpenBLAS runs {own.core} here and no other kernel family")
    faster_other = {"large", "small nt", "small tt"}  # mixed, both ways
    monkeypatch.setattr(c_blas, "_measured", lambda lib, o, mkl: {
        kind: {"": 100.0, o: 120.0 if kind in faster_other else 80.0} for kind in c_blas.KINDS})
    used = []
    real = c_gemm.gemm_library

    def spy(numpy_blas, kind="large"):
        chosen = real(numpy_blas, kind)
        used.append((kind, chosen.private))
        return chosen
    monkeypatch.setattr(c_gemm, "gemm_library", spy)
    rng = np.random.default_rng(3)
    cases = [((300, 200), (200, 100), "contiguous", "contiguous", "large")] + [
        ((40, 30), (30, 20), la, lb, f"small {'nt'[la == 'transposed']}{'nt'[lb == 'transposed']}")
        for la in ("contiguous", "transposed") for lb in ("contiguous", "transposed")]
    c_blas._chosen.cache_clear()
    program_cache.clear()
    try:
        def lazy(x, layout):  # a transposed view recorded as one, not copied
            return lr.tensor(x) if layout == "contiguous" else lr.tensor(x.T.copy()).mT
        for sa, sb, la, lb, kind in cases:
            a, b = _operand(rng, sa, np.float32, la), _operand(rng, sb, np.float32, lb)
            with lr.backend("c"):
                out = (lazy(a, la) @ lazy(b, lb)).numpy()
                assert "matmul_blas" in _launch_names()
            np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
            assert used[-1] == (kind, kind in faster_other), (used, kind)
    finally:  # the next test must see this host's own choice and launches again
        c_blas._chosen.cache_clear()
        program_cache.clear()


def test_a_real_probe_runs_the_family_it_asked_for(fresh_choice):
    _, blas = fresh_choice
    own = c_blas._numpy_instance(blas)
    symbols = (c_blas.symbol(blas[0], "cblas_sgemm"), c_blas.symbol(blas[0], "cblas_dgemm"),
               c_blas.symbol(blas[0], "openblas_get_corename"))
    speeds = c_blas._probe(blas[0]._name, "", symbols)
    assert set(speeds) == set(c_blas.KINDS)
    assert min(speeds.values()) > 0.1  # GF/s of one core
    with pytest.raises(ValueError, match="when asked for"):
        c_blas._probe(blas[0]._name, "NoSuchCore", symbols)
    assert own.core


def test_a_users_openblas_coretype_keeps_numpys_instance(fresh_choice, monkeypatch):
    choose, blas = fresh_choice
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setattr(c_blas, "_measured", lambda *a: pytest.fail("measured"))
    for chosen in choose("", blas).values():
        assert not chosen.private and chosen.get_threads == blas[3]
        assert "$OPENBLAS_CORETYPE=Haswell" in chosen.why


def test_a_copy_that_fails_to_load_keeps_numpys_instance(fresh_choice, monkeypatch):
    choose, blas = fresh_choice

    def broken(path, core):
        raise OSError("no space left on device")
    monkeypatch.setattr(c_blas, "_load_private", broken)
    for chosen in choose("Haswell", blas).values():
        assert not chosen.private and chosen.sgemm == blas[1]
        assert "no space left on device" in chosen.why


def test_a_damaged_copy_is_replaced_before_it_loads(fresh_choice):
    _, blas = fresh_choice
    own = c_blas._numpy_instance(blas)
    other = c_blas.other_family(own.core, c_blas.cpu_flags())
    if other is None:
        pytest.skip(f"OpenBLAS runs {own.core} here and no other kernel family")
    with open(blas[0]._name, "rb") as f:
        original = f.read()
    folder = c_blas._folder()
    st = os.stat(blas[0]._name)
    name = f"{os.path.basename(blas[0]._name).rsplit('.so', 1)[0]}-{st.st_size}-{st.st_mtime_ns}.so"
    folder.write(name, original[: len(original) // 2])  # a copy cut short
    lib, path = c_blas._load_private(blas[0]._name, other)
    with open(path, "rb") as f:
        assert f.read() == original
    assert c_blas._corename(lib).lower() == other.lower()
    assert lib._handle != blas[0]._handle
