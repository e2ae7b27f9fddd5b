"""Why a pytest-xdist worker died, printed where a CI log's tail shows it.

When a worker process dies (a segfault or abort inside XLA, LLVM or a generated
kernel; the kernel's OOM killer), pytest-xdist reports only the test it was
running, and Python's fault-handler dump lands in the middle of the log. Here
each worker writes its fault-handler dump, and the test it is running with its
peak memory so far, to files of its own; a worker that ends normally removes
them. The controller prints what dead workers left at the very end of the run.

Loaded by ``conftest.py`` (``pytest_plugins``); without xdist it does nothing.
"""
from __future__ import annotations

import faulthandler
import os
import resource
import shutil
import tempfile

_DIR = "LAZYRT_WORKER_DEATHS"  # the folder, passed to the workers in the environment
_files = {}


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:  # the controller: the workers it starts inherit the folder
        if getattr(config.option, "numprocesses", None):
            os.environ[_DIR] = tempfile.mkdtemp(prefix="lazyrt-workers-")
        return
    folder = os.environ.get(_DIR)
    if folder:
        stem = os.path.join(folder, f"{worker}-{os.getpid()}")
        _files["fault"] = open(f"{stem}.fault", "w")
        _files["last"] = open(f"{stem}.last", "w")


def pytest_sessionstart(session):
    if "fault" in _files:  # after pytest's own faulthandler plugin enabled it on stderr
        faulthandler.enable(file=_files["fault"], all_threads=True)


def pytest_runtest_logstart(nodeid, location):
    last = _files.get("last")
    if last is not None:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        last.seek(0)
        last.truncate()
        last.write(f"{nodeid}\n{peak_mib}\n")
        last.flush()


def pytest_unconfigure(config):
    if _files:  # a worker ending normally: nothing to report
        faulthandler.disable()
        for f in _files.values():
            f.close()
            os.unlink(f.name)
        _files.clear()


def pytest_terminal_summary(terminalreporter):
    folder = os.environ.get(_DIR)
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or not folder \
            or not os.path.isdir(folder):
        return
    write = terminalreporter.write_line
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".last"):
            continue
        stem = os.path.join(folder, name[:-len(".last")])
        with open(f"{stem}.last") as f:
            test, peak_mib = (f.read().split("\n") + ["", ""])[:2]
        dump = ""
        if os.path.exists(f"{stem}.fault"):
            with open(f"{stem}.fault") as f:
                dump = f.read()
        terminalreporter.section(f"worker {name[:-len('.last')]} died", sep="!")
        write(f"last test started: {test or '(none)'}; its peak memory so far: {peak_mib} MiB")
        if dump.strip():
            for line in _current_thread_first(dump)[:40]:
                write(f"  {line}")
        else:
            write("no fault-handler dump: a signal Python cannot catch ended it "
                  "(SIGKILL: the out-of-memory killer?)")
    shutil.rmtree(folder, ignore_errors=True)


def _current_thread_first(dump: str) -> list[str]:
    """The dump's lines: its header, the crashing thread's stack (newest call
    first), then the other threads' newest frames, one line each."""
    header, blocks = [], []
    for line in dump.rstrip().splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append([line])
        elif blocks:
            if line.strip():
                blocks[-1].append(line)
        else:
            header.append(line)
    current = [b for b in blocks if b[0].startswith("Current")]
    others = [f"{b[0]} {b[1].strip() if len(b) > 1 else ''}" for b in blocks
              if not b[0].startswith("Current")]
    return header + [line for b in current for line in b] + others
