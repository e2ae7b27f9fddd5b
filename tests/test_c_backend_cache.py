"""The c backend's two cache levels, end to end, across processes.

graph key -> plan lives in each process's memory; kernel source -> compiled
binary lives on disk under ``$LAZYRT_CACHE_DIR``. Every test runs a fresh
interpreter (``subprocess``) on a per-test cache folder, so what one process
compiled is what the next one finds, and nothing is shared with the user's
cache or with other tests.

The child runs a fixed program — the 5-op chain with a Python scalar, row
softmax and layer norm — once per ``(rows, cols, scalar)`` it is given, and
prints, per run, the metric deltas and the worst relative error against a
float64 NumPy reference. (Low-level CCompiler behaviour is specified in
test_c_compiler_cache.py; these tests go through the public API.)
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

import lazyrt as lr

pytestmark = pytest.mark.skipif("c" not in lr.available_backends(),
                                reason="no C compiler: the c backend is unavailable")

CHILD = r"""
import json, sys
import numpy as np
import lazyrt as lr

def program(x, w, b, s):
    y = lr.maximum(x * s + 1, 0) * 0.5 - x
    return y, lr.nn.softmax(x, axis=1), lr.nn.layer_norm(x, x.shape[1], w, b)

def reference(x, w, b, s):
    x = x.astype(np.float64)
    y = np.maximum(x * s + 1, 0) * 0.5 - x
    e = np.exp(x - x.max(1, keepdims=True))
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    return y, e / e.sum(1, keepdims=True), (x - mu) / np.sqrt(var + 1e-5) * w + b

lr.set_backend("c")
report = []
try:
    for rows, cols, s in json.loads(sys.argv[1]):
        rng = np.random.default_rng(rows)
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        w = rng.standard_normal(cols).astype(np.float32)
        b = rng.standard_normal(cols).astype(np.float32)
        before = lr.metrics.snapshot()
        outs = program(lr.tensor(x), lr.tensor(w), lr.tensor(b), s)
        lr.sync(*outs)
        after = lr.metrics.snapshot()
        err = max(float(np.max(np.abs(o.numpy() - r) / (1 + np.abs(r))))
                  for o, r in zip(outs, reference(x, w, b, s)))
        delta = {k: after[k] - before[k] for k in ("compiles", "disk_cache_hits", "cache_hits",
                                                    "cache_misses", "kernel_launches")}
        delta["err"] = err
        report.append(delta)
except lr.BackendError as e:
    print(json.dumps({"BackendError": str(e)}))
    sys.exit(0)
print(json.dumps(report))
"""

TOL = 1e-5  # worst relative error allowed against the float64 reference


def run_child(cache_dir, runs, **extra_env):
    """Run the program in a fresh interpreter once per (rows, cols, scalar)."""
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(cache_dir), **extra_env)
    env.pop("LAZYRT_DEBUG", None)
    env.pop("LAZYRT_DUMP_DIR", None)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(runs)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def seeded_cache(tmp_path_factory):
    """A cache folder the program (64 x 128) was compiled into once, for tests
    that only need a warm cache; each test works on its own copy."""
    root = tmp_path_factory.mktemp("seeded") / "cache"
    (run,) = run_child(root, [[64, 128, 2.0]])
    assert run["compiles"] >= 2 and run["err"] < TOL
    return root, run["compiles"]


@pytest.fixture
def warm_cache(seeded_cache, tmp_path):
    """(a private copy of the seeded cache folder, kernels compiled into it)."""
    root, compiled = seeded_cache
    copy = tmp_path / "cache"
    shutil.copytree(root, copy)  # copy2 keeps the 0700 modes
    return copy, compiled


def binaries(cache_dir):
    return sorted(p.name for p in cache_dir.rglob("*.so"))


def test_second_process_loads_kernels_from_disk_without_compiling(tmp_path):
    (first,) = run_child(tmp_path, [[64, 128, 2.0]])
    assert first["compiles"] >= 1 and first["disk_cache_hits"] == 0
    assert first["err"] < TOL
    compiled = binaries(tmp_path)
    assert len(compiled) == first["compiles"]
    (second,) = run_child(tmp_path, [[64, 128, 2.0]])
    assert second["compiles"] == 0
    assert second["disk_cache_hits"] == first["compiles"] >= 1
    assert second["cache_misses"] == 1  # the plan is per process; only binaries persist
    assert second["kernel_launches"] == first["kernel_launches"]
    assert second["err"] < TOL
    assert binaries(tmp_path) == compiled


def test_new_batch_size_reuses_compiled_kernels(tmp_path):
    runs = run_child(tmp_path, [[64, 128, 2.0], [32, 128, 2.0], [100, 128, 2.0],
                                [3, 128, 2.0], [64, 128, 2.0]])
    first, *others = runs
    assert first["compiles"] >= 1 and first["cache_misses"] == 1
    for new_size in others[:3]:
        assert new_size["compiles"] == 0, runs  # no compile ...
        assert new_size["cache_misses"] == 1, runs  # ... but a new plan
        assert new_size["kernel_launches"] == first["kernel_launches"]
    back = others[3]
    assert back["compiles"] == 0 and back["cache_hits"] == 1 and back["cache_misses"] == 0
    assert all(r["err"] < TOL for r in runs), runs
    assert len(binaries(tmp_path)) == first["compiles"]


def test_new_batch_size_in_a_new_process_needs_no_compile(warm_cache):
    cache, _ = warm_cache
    (other,) = run_child(cache, [[48, 128, 2.0]])
    assert other["compiles"] == 0 and other["disk_cache_hits"] >= 1
    assert other["err"] < TOL


def test_changed_python_scalar_hits_the_program_cache(tmp_path):
    runs = run_child(tmp_path, [[64, 128, 2.0], [64, 128, 3.0], [64, 128, -0.25]])
    first, *others = runs
    for r in others:
        assert r == {**r, "compiles": 0, "disk_cache_hits": 0, "cache_hits": 1,
                     "cache_misses": 0}, runs
        assert r["err"] < TOL, runs  # the new value is used, not the traced one


def _truncate(path):
    """Replace ``path`` by its first half (a new inode, as an interrupted copy leaves)."""
    half = path.read_bytes()[: path.stat().st_size // 2]
    tmp = path.with_suffix(".half")
    tmp.write_bytes(half)
    os.chmod(tmp, 0o700)
    os.replace(tmp, path)


def test_truncated_binary_is_rebuilt_and_the_result_is_correct(warm_cache):
    cache, compiled = warm_cache
    sos = sorted(cache.rglob("*.so"))
    assert len(sos) == compiled
    _truncate(sos[0])
    (rebuilt,) = run_child(cache, [[64, 128, 2.0]])
    assert rebuilt["compiles"] == 1, rebuilt
    assert rebuilt["disk_cache_hits"] == compiled - 1
    assert rebuilt["err"] < TOL
    assert sos[0].stat().st_size > 0 and len(sorted(cache.rglob("*.so"))) == len(sos)
    (after,) = run_child(cache, [[64, 128, 2.0]])
    assert after["compiles"] == 0 and after["err"] < TOL


def test_truncated_to_empty_binary_is_rebuilt(warm_cache):
    cache, compiled = warm_cache
    for so in cache.rglob("*.so"):
        with open(so, "r+b") as f:  # in place, same inode
            f.truncate(0)
    (rebuilt,) = run_child(cache, [[64, 128, 2.0]])
    assert rebuilt["compiles"] == compiled and rebuilt["disk_cache_hits"] == 0
    assert rebuilt["err"] < TOL


def test_binary_swapped_for_another_kernel_is_not_loaded(warm_cache):
    """A valid .so with the wrong contents (another kernel's) fails its checksum."""
    cache, _ = warm_cache
    a, b = sorted(cache.rglob("*.so"))[:2]
    a.write_bytes(b.read_bytes())
    (run,) = run_child(cache, [[64, 128, 2.0]])
    assert run["compiles"] == 1 and run["err"] < TOL


def test_binary_that_fails_to_load_is_rebuilt_and_the_result_is_correct(warm_cache):
    """Bytes that match the recorded sha256 but that dlopen rejects ('invalid ELF
    header'): the entry is evicted and rebuilt once, in this run."""
    cache, compiled = warm_cache
    so = sorted(cache.rglob("*.so"))[0]
    junk = b"not an ELF file, but its checksum is right\n" * 64
    so.write_bytes(junk)
    so.with_suffix(".sha256").write_text(hashlib.sha256(junk).hexdigest() + "\n")
    (rebuilt,) = run_child(cache, [[64, 128, 2.0]])
    assert rebuilt["compiles"] == 1 and rebuilt["disk_cache_hits"] == compiled - 1, rebuilt
    assert rebuilt["err"] < TOL
    (after,) = run_child(cache, [[64, 128, 2.0]])
    assert after["compiles"] == 0 and after["disk_cache_hits"] == compiled


def test_cache_dir_is_created_private(tmp_path):
    cache = tmp_path / "deep" / "lazyrt-cache"
    old = os.umask(0o002)  # a permissive umask must not leak into the cache folder
    try:
        (run,) = run_child(cache, [[16, 32, 1.0]])
    finally:
        os.umask(old)
    assert run["err"] < TOL
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    for d in cache.iterdir():
        assert d.is_dir() and stat.S_IMODE(d.stat().st_mode) == 0o700
    for so in cache.rglob("*.so"):
        assert not so.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777], ids=oct)
def test_world_or_group_writable_cache_dir_is_refused(tmp_path, mode):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    result = run_child(cache, [[16, 32, 1.0]])
    assert isinstance(result, dict), f"expected lazyrt.BackendError, got {result}"
    msg = result["BackendError"]
    assert str(cache) in msg and "writable" in msg
    assert not list(cache.rglob("*.so"))  # nothing compiled into it, nothing loaded


def test_writable_version_folder_is_refused(warm_cache):
    cache, _ = warm_cache
    version_dir = cache / f"v{lr.__version__}"  # beside it: plans/ (lazyrt/plan_cache.py)
    version_dir.chmod(0o777)
    result = run_child(cache, [[64, 128, 2.0]])
    assert isinstance(result, dict) and "writable" in result["BackendError"]


def test_world_writable_cache_dir_is_refused_in_process(tmp_path, monkeypatch):
    """The same check through the backend object, with lazyrt.BackendError itself."""
    from lazyrt._capture import capture
    from lazyrt.backends.c import CBackend
    from lazyrt.graph import Graph

    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(cache))
    backend = CBackend()
    x = lr.tensor([1.0, 2.0, 3.0])
    graph = Graph.from_capture(capture([(lr.exp(x) * 3.5)._node]))
    with pytest.raises(lr.BackendError, match="writable by group or others"):
        backend.compile(graph)


def test_two_processes_sharing_a_cold_cache_both_succeed(tmp_path):
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(tmp_path))
    env.pop("LAZYRT_DEBUG", None)
    args = [sys.executable, "-c", CHILD, json.dumps([[64, 128, 2.0]])]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    for stdout, _ in outs:
        (run,) = json.loads(stdout.strip().splitlines()[-1])
        assert run["err"] < TOL
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]
    (again,) = run_child(tmp_path, [[64, 128, 2.0]])
    assert again["compiles"] == 0
