"""MKL in the C backend's per-host BLAS choice (lazyrt.backends.c_mkl, c_blas):
forced either way its products equal NumPy's; measured, it wins a kind of
product only by the margin, the outcome is remembered (a second process
measures nothing), and a missing or broken MKL leaves OpenBLAS with `lazyrt
doctor` saying why."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys

import numpy as np
import pytest

import lazyrt as lr
from lazyrt.backends import c_blas, c_gemm, c_mkl
from lazyrt.cli import machine
from lazyrt.runtime import program_cache

pytestmark = [
    pytest.mark.skipif("c" not in lr.available_backends(),
                       reason="no C compiler: the c backend is unavailable"),
    pytest.mark.skipif(c_gemm.numpy_openblas() is None,
                       reason="NumPy's BLAS is not an ILP64 OpenBLAS"),
]

needs_mkl = pytest.mark.skipif(c_mkl.mkl_path() is None,
                               reason="MKL is not installed (pip install mkl)")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache, no override, fresh launches: a first process on a host."""
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(tmp_path))
    for name in ("LAZYRT_BLAS", "LAZYRT_BLAS_CORETYPE", "OPENBLAS_CORETYPE"):
        monkeypatch.delenv(name, raising=False)
    c_blas._chosen.cache_clear()
    program_cache.clear()  # compiled launches hold the library's addresses
    yield c_gemm.numpy_openblas()
    c_blas._chosen.cache_clear()
    program_cache.clear()


def _spy_libraries(monkeypatch):
    """The (kind, GemmLibrary) of every BLAS launch compiled from now on."""
    used = []
    real = c_gemm.gemm_library

    def spy(numpy_blas, kind="large"):
        chosen = real(numpy_blas, kind)
        used.append((kind, chosen))
        return chosen
    monkeypatch.setattr(c_gemm, "gemm_library", spy)
    return used


def _operand(rng, shape, dtype, transposed):
    r, c = shape
    if transposed:  # a transposed view recorded as one, not copied
        base = rng.standard_normal((c, r)).astype(dtype)
        return base.T, lr.tensor(base).mT
    x = rng.standard_normal((r, c)).astype(dtype)
    return x, lr.tensor(x)


@pytest.mark.parametrize("library", [pytest.param("mkl", marks=needs_mkl), "openblas"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forced_library_products_equal_numpys(fresh, monkeypatch, library, dtype):
    """Random shapes, every transposition, sizes 0 and 1, small and large
    products: each through the forced library's gemm, or np.matmul for size 0."""
    monkeypatch.setenv("LAZYRT_BLAS", library)
    monkeypatch.setattr(c_blas, "_measured", lambda lib, other, mkl: pytest.fail(
        f"measured although $LAZYRT_BLAS={library} (only OpenBLAS's families when openblas)")
        if library == "mkl" else {k: {"": 1.0, other: 0.5} for k in c_blas.KINDS})
    used = _spy_libraries(monkeypatch)
    rng = np.random.default_rng(7 if dtype == np.float32 else 8)
    shapes = [(1, 1, 1), (0, 5, 3), (4, 0, 6), (3, 7, 0), (1, 300, 1), (2, 1, 9)] + [
        tuple(int(v) for v in rng.integers(1, 140, 3)) for _ in range(6)] + [(130, 260, 200)]
    for m, k, n in shapes:
        for ta in (False, True):
            for tb in (False, True):
                with lr.backend("c"):  # recorded in it: a transposed view stays one
                    a, la = _operand(rng, (m, k), dtype, ta)
                    b, lb = _operand(rng, (k, n), dtype, tb)
                    out = (la @ lb).numpy()
                expected = a.astype(np.float64) @ b.astype(np.float64)
                tol = 1e-4 if dtype == np.float32 else 1e-12
                np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * np.sqrt(k + 1),
                                           err_msg=f"{library} {m}x{k}{'T' * ta} @ "
                                                   f"{k}x{n}{'T' * tb}")
                assert out.dtype == dtype and out.shape == (m, n)
    assert used, "no product took the BLAS launch"
    f64 = dtype == np.float64
    assert all(kind.endswith(" f64") == f64 for kind, _ in used)
    assert {kind.removesuffix(" f64") for kind, _ in used} == set(c_blas.KINDS[:5])
    want = "MKL" if library == "mkl" else "OpenBLAS"
    assert {chosen.blas for _, chosen in used} == {want}, [c.why for _, c in used]


def _fake_measurement(monkeypatch, table):
    """``_measured`` answering ``table``: {kind: (NumPy's pick, other family, MKL)}."""
    def measured(lib, other, mkl):
        assert mkl, "MKL was not a candidate"
        return {kind: {"": own, **({other: theirs} if other else {}), "mkl": m}
                for kind, (own, theirs, m) in table.items()}
    monkeypatch.setattr(c_blas, "_measured", measured)


@needs_mkl
@pytest.mark.parametrize("speeds,winner", [
    ((100.0, 90.0, 104.0), "MKL"),        # by the margin
    ((100.0, 90.0, 102.0), "OpenBLAS"),   # within it: OpenBLAS is kept
    ((100.0, 104.0, 106.0), "other"),     # MKL must beat the other family by it too
    ((100.0, 104.0, 108.0), "MKL"),
    ((100.0, 90.0, 0.0), "OpenBLAS"),     # an MKL that did not run
])
def test_mkl_wins_a_kind_only_by_the_margin(fresh, monkeypatch, speeds, winner):
    own = c_blas._numpy_instance(fresh)
    other = c_blas.other_family(own.core, c_blas.cpu_flags())
    if other is None and winner == "other":
        pytest.skip(f"OpenBLAS runs {own.core} here and no other kernel family")
    _fake_measurement(monkeypatch, dict.fromkeys(c_blas.KINDS, speeds))
    chosen = c_blas._chosen.__wrapped__("", fresh)["large"]
    if winner == "MKL":
        assert chosen.blas == "MKL" and chosen.private and chosen.get_threads == 0
        assert chosen.core and chosen.version, chosen
    elif winner == "other":
        assert chosen.blas == "OpenBLAS" and chosen.core.lower() == other.lower()
    else:
        assert chosen.blas == "OpenBLAS" and not chosen.private
    assert f"MKL {speeds[2]:.0f} vs" in chosen.why or "MKL (did not run)" in chosen.why
    assert c_blas._PROBED["large"] in chosen.why


@needs_mkl
def test_each_kind_calls_its_measured_winner_and_doctor_says_which(fresh, monkeypatch):
    """MKL measured faster for some kinds only: those launches call MKL, the
    others OpenBLAS, every value is right, and doctor names both with numbers."""
    mkl_wins = {"large", "small tn", "small nt f64"}
    _fake_measurement(monkeypatch, {k: (100.0, 50.0, 150.0 if k in mkl_wins else 80.0)
                                    for k in c_blas.KINDS})
    used = _spy_libraries(monkeypatch)
    rng = np.random.default_rng(11)
    cases = [((300, 200), (200, 100), False, False, np.float32),
             ((40, 30), (30, 20), True, False, np.float32),
             ((40, 30), (30, 20), False, False, np.float32),
             ((40, 30), (30, 20), False, True, np.float64),
             ((40, 30), (30, 20), True, True, np.float64)]
    for sa, sb, ta, tb, dtype in cases:
        with lr.backend("c"):
            a, la = _operand(rng, sa, dtype, ta)
            b, lb = _operand(rng, sb, dtype, tb)
            out = (la @ lb).numpy()
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
        kind, chosen = used[-1]
        assert kind == c_blas.product_kind(sa[0], sb[1], sa[1], ta, tb, dtype == np.float64)
        assert (chosen.blas == "MKL") == (kind in mkl_wins), (kind, chosen.why)
    status, detail = machine._check_blas()
    assert status == machine.PASS, detail
    assert "float32 large: MKL " in detail and "measured faster here: MKL 150 vs" in detail
    assert "float32 small NN: OpenBLAS " in detail and "MKL 80 vs" in detail
    assert "float64 small NT: MKL " in detail and "dgemm 96^3 NT" in detail
    assert c_mkl.mkl_path() in detail  # where each library was loaded from


def test_missing_mkl_keeps_openblas_and_doctor_says_why(fresh, monkeypatch):
    monkeypatch.setattr(c_mkl, "mkl_path", lambda: None)
    monkeypatch.setattr(c_blas, "_measured", lambda lib, other, mkl: {
        k: {"": 100.0, other: 50.0} for k in c_blas.KINDS})
    monkeypatch.setattr(c_blas, "other_family", lambda core, flags: "Haswell")
    for chosen in c_blas.gemm_choice(fresh).values():
        assert chosen.blas == "OpenBLAS" and "no MKL installed (pip install mkl)" in chosen.why
    status, detail = machine._check_blas()
    assert status == machine.PASS and "no MKL installed (pip install mkl)" in detail, detail

    c_blas._chosen.cache_clear()
    monkeypatch.setenv("LAZYRT_BLAS", "mkl")  # asked for, and not there
    for chosen in c_blas.gemm_choice(fresh).values():
        assert chosen.blas == "OpenBLAS" and chosen.sgemm == fresh[1]
    status, detail = machine._check_blas()
    assert status == machine.WARN, detail  # asked for, not given
    assert "$LAZYRT_BLAS=mkl, but no MKL is installed" in detail, detail


def test_an_mkl_that_fails_to_load_leaves_the_next_best(fresh, monkeypatch, tmp_path):
    fake = tmp_path / "libmkl_rt.so.3"
    fake.write_bytes(b"not a library")
    monkeypatch.setattr(c_mkl, "mkl_path", lambda: str(fake))
    monkeypatch.setattr(c_blas, "other_family", lambda core, flags: None)
    _fake_measurement(monkeypatch, dict.fromkeys(c_blas.KINDS, (100.0, 0.0, 150.0)))
    for chosen in c_blas.gemm_choice(fresh).values():
        assert chosen.blas == "OpenBLAS" and not chosen.private
        assert "MKL won, but failed to load" in chosen.why
    status, detail = machine._check_blas()
    assert status == machine.WARN and "MKL won, but failed to load" in detail, detail
    with lr.backend("c"):  # and matmuls still run, right
        a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal((lr.tensor(a) @ lr.tensor(a.T)).numpy(), a @ a.T)


def test_a_bad_override_is_an_error_naming_it(fresh, monkeypatch):
    monkeypatch.setenv("LAZYRT_BLAS", "atlas")
    with pytest.raises(lr.BackendError, match=r"\$LAZYRT_BLAS='atlas'.*auto, mkl, openblas"):
        c_blas.gemm_choice(fresh)
    status, detail = machine._check_blas()
    assert status == machine.FAIL and "atlas" in detail
    monkeypatch.setenv("LAZYRT_BLAS", "mkl")
    monkeypatch.setenv("LAZYRT_BLAS_CORETYPE", "Haswell")
    with pytest.raises(lr.BackendError, match="disagree"):
        c_blas.gemm_choice(fresh)


@needs_mkl
def test_the_measurement_with_mkl_is_made_once_and_remembered(fresh, monkeypatch):
    lib = fresh[0]
    mkl = c_mkl.mkl_path()
    probes = []

    def probe(path, core, symbols):
        probes.append(core)
        if core == "mkl":
            assert path == mkl and symbols == (c_mkl.SGEMM, c_mkl.DGEMM, "mkl")
            raise subprocess.CalledProcessError(1, "probe")  # MKL crashed: 0 GF/s
        return dict.fromkeys(c_blas.KINDS, 100.0 + len(probes))
    monkeypatch.setattr(c_blas, "_probe", probe)
    measured = c_blas._measured(lib, "Other", mkl)
    assert probes == ["", "Other", "mkl", "", "Other", "mkl"]  # two alternating rounds
    assert measured == dict.fromkeys(c_blas.KINDS, {"": 104.0, "Other": 105.0, "mkl": 0.0})
    monkeypatch.setattr(c_blas, "_probe", lambda *a: pytest.fail("measured again"))
    assert c_blas._measured(lib, "Other", mkl) == measured


def test_the_remembered_choice_covers_the_mkl_file_and_the_probe(tmp_path, monkeypatch):
    openblas = c_gemm.numpy_openblas()[0]._name
    fake = tmp_path / "libmkl_rt.so.3"
    fake.write_bytes(b"x")
    with_mkl = c_blas._library_key(openblas, str(fake))
    assert with_mkl != c_blas._library_key(openblas)
    os.utime(fake, ns=(1, 2))  # a reinstalled MKL: measured again
    assert c_blas._library_key(openblas, str(fake)) != with_mkl
    again = c_blas._library_key(openblas, str(fake))
    monkeypatch.setattr(c_blas, "_PROBE", c_blas._PROBE.replace("384", "256"))
    assert c_blas._library_key(openblas, str(fake)) != again  # other products timed


@needs_mkl
def test_a_second_process_makes_the_same_choice_and_measures_nothing(tmp_path):
    """Real measurements, in a first process; a second one, whose probe fails,
    must read the same choice from the cache."""
    script = r"""
import json, sys
from lazyrt.backends import c_blas, c_gemm
if sys.argv[1] == "second":
    def no_probe(*args):
        raise AssertionError("measured again")
    c_blas._probe = no_probe
choice = c_blas.gemm_choice(c_gemm.numpy_openblas())
print(json.dumps({k: [v.blas, v.core, v.why] for k, v in choice.items()}))
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAZYRT_BLAS", "LAZYRT_BLAS_CORETYPE", "OPENBLAS_CORETYPE")}
    env["LAZYRT_CACHE_DIR"] = str(tmp_path)
    runs = [subprocess.run([sys.executable, "-c", script, which], env=env, capture_output=True,
                           text=True, timeout=300) for which in ("first", "second")]
    for done in runs:
        assert done.returncode == 0, done.stderr
    first, second = (json.loads(done.stdout.strip().splitlines()[-1]) for done in runs)
    assert first == second
    assert all("MKL" in why and "GF/s" in why for _, _, why in first.values()), first
    assert len(list((tmp_path / "blas").glob("choice-*.json"))) == 1


@needs_mkl
def test_a_real_mkl_probe_and_load_are_single_threaded():
    mkl = c_mkl.mkl_path()
    speeds = c_blas._probe(mkl, "mkl", (c_mkl.SGEMM, c_mkl.DGEMM, "mkl"))
    assert set(speeds) == set(c_blas.KINDS) and min(speeds.values()) > 0.1
    lib, sgemm, dgemm, family, version = c_mkl.load(mkl)
    assert sgemm and dgemm and family and version[0].isdigit()
    assert lib.mkl_get_max_threads() == 1  # the sequential layer: no threads of its own


def test_mkl_family_and_path_rules(tmp_path, monkeypatch):
    maps = ("7f00-7f01 r-xp 0 08:01 1 /venv/lib/libmkl_core.so.3\n"
            "7f01-7f02 r-xp 0 08:01 2 /venv/lib/libmkl_avx512.so.3\n"
            "7f02-7f03 r-xp 0 08:01 3 /venv/lib/libmkl_vml_avx512.so.3\n"
            "7f03-7f04 rw-p 0 00:00 0\n")
    assert c_mkl.family_from_maps(maps) == "avx512"
    assert c_mkl.family_from_maps("") == ""
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libmkl_rt.so.2", "libmkl_rt.so.3", "libmkl_rt.so.3.bak"):
        (lib / name).write_bytes(b"")
    none = str(tmp_path / "none")
    monkeypatch.setattr(sys, "prefix", none)
    monkeypatch.setattr(sys, "base_prefix", none)
    monkeypatch.setattr(site, "getuserbase", lambda: str(tmp_path))  # pip install --user
    assert c_mkl.mkl_path() == str(lib / "libmkl_rt.so.3")  # the newest soname
    monkeypatch.setattr(site, "getuserbase", lambda: none)
    assert c_mkl.mkl_path() is None
