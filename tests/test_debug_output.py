"""``LAZYRT_DEBUG`` and ``LAZYRT_DUMP_DIR``: what lazyrt tells the user it did.

The debug level is read from the environment at every barrier, so the
in-process tests set it with ``monkeypatch.setenv`` and read stderr with
``capfd``; a subprocess test checks the same from a fresh interpreter started
with the variables set. Plan (=3), source (=4) and dump output are produced
when a graph is planned, i.e. on a program-cache miss: those tests start
from an empty program cache.

Level by level (each includes the ones below):
  1: one line per executed graph: key, nodes, kernels, compiled|cached, ms
  2: one line per kernel launch with its time and GB/s
  3: the fusion plan, with a reason for every realized intermediate buffer
  4: the generated C source of every kernel
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import lazyrt as lr

pytestmark = pytest.mark.skipif("c" not in lr.available_backends(),
                                reason="no C compiler: the c backend is unavailable")

GRAPH_LINE = re.compile(r"\[lazyrt\] graph ([0-9a-f]{16}) (\d+) nodes, (\d+) kernels, "
                        r"(compiled|cached) on c, [\d.]+ ms")
KERNEL_LINE = re.compile(r"\[lazyrt\]\s+(k\d+_fused_\w+)\s+[\d.]+ ms\s+[\d.]+ GB/s")


def program(xa):
    """Softmax (one kernel) plus a reshape of a transposed result (a buffer with
    a reason): two kernels, one realized intermediate."""
    x = lr.tensor(xa)
    return lr.nn.softmax(x, axis=1), (x.T + 1).reshape(-1)


def data(seed=0, shape=(64, 128)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def c_backend(tmp_path, monkeypatch):
    """Backend c, an empty program cache, no debug or dump variables inherited."""
    monkeypatch.delenv("LAZYRT_DEBUG", raising=False)
    monkeypatch.delenv("LAZYRT_DUMP_DIR", raising=False)
    lr.sync()
    lr.runtime.program_cache.clear()
    with lr.backend("c"):
        yield
    monkeypatch.delenv("LAZYRT_DEBUG", raising=False)


def run_twice(monkeypatch, capfd, level):
    """Run the program once (planned) and again (cached) at ``level``; stderr."""
    capfd.readouterr()
    monkeypatch.setenv("LAZYRT_DEBUG", str(level))
    lr.sync(*program(data(0)))
    lr.sync(*program(data(1)))
    monkeypatch.delenv("LAZYRT_DEBUG")
    return capfd.readouterr().err


def test_level_0_prints_nothing(c_backend, capfd):
    capfd.readouterr()
    lr.sync(*program(data()))
    assert "[lazyrt]" not in capfd.readouterr().err


def test_level_1_prints_one_line_per_graph(c_backend, monkeypatch, capfd):
    err = run_twice(monkeypatch, capfd, 1)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 2, err
    first, second = (GRAPH_LINE.fullmatch(ln) for ln in lines)
    assert first and second, err
    assert first.group(1) == second.group(1)  # same key: same program
    assert first.group(3) == "2"
    assert int(first.group(2)) >= 5
    assert (first.group(4), second.group(4)) == ("compiled", "cached")
    assert "plan:" not in err and "GB/s" not in err


def test_level_1_key_changes_with_the_program(c_backend, monkeypatch, capfd):
    monkeypatch.setenv("LAZYRT_DEBUG", "1")
    capfd.readouterr()
    x = lr.tensor(data())
    (x + 1).numpy()
    (x * 2 - 1).numpy()
    keys = [GRAPH_LINE.search(ln).group(1) for ln in capfd.readouterr().err.splitlines()]
    assert len(keys) == 2 and keys[0] != keys[1]


def test_level_2_adds_a_line_per_kernel_with_bandwidth(c_backend, monkeypatch, capfd):
    err = run_twice(monkeypatch, capfd, 2)
    kernels = [KERNEL_LINE.search(ln) for ln in err.splitlines() if "GB/s" in ln]
    assert len(kernels) == 4, err  # 2 kernels x 2 runs
    assert all(kernels), err
    names = {m.group(1) for m in kernels}
    assert any("max" in n and "exp" in n and "sum" in n for n in names), names
    assert len(GRAPH_LINE.findall(err)) == 2
    assert "plan:" not in err and "#pragma" not in err


def test_level_2_bandwidth_uses_minimal_bytes(c_backend, monkeypatch, capfd):
    monkeypatch.setenv("LAZYRT_DEBUG", "2")
    capfd.readouterr()
    (lr.tensor(data(shape=(512, 512))) * 3).numpy()
    line = KERNEL_LINE.search(capfd.readouterr().err).group(0)
    ms, gbs = map(float, re.findall(r"([\d.]+) (?:ms|GB/s)", line))
    if ms > 0.01:  # below that the printed ms is too coarse to check against
        assert gbs == pytest.approx(2 * 4 * 512 * 512 / (ms * 1e-3) / 1e9, rel=0.1)


def test_level_3_prints_the_plan_with_a_reason_for_each_buffer(c_backend, monkeypatch, capfd):
    err = run_twice(monkeypatch, capfd, 3)
    assert err.count("plan:") == 1, "the plan is printed when the graph is planned"
    reasons = re.findall(r"buffer for %\d+ \((\w+)\): (.+)", err)
    assert reasons == [("add", "reshape of a non-contiguous view needs a copy")], err
    assert re.search(r"step 0: kernel k0_fused_\w+", err)
    assert re.search(r"step 1: kernel k1_fused_\w+", err)
    assert "reduce=[1]" in err
    assert len(GRAPH_LINE.findall(err)) == 2 and "GB/s" in err
    assert "#pragma" not in err


def test_level_3_names_the_blas_boundary(c_backend, monkeypatch, capfd):
    monkeypatch.setenv("LAZYRT_DEBUG", "3")
    capfd.readouterr()
    x, w = lr.tensor(data()), lr.tensor(data(1, (128, 16)))
    lr.nn.relu(x @ w + 1).numpy()
    err = capfd.readouterr().err
    assert re.search(r"buffer for %\d+ \(matmul\): .*BLAS", err), err
    assert "(BLAS)" in err


def test_level_4_prints_the_c_source(c_backend, monkeypatch, capfd):
    err = run_twice(monkeypatch, capfd, 4)
    symbols = re.findall(r"^void (\w*fused_\w+)\(", err, re.M)
    assert len(symbols) == 2, err
    assert len(re.findall(r"^/\* \w*fused_\w+: fuses ", err, re.M)) == 2, err  # a comment each
    for name in re.findall(r"step \d+: kernel (k\d+_fused_\w+)", err):
        # C symbols are named by structure (equal kernels share a binary):
        # the plan's name minus its number labels the source
        label = name.split("_", 1)[1]
        assert re.search(rf"/\* {label}: fuses .*\n(.*\n)*?void {label}_\w+\(", err), name
    assert "#pragma omp" in err
    assert "plan:" in err and len(GRAPH_LINE.findall(err)) == 2


def test_bad_debug_value_does_not_break_a_barrier(c_backend, monkeypatch, capfd):
    monkeypatch.setenv("LAZYRT_DEBUG", "verbose")
    try:
        value = (lr.tensor(np.ones(4, np.float32)) + 1).numpy()
    except ValueError as e:  # a clear error naming the variable is acceptable too
        assert "LAZYRT_DEBUG" in str(e)
    else:
        assert value.tolist() == [2.0] * 4


def test_dump_dir_writes_graph_plan_and_sources(c_backend, monkeypatch, tmp_path, capfd):
    dump = tmp_path / "dump"
    monkeypatch.setenv("LAZYRT_DUMP_DIR", str(dump))
    lr.sync(*program(data()))
    (folder,) = dump.iterdir()
    assert re.fullmatch(r"[0-9a-f]{16}", folder.name)
    files = sorted(p.name for p in folder.iterdir())
    c_files = [f for f in files if f.endswith(".c")]
    assert "graph.txt" in files and "plan.txt" in files
    assert len(c_files) == 2, files
    graph = (folder / "graph.txt").read_text()
    assert graph.startswith(f"graph {folder.name}:")
    assert "softmax" not in graph and "exp(" in graph  # the recorded ops, not the API call
    plan_txt = (folder / "plan.txt").read_text()
    assert "reshape of a non-contiguous view needs a copy" in plan_txt
    for f in c_files:
        name = f[:-2]
        src = (folder / f).read_text()
        assert f"/* {name}" in src and "#pragma omp" in src
        assert re.search(r"^void \w*fused_\w+\(", src, re.M), src
        assert name in plan_txt
    assert "[lazyrt]" not in capfd.readouterr().err  # dumping alone prints nothing


def test_dump_dir_one_folder_per_planned_graph(c_backend, monkeypatch, tmp_path):
    monkeypatch.setenv("LAZYRT_DUMP_DIR", str(tmp_path))
    x = lr.tensor(data())
    (x + 1).numpy()
    (x + 2).numpy()          # same graph (scalars are parameters): cached, no new folder
    (x.sum(1)).numpy()
    assert len(list(tmp_path.iterdir())) == 2


CHILD = """
import numpy as np, lazyrt as lr
x = lr.tensor(np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32))
for _ in range(2):
    y, z = lr.nn.softmax(x, axis=1), (x.T + 1).reshape(-1)
    lr.sync(y, z)
print("ok", float(y.numpy().sum(1).mean()))
"""


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_debug_levels_from_a_fresh_process(tmp_path, level):
    env = dict(os.environ, LAZYRT_DEBUG=str(level), LAZYRT_CACHE_DIR=str(tmp_path / "cache"),
               LAZYRT_DUMP_DIR=str(tmp_path / "dump"), LAZYRT_BACKEND="c")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "ok" and float(out.stdout.split()[1]) == pytest.approx(1.0)
    err = out.stderr
    modes = [m.group(4) for m in GRAPH_LINE.finditer(err)]
    assert modes == ["compiled", "cached"], err
    assert ("GB/s" in err) == (level >= 2)
    assert ("buffer for %" in err) == (level >= 3)
    assert ("#pragma omp" in err) == (level >= 4)
    (folder,) = (tmp_path / "dump").iterdir()
    assert len(list(folder.glob("*.c"))) == 2
