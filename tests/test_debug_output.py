"""``LAZYRT_DEBUG`` and ``LAZYRT_DUMP_DIR``: what lazyrt tells the user it did.

The debug level is read from the environment at every barrier, so the
in-process tests set it with ``monkeypatch.setenv`` and read stderr with
``capfd``; a subprocess test checks the same from a fresh interpreter started
with the variables set. Plan (=3), source (=4) and dump output are produced
when a graph is planned, i.e. on a program-cache miss: those tests start
from an empty program cache.

Level by level (each includes the ones below):
  1: one line per executed graph: key, nodes, kernels, compiled|cached, ms
  2: one line per kernel launch with its time and GB/s; on a compile, the
     kernels with their cache outcome and compile time
  3: the graph with the user's lines, and the fusion plan with a reason for
     every realized intermediate buffer
  4: the generated source of every kernel

Every backend shows the same sections, from its program's compile record
(the tests at the end run on each backend through the ``backend`` fixture);
the ones above them check the C backend's details.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import lazyrt as lr
from lazyrt import compile_record

needs_c = pytest.mark.skipif("c" not in lr.available_backends(),
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
    if "c" not in lr.available_backends():
        pytest.skip("no C compiler: the c backend is unavailable")
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


@needs_c
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


# --- the same sections on every backend, from the compile record ---------------

ANY_GRAPH_LINE = re.compile(r"\[lazyrt\] graph ([0-9a-f]{16}) (\d+) nodes, (\d+) kernels, "
                            r"(compiled|cached) on (\w+), [\d.]+ ms")
ANY_KERNEL_LINE = re.compile(r"\[lazyrt\]   (k\d+_\w+|\w+)\s+[\d.]+ ms\s+[\d.]+ GB/s")
COMPILED_LINE = re.compile(r"\[lazyrt\] compiled graph ([0-9a-f]{16}) on (\w+) \((\w+)\): "
                           r"(\d+) kernels in [\d.]+ ms")


def sections(err: str) -> list[str]:
    """The section markers in debug output, in order of first appearance."""
    markers = [("compiled graph", COMPILED_LINE), ("kernels:", re.compile(r"^kernels:$", re.M)),
               ("graph", re.compile(r"^graph [0-9a-f]{16}: \d+ nodes", re.M)),
               ("plan", re.compile(r"^plan: \d+ steps?\b", re.M)),
               ("sources:", re.compile(r"^sources:$", re.M)),
               ("launch", ANY_KERNEL_LINE), ("graph line", ANY_GRAPH_LINE)]
    return [name for name, rx in markers if rx.search(err)]


EXPECTED_SECTIONS = {
    1: ["graph line"],
    2: ["compiled graph", "kernels:", "launch", "graph line"],
    3: ["compiled graph", "kernels:", "graph", "plan", "launch", "graph line"],
    4: ["compiled graph", "kernels:", "graph", "plan", "sources:", "launch", "graph line"],
}


@pytest.fixture
def quiet(backend, monkeypatch):
    """An empty program cache and no debug or dump variable, on ``backend``."""
    monkeypatch.delenv("LAZYRT_DEBUG", raising=False)
    monkeypatch.delenv("LAZYRT_DUMP_DIR", raising=False)
    lr.sync()
    lr.runtime.program_cache.clear()
    yield backend
    monkeypatch.delenv("LAZYRT_DEBUG", raising=False)


def small_data(seed=0):
    return data(seed, shape=(8, 16))


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_every_backend_shows_the_same_sections(quiet, monkeypatch, capfd, level):
    capfd.readouterr()
    monkeypatch.setenv("LAZYRT_DEBUG", str(level))
    lr.sync(*program(small_data(0)))
    lr.sync(*program(small_data(1)))
    monkeypatch.delenv("LAZYRT_DEBUG")
    err = capfd.readouterr().err
    assert sections(err) == EXPECTED_SECTIONS[level], err
    lines = [m.groups() for m in ANY_GRAPH_LINE.finditer(err)]
    assert [(g[3], g[4]) for g in lines] == [("compiled", quiet), ("cached", quiet)], err
    record = lr.debug.last_record()
    assert record.backend == quiet and record.graph_key == int(lines[0][0], 16)
    if level >= 2:
        # printed once, when compiled; then every launch of both runs, named as recorded
        assert len(COMPILED_LINE.findall(err)) == 1, err
        launches = [m.group(1) for m in ANY_KERNEL_LINE.finditer(err)]
        assert launches == [k.name for k in record.kernels] * 2, err
        for k in record.kernels:
            assert re.search(rf"^  {re.escape(k.name)} +{re.escape(k.cache)} +[\d.]+ ms", err,
                             re.M), (k, err)
    if level >= 3:
        assert record.graph_text in err and record.plan_text in err
    if level >= 4:
        for k in record.kernels:
            assert k.source.rstrip("\n") in err


def test_every_program_carries_its_compile_record(quiet):
    x = lr.tensor(small_data())
    y = lr.nn.softmax(x, axis=1); where = f"{__file__}:{sys._getframe().f_lineno}"  # noqa: E702
    y.numpy()
    record = lr.debug.last_record()
    assert isinstance(record, compile_record.CompileRecord)
    program = lr.runtime.program_cache.get(record.graph_key)
    assert program.record is record and lr.debug.record(record.graph_key) is record
    assert (record.backend, record.device) == (quiet, lr.backends.get(quiet).device)
    assert len(record.kernels) == program.kernels and record.compile_s > 0
    # the graph names the user's line of every op; the plan its decisions
    assert all(n.source == where for n in record.graph.nodes if n.inputs)
    assert where in record.graph_text
    assert record.plan_text.startswith("plan: ")
    ops = [op for k in record.kernels for op in k.ops]
    assert {"max", "exp", "sum"} <= set(ops), ops
    outcomes = {compile_record.COMPILED, compile_record.DISK, compile_record.MEMORY,
                compile_record.NOT_COMPILED}
    for k in record.kernels:
        assert k.cache in outcomes and k.compile_s >= 0 and k.bytes_moved > 0
        assert bool(k.source) == (k.language in ("c", "triton", "jax"))


def test_a_cached_program_keeps_the_record_of_its_compile(quiet):
    x = lr.tensor(small_data())
    (x * 2).numpy()
    first = lr.debug.last_record()
    (x * 3).numpy()  # scalars are parameters: the same program
    assert lr.debug.last_record() is first


def test_kernel_header_comment_names_the_users_line(quiet):
    x = lr.tensor(small_data())
    y = (x * 2 + 1).exp(); line = sys._getframe().f_lineno  # noqa: E702
    y.numpy()
    record = lr.debug.last_record()
    where = f"test_debug_output.py:{line}"
    assert where in record.graph_text
    if quiet == "numpy":
        return  # no generated kernels (one step per op): the graph names the line
    (kernel,) = record.kernels
    assert where in kernel.comment, kernel
    header = kernel.source.split("\n")
    if quiet == "jax":  # one function per graph: every op's line ends naming the user's
        ops = [ln for ln in header if re.match(r"\s+v\d+ = ", ln) and "param" not in ln]
        assert len(ops) == 3 and all(ln.endswith(where) for ln in ops), kernel.source
        return
    comment = "/* " if quiet == "c" else "# "
    assert any(ln.startswith(comment) and "fuses mul, add, exp" in ln and where in ln
               for ln in header), kernel.source


@needs_c
def test_moving_code_does_not_recompile_its_c_kernels(c_backend):
    x = lr.tensor(small_data())
    (x * 7 - 1).numpy()
    first = lr.debug.last_record().kernels[0]
    lr.runtime.program_cache.clear()
    (x * 7 - 1).numpy()  # the same kernel, recorded on another line
    again = lr.debug.last_record().kernels[0]
    assert first.comment != again.comment  # the header names each one's line
    assert again.cache == compile_record.MEMORY, again


def test_dump_dir_writes_the_same_files_on_every_backend(quiet, monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("LAZYRT_DUMP_DIR", str(tmp_path))
    capfd.readouterr()
    lr.sync(*program(small_data()))
    record = lr.debug.last_record()
    (folder,) = tmp_path.iterdir()
    assert folder.name == f"{record.graph_key:016x}"
    # and <kernel>.log for each kernel this compile built (none from a warm cache)
    logs = {k.name + ".log" for k in record.kernels if k.log}
    assert logs <= {p.name for p in folder.iterdir()}
    files = {p.name: p.read_text() for p in folder.iterdir() if p.name not in logs}
    assert files["graph.txt"].strip() == record.graph_text
    assert files["plan.txt"].strip() == record.plan_text
    table = files["kernels.txt"]
    assert table.startswith(f"{quiet} (") and all(k.name in table for k in record.kernels)
    sources = {k.name: k for k in record.kernels if k.source}
    irs = {k.name + ".stablehlo.mlir": k.ir for k in record.kernels if k.ir}  # jax's StableHLO
    suffix = {"c": ".c", "triton": ".py", "jax": ".py"}
    assert set(files) == {"graph.txt", "plan.txt", "kernels.txt"} | set(irs) | {
        k.name + suffix[k.language] for k in sources.values()}
    for name, k in sources.items():
        text = files[name + suffix[k.language]]
        assert name in text.splitlines()[0] and k.source in text
    for name, ir in irs.items():
        assert ir in files[name]
    assert (len(sources) > 0) == (quiet != "numpy")
    assert "[lazyrt]" not in capfd.readouterr().err  # dumping alone prints nothing


# --- lr.debug in-process: what the lazyrt CLI shows, as Python objects ---------------

def test_records_keeps_the_last_compiles_in_order(quiet):
    lr.runtime.program_cache.clear()
    lr.sync(lr.tensor(small_data()) * 2)
    lr.sync(lr.tensor(small_data()) + 3)
    first, second = lr.debug.records(2)
    assert [n.op.name for n in first.graph.nodes if n.op.kind != "leaf"] == ["mul"]
    assert [n.op.name for n in second.graph.nodes if n.op.kind != "leaf"] == ["add"]
    assert second is lr.debug.last_record()
    assert lr.debug.records(0) == []


def test_watch_explains_a_recompile_with_the_changed_shape_and_line(quiet):
    lr.runtime.program_cache.clear()
    with lr.debug.watch() as run:
        for rows in (4, 4, 6):
            x = lr.tensor(np.ones((rows, 3), np.float32))
            (x * 2).sum().item()
    why = run.explain()
    assert (why.graphs, why.barriers, len(why.recompiles)) == (2, 3, 1)
    (diff,) = why.recompiles[0].differences
    assert diff.what == "input 0 shape (4, 3) → (6, 3)"
    assert diff.source.endswith(f"test_debug_output.py:{_line_of('(x * 2).sum().item()')}")
    assert why.causes == ((3, ".item()", diff.source),)
    assert "differs from graph 1: input 0 shape (4, 3) → (6, 3)" in str(why)
    assert "<pre>" in why._repr_html_()
    assert run.graphs[1].record.graph.key == run.graphs[1].key
    assert lr.runtime._watcher is None  # the watch ends with the block


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)


def test_watch_with_a_graph_limit_raises_before_compiling_the_next_graph(quiet):
    from lazyrt.explain import GraphLimitError
    with pytest.raises(GraphLimitError, match=r"more than 1 distinct graph.*\(2,\) → \(5,\)"):
        with lr.debug.watch(max_graphs=1):
            for n in (2, 2, 5):
                (lr.tensor(np.ones(n, np.float32)) - 1).numpy()
    lr.sync()


def test_watched_launch_timings_make_a_chrome_trace(quiet):
    lr.runtime.program_cache.clear()
    with lr.debug.watch(time_launches=True) as run:
        (lr.tensor(small_data()) * 3 + 1).numpy()
        (lr.tensor(small_data()) * 3 + 1).numpy()
    events = run.trace_events()
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["cat"] for e in spans if e["cat"] in ("capture", "run")] == ["capture", "run"] * 2
    assert sum(e["cat"] == "plan" for e in spans) == 1  # compiled once, cached after
    assert sum(e["cat"] == "kernel" for e in spans) == 2 * run.graphs[0].record.kernels.__len__()
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans)


def test_the_dump_holds_the_compile_log_of_each_kernel_it_built(tmp_path, monkeypatch):
    if "c" not in lr.available_backends():
        pytest.skip("needs a C compiler")
    monkeypatch.setenv("LAZYRT_DUMP_DIR", str(tmp_path))
    exponent = 1.5 + np.random.default_rng().random()  # baked: a kernel no cache holds
    with lr.backend("c"):
        (lr.tensor(np.arange(1.0, 5.0, dtype=np.float32)) ** exponent).numpy()
    record = lr.debug.last_record()
    (built,) = [k for k in record.kernels if k.source]
    assert built.cache == compile_record.COMPILED
    assert built.log.startswith("$ ") and "-O3" in built.log and ".c -lm" in built.log
    folder = tmp_path / f"{record.graph_key:016x}"
    assert (folder / f"{built.name}.log").read_text() == built.log


def test_a_compile_record_reads_as_text_and_in_a_notebook(backend):
    (lr.tensor(np.ones(4, np.float32)) * 2 + 1).numpy()
    record = lr.debug.last_record()
    text = str(record)
    assert text == compile_record.format_record(record, 4)
    assert f"{record.graph_key:016x}" in text and "plan" in text
    import html
    assert record._repr_html_() == f"<pre>{html.escape(text)}</pre>"
