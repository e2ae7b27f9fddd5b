"""The ``lazyrt`` command, driven in a subprocess on the scripts in ``examples/``.

Every test runs ``python -m lazyrt.cli`` as a user would and checks the exit
status, the text and the files it writes. The scripts run on the ``c``
backend where there is a C compiler (their kernels are compiled once into a
cache shared by the module's tests), else on ``numpy``; ``check`` needs a
compiled backend and is skipped without one.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import lazyrt as lr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
HAVE_C = "c" in lr.available_backends()
BACKEND = "c" if HAVE_C else "numpy"
needs_c = pytest.mark.skipif(not HAVE_C, reason="no C compiler: check needs a compiled backend")
ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A fresh kernel cache for the module; no debug variables inherited."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("LAZYRT_DEBUG", "LAZYRT_DUMP_DIR", "LAZYRT_MAX_GRAPHS",
                      "LAZYRT_TEST_BREAK_LOWERING", "NO_COLOR")}
    e["LAZYRT_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    e["LAZYRT_BACKEND"] = BACKEND
    e["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return e


def lazyrt(env, *args, extra_env=None, cwd=None):
    full = dict(env, **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "lazyrt.cli", *args], env=full, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def example(name):
    return os.path.join(EXAMPLES, name)


# --- the command line itself ----------------------------------------------------------

def test_every_subcommand_has_help_with_an_example(env):
    from lazyrt.cli import build_parser
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert set(commands) >= {"run", "explain", "kernels", "graph", "check", "cache", "doctor",
                             "bench", "demo"}
    for name, sub in commands.items():
        assert "example:" in sub.format_help() and f"lazyrt {name}" in sub.format_help(), name
    done = lazyrt(env, "--version")
    assert done.returncode == 0 and done.stdout.startswith("lazyrt ")


def test_a_missing_script_is_one_line_and_exit_2(env):
    done = lazyrt(env, "run", "no_such_script.py")
    assert done.returncode == 2
    assert done.stderr.strip() == "lazyrt run: error: no such script: no_such_script.py"


def test_an_unknown_backend_is_a_usage_error(env):
    done = lazyrt(env, "run", "--backend", "nope", example("batch_sizes.py"))
    assert done.returncode == 2
    assert "unknown backend 'nope'" in done.stderr


def test_a_script_exception_shows_the_users_traceback_and_exit_1(env, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import lazyrt as lr\n\ndef f():\n    raise ValueError('bad value')\n\nf()\n")
    done = lazyrt(env, "run", str(script))
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert 'boom.py", line 6, in <module>' in done.stderr
    assert "ValueError: bad value" in done.stderr
    assert "runpy" not in done.stderr and "cli" not in done.stderr


# --- run --------------------------------------------------------------------------------

def test_run_passes_arguments_and_returns_the_scripts_exit_status(env):
    done = lazyrt(env, "run", example("views_and_fallback.py"), "3")
    assert done.returncode == 3
    assert "36.0" in done.stdout  # the script's own output stays on stdout


def test_run_dump_and_trace(env, tmp_path):
    dump, trace = tmp_path / "dump", tmp_path / "trace.json"
    done = lazyrt(env, "run", example("views_and_fallback.py"), "--dump", str(dump),
                  "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    summary = json.loads((dump / "summary.json").read_text())
    assert summary["graphs_distinct"] == 3 and summary["exit_code"] == 0
    assert (dump / "metrics.txt").read_text().startswith("lazyrt metrics")
    for g in summary["graphs"]:
        folder = dump / g["folder"]
        assert "views_and_fallback.py:" in (folder / "graph.txt").read_text()
        assert (folder / "plan.txt").exists() and (folder / "kernels.txt").exists()
        if BACKEND == "c":
            assert all((folder / f"{k['name']}.c").exists() for k in g["kernels"])
    events = json.loads(trace.read_text())["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"record", "capture", "plan", "compile", "run", "kernel"} <= cats
    runs = [e for e in events if e.get("cat") == "run"]
    assert len(runs) == 3 and all(e["ph"] == "X" and e["dur"] >= 0 for e in runs)


# --- explain ----------------------------------------------------------------------------

def test_explain_names_the_changed_batch_size_and_its_line(env):
    done = lazyrt(env, "explain", example("batch_sizes.py"))
    assert done.returncode == 0, done.stderr
    assert "2 distinct graphs (1 recompile of a call site), 3 graphs executed" in done.stdout
    assert re.search(r"graph 2 .* at batch_sizes.py:19 \(\.item\(\)\): differs from graph 1: "
                     r"input \d shape \(8, 16\) → \(12, 16\), from batch_sizes.py:1[67]",
                     done.stdout), done.stdout
    assert "step 2" in done.stderr  # the script's prints go to stderr: stdout is the report


def test_explain_max_graphs_1_fails_with_the_explanation(env):
    done = lazyrt(env, "explain", example("batch_sizes.py"), "--max-graphs", "1")
    assert done.returncode == 1
    assert "needs more than 1 distinct graph" in done.stderr
    assert "shape (8, 16) → (12, 16)" in done.stderr


def test_lazyrt_max_graphs_guards_a_plain_python_run(env):
    done = subprocess.run([sys.executable, example("batch_sizes.py")], capture_output=True,
                          text=True, env=dict(env, LAZYRT_MAX_GRAPHS="1"), timeout=300)
    assert done.returncode == 1
    assert "GraphLimitError" in done.stderr and "(8, 16) → (12, 16)" in done.stderr


def test_explain_counts_barriers_by_cause_and_fallbacks(env):
    done = lazyrt(env, "explain", example("views_and_fallback.py"))
    out = done.stdout
    assert done.returncode == 0, done.stderr
    for cause, line in (("print", 19), ("bool()", 20), ("float()", 23)):
        assert re.search(rf"1  {re.escape(cause)}\s+views_and_fallback.py:{line}", out), out
    assert re.search(r"1  getitem\[advanced\]\s+views_and_fallback.py:22  \(run by NumPy\)",
                     out), out


# --- kernels and graph ------------------------------------------------------------------

def test_kernels_shows_each_kernel_with_its_lines_and_source_plain_when_piped(env):
    done = lazyrt(env, "kernels", example("views_and_fallback.py"), "--graph", "1", "--bench")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert not ANSI.search(out)
    assert "graph 1 " in out and "graph 2 " not in out
    assert re.search(r"fuses .*views_and_fallback.py:1[78]", out), out
    assert "GB/s" in out and "bytes moved" in out
    if BACKEND == "c":
        assert "void fused_" in out  # the source, verbatim


def test_graph_dot_clusters_each_fusion_group(env):
    done = lazyrt(env, "graph", example("softmax_rows.py"), "--format", "dot", "--graph", "1")
    assert done.returncode == 0, done.stderr
    dot = done.stdout
    assert dot.startswith('digraph "graph_1" {') and dot.rstrip().endswith("}")
    if BACKEND == "c":
        assert "subgraph cluster_0" in dot and 'label="k0_fused_' in dot
    assert "softmax_rows.py:16" in dot and "-> n" in dot


def test_graph_image_without_graphviz_names_what_to_install(env, tmp_path):
    no_dot = dict(PATH=str(tmp_path))  # a PATH without Graphviz's dot
    done = lazyrt(env, "graph", example("softmax_rows.py"), "--format", "svg",
                  extra_env=no_dot, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "lazyrt graph: error: --format svg needs Graphviz's `dot`")
    assert "install the graphviz package" in done.stderr


# --- check ------------------------------------------------------------------------------

@needs_c
def test_check_agrees_on_a_correct_backend(env):
    done = lazyrt(env, "check", example("softmax_rows.py"), "--backend", "c")
    assert done.returncode == 0, done.stderr
    assert "agree with the numpy oracle" in done.stdout


@needs_c
def test_check_bisects_a_broken_lowering_to_its_kernel_and_op(env, tmp_path):
    repro = tmp_path / "repro"
    broken = {"LAZYRT_TEST_BREAK_LOWERING": "exp"}
    done = lazyrt(env, "check", example("softmax_rows.py"), "--backend", "c",
                  "--repro", str(repro), extra_env=broken)
    assert done.returncode == 1
    out = done.stdout
    assert "disagrees with the numpy oracle on c" in out
    kernel = re.search(r"first kernel that differs: (k\d+_fused_\w+)", out)
    assert kernel and "exp" in kernel.group(1), out
    assert re.search(r"first op that differs: %\d+ = exp\(%\d+\) : float32\[32, 64\] at "
                     r"softmax_rows.py:16", out), out
    assert {"repro.py", "graph.txt", "graph.pkl", f"{kernel.group(1)}.c"} <= \
        set(os.listdir(repro))
    assert any(f.startswith("input_") and f.endswith(".npy") for f in os.listdir(repro))
    run = [sys.executable, str(repro / "repro.py")]
    still = subprocess.run(run, env=dict(env, **broken), capture_output=True, text=True,
                           timeout=300)
    assert still.returncode == 1 and "differ" in still.stdout
    fixed = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0 and "agrees with numpy" in fixed.stdout


def test_check_refuses_the_oracle_itself(env):
    done = lazyrt(env, "check", example("softmax_rows.py"), "--backend", "numpy")
    assert done.returncode == 2 and "against the numpy oracle" in done.stderr


# --- cache, doctor, bench ---------------------------------------------------------------

@needs_c
def test_cache_verify_removes_a_truncated_binary(env, tmp_path):
    own = dict(env, LAZYRT_CACHE_DIR=str(tmp_path / "cache"))
    assert lazyrt(own, "run", example("batch_sizes.py")).returncode == 0
    listed = lazyrt(own, "cache", "list", "--backend", "c")
    assert listed.returncode == 0 and "fused_" in listed.stdout
    binaries = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "cache")
                for f in fs if f.endswith(".so")]
    assert binaries
    with open(binaries[0], "r+b") as f:
        f.truncate(100)
    done = lazyrt(own, "cache", "verify")
    assert done.returncode == 0
    assert "binary does not match its checksum" in done.stdout and "1 not trusted" in done.stdout
    assert not os.path.exists(binaries[0])
    assert "0 not trusted" in lazyrt(own, "cache", "verify").stdout
    info = lazyrt(own, "cache", "info")
    assert str(tmp_path / "cache") in info.stdout and "c " in info.stdout
    assert lazyrt(own, "cache", "clear").returncode == 0
    assert "0 entries" in lazyrt(own, "cache", "list").stdout


def test_doctor_prints_one_line_per_check(env):
    done = lazyrt(env, "doctor")
    for check in ("C compiler", "OpenMP", "CPU vectors", "BLAS", "Triton", "JAX",
                  "kernel cache"):
        assert re.search(rf"^(pass|skip|warn|FAIL)\s+{check}\s", done.stdout, re.M), check
    # a check may fail on this machine, but never by crashing, and the exit status says so
    assert not re.search(r"\b[A-Z]\w*Error: ", done.stdout), done.stdout
    failed = re.findall(r"^FAIL\s+(\S.*?)\s{2}", done.stdout, re.M)
    assert done.returncode == (1 if failed else 0), done.stdout
    from lazyrt.backends.triton import cuda_device_present
    if not cuda_device_present():  # no GPU is an expected absence, not a failure
        assert re.search(r"^skip\s+Triton\s+.*no GPU here", done.stdout, re.M), done.stdout


def test_doctor_exits_1_when_a_needed_part_fails(env, tmp_path):
    chosen = {k: v for k, v in env.items() if k != "LAZYRT_BACKEND"}  # lazyrt chooses
    done = lazyrt(chosen, "doctor", extra_env={"CC": str(tmp_path / "no-such-cc")})
    assert done.returncode == 1, done.stdout
    assert re.search(r"^FAIL\s+C compiler\s+.*no-such-cc", done.stdout, re.M), done.stdout
    assert re.search(r"^skip\s+OpenMP\s+no C compiler", done.stdout, re.M), done.stdout
    assert "lazyrt doctor: 1 failed: C compiler" in done.stdout


def test_bench_offers_every_suite_of_the_checkout():
    import bench.__main__ as bench_main
    from lazyrt.cli.machine import BENCH_SUITES
    assert BENCH_SUITES == bench_main.SUITES


def test_bench_names_one_file_per_suite(env):
    done = lazyrt(env, "bench", "--suite", "all", "--json", "x.json")
    assert done.returncode == 2 and "choose one --suite" in done.stderr


def test_bench_runs_a_suite_and_writes_its_results(env, tmp_path):
    out = tmp_path / "record.json"
    done = lazyrt(env, "bench", "--suite", "record", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lazyrt recording cost" in done.stdout and "suite record" in done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert any(r["op"] == "a + b" for r in rows), rows[:2]
