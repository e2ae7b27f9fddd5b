"""Which backend runs, and what the user is told about it (issue 9, items 8 and 9).

The default is ``triton`` with a usable GPU, else ``c`` with a C compiler,
else the slow ``numpy`` interpreter — and falling back to it is never silent.
``$CC`` is read the way the compiler reads it (a command with flags; empty
means unset). A kernel cache that cannot be created costs speed, not
correctness: a private temporary cache is used, with a warning.

Each test runs a fresh interpreter with its own environment: the backend is
chosen once per process, and ``$CC``/``$HOME`` are read at that moment.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

# Two barriers on the default backend, on any machine: the GPU probe says no,
# so the choice is between c and numpy. Prints what happened as JSON.
CHILD = r"""
import json, os, stat, sys, warnings
caught = []
warnings.simplefilter("always")
warnings.showwarning = lambda msg, cat, *rest, **kw: caught.append([cat.__name__, str(msg)])
import numpy as np
import lazyrt as lr
from lazyrt.backends import triton
triton.cuda_device_present = lambda: False
out = {}
try:
    x = lr.tensor(np.arange(4.0))
    out["values"] = [(x * 2 + 1).numpy().tolist(), (x * 3).numpy().tolist()]
except lr.LazyrtError as e:
    out["error"] = [type(e).__name__, str(e)]
out["backend"] = lr.runtime.current_backend_name() if "error" not in out else None
out["warnings"] = caught
if out["backend"] == "c":
    folder = lr.backends.get("c").compiler.write_dir
    out["write_dir"] = folder
    out["write_dir_modes"] = [oct(stat.S_IMODE(os.stat(d).st_mode))
                              for d in (os.path.dirname(folder), folder)]
if "error" not in out:
    out["report"] = lr.metrics.report()
print(json.dumps(out))
"""

VALUES = [[1.0, 3.0, 5.0, 7.0], [0.0, 3.0, 6.0, 9.0]]


def child_env(tmp_path, **changes):
    """The test's environment for a child: a private kernel cache, no backend or
    compiler chosen, then ``changes`` (a value of None removes the variable)."""
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(tmp_path / "cache"))
    for var in ("LAZYRT_BACKEND", "CC", "LAZYRT_DEBUG", "LAZYRT_DUMP_DIR"):
        env.pop(var, None)
    for var, value in changes.items():
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    return env


def run_child(env, script=CHILD, expect_ok=True):
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    if not expect_ok:
        return out
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on PATH")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc on PATH")


# --- $CC ------------------------------------------------------------------------

@needs_gcc
def test_cc_with_flags_selects_the_c_backend(tmp_path):
    out = run_child(child_env(tmp_path, CC="gcc -O2"))
    assert out["backend"] == "c" and out["values"] == VALUES
    assert out["warnings"] == []


@needs_cc
def test_empty_cc_means_the_default_compiler(tmp_path):
    out = run_child(child_env(tmp_path, CC=""))
    assert out["backend"] == "c" and out["values"] == VALUES
    assert out["warnings"] == []


# --- falling back to numpy is never silent -----------------------------------------

def _assert_one_fallback_warning(out, *words):
    assert out["backend"] == "numpy" and out["values"] == VALUES
    (warning,) = out["warnings"]  # one, though two graphs ran
    assert warning[0] == "PerformanceWarning"
    for w in ("numpy", "apt-get install gcc", "LAZYRT_BACKEND=numpy") + words:
        assert w in warning[1], warning[1]


def test_missing_compiler_in_cc_falls_back_to_numpy_with_one_warning(tmp_path):
    out = run_child(child_env(tmp_path, CC="/nonexistent/bin/cc -O2"))
    _assert_one_fallback_warning(out, "/nonexistent/bin/cc", "$CC")


def test_no_compiler_on_path_falls_back_to_numpy_with_one_warning(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    out = run_child(child_env(tmp_path, PATH=str(empty)))
    _assert_one_fallback_warning(out, "'cc'", "PATH")


def test_chosen_numpy_backend_does_not_warn(tmp_path):
    out = run_child(child_env(tmp_path, LAZYRT_BACKEND="numpy", CC="/nonexistent/bin/cc"))
    assert out["backend"] == "numpy" and out["warnings"] == []


# --- the backend in use is shown -------------------------------------------------

def _backend_line(report):
    (line,) = [ln for ln in report.splitlines() if ln.startswith("backend")]
    return line


@needs_cc
def test_metrics_report_names_the_backend(tmp_path):
    out = run_child(child_env(tmp_path))
    assert _backend_line(out["report"]).split()[1] == "c"


def test_metrics_report_says_why_it_fell_back_to_numpy(tmp_path):
    out = run_child(child_env(tmp_path, CC="/nonexistent/bin/cc"))
    line = _backend_line(out["report"])
    assert line.split()[1] == "numpy" and "/nonexistent/bin/cc" in line


def test_demo_names_the_backend_and_why_it_fell_back_to_numpy(tmp_path):
    env = child_env(tmp_path, CC="/nonexistent/bin/cc")
    out = subprocess.run([sys.executable, "-m", "lazyrt.cli", "demo"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    head, why = out.stdout.splitlines()[:2]
    assert "backend numpy" in head, head
    assert "/nonexistent/bin/cc" in why and "apt-get install gcc" in why, why
    assert any(ln.startswith("backend") and "numpy" in ln for ln in out.stdout.splitlines())


# --- a kernel cache that cannot be created -----------------------------------------

def _assert_private_temp_cache(out, unwritable):
    assert out["backend"] == "c" and out["values"] == VALUES
    (warning,) = out["warnings"]
    assert warning[0] == "PerformanceWarning"
    for words in (unwritable, "temporary", "LAZYRT_CACHE_DIR", out["write_dir"]):
        assert words in warning[1], warning[1]
    assert out["write_dir"].startswith(tempfile.gettempdir())
    assert out["write_dir_modes"] == ["0o700", "0o700"]
    assert not os.path.exists(out["write_dir"])  # removed when the process ended


@needs_cc
def test_unwritable_home_uses_a_private_temp_cache_with_a_warning(tmp_path):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    home = not_a_dir / "home"  # cannot be created, whoever runs this (root too)
    env = child_env(tmp_path, HOME=str(home), LAZYRT_CACHE_DIR=None, XDG_CACHE_HOME=None)
    _assert_private_temp_cache(run_child(env), str(home / ".cache" / "lazyrt"))


@needs_cc
def test_unwritable_lazyrt_cache_dir_uses_a_private_temp_cache_with_a_warning(tmp_path):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    cache = not_a_dir / "cache"
    out = run_child(child_env(tmp_path, LAZYRT_CACHE_DIR=str(cache)))
    _assert_private_temp_cache(out, str(cache))


# --- $LAZYRT_BACKEND --------------------------------------------------------------

def test_unknown_lazyrt_backend_fails_at_import_naming_the_variable(tmp_path):
    out = run_child(child_env(tmp_path, LAZYRT_BACKEND="cuda"), "import lazyrt",
                    expect_ok=False)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("lazyrt.errors.BackendError"), out.stderr
    for words in ("LAZYRT_BACKEND", "'cuda'", "numpy", "c"):
        assert words in last, last


def test_unavailable_lazyrt_backend_names_the_variable_and_why(tmp_path):
    out = run_child(child_env(tmp_path, LAZYRT_BACKEND="c", CC="/nonexistent/bin/cc"))
    kind, msg = out["error"]
    assert kind == "BackendError"
    assert "LAZYRT_BACKEND" in msg and "/nonexistent/bin/cc" in msg
