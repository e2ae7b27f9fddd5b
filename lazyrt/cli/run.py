"""``lazyrt run``, ``lazyrt explain`` and ``lazyrt check``: a user's script
run under a watch, and what the watch saw."""
from __future__ import annotations

import json
import os
import sys

from . import output
from .script import run_script


def _observer(**kw):
    from ..observe import Observer
    return Observer(**kw)


def _use_backend(name):
    if name:
        import lazyrt as lr
        lr.set_backend(name)


def cmd_run(args) -> int:
    from ..explain import GraphLimitError
    from ..observe import max_graphs_from_env
    _use_backend(args.backend)
    watcher = _observer(time_launches=bool(args.trace), max_graphs=max_graphs_from_env())
    outcome = run_script(args.script, args.args, watcher, expected=(GraphLimitError,))
    if isinstance(outcome.error, GraphLimitError):
        print(f"lazyrt run: error: {_plain(outcome.error)}", file=sys.stderr)
    if args.dump:
        n = write_dump(watcher, args.dump, args.script, outcome.code)
        print(f"lazyrt run: {n} graphs, summary.json and metrics.txt written to {args.dump}",
              file=sys.stderr)
    if args.trace:
        write_trace(watcher, args.trace)
        print(f"lazyrt run: trace of {watcher.barriers} graph runs written to {args.trace} "
              "(open it in chrome://tracing or ui.perfetto.dev)", file=sys.stderr)
    return outcome.code


def write_dump(watcher, root: str, script: str, code: int) -> int:
    """One folder per distinct graph (the compile record's files, see
    :func:`lazyrt.compile_record.dump_record`), then ``summary.json`` and
    ``metrics.txt``; returns the number of graphs."""
    import lazyrt as lr
    from ..compile_record import dump_record
    os.makedirs(root, exist_ok=True)
    graphs = []
    for g in watcher.graphs:
        if g.record is None:
            continue
        folder = dump_record(g.record, root)
        with open(os.path.join(folder, "why.txt"), "w") as f:
            f.write(str(g.why) + "\n")
        graphs.append({
            "graph": g.no, "key": f"{g.key:016x}", "folder": os.path.basename(folder),
            "backend": g.record.backend, "site": g.site, "cause": g.cause, "runs": g.runs,
            "nodes": len(g.graph.nodes), "ops": g.graph.n_ops,
            "compile_ms": round(g.record.compile_s * 1e3, 3), "why": str(g.why),
            "kernels": [{"name": k.name, "ops": list(k.ops), "fuses": k.comment,
                         "cache": k.cache, "compile_ms": round(k.compile_s * 1e3, 3),
                         "bytes_moved": k.bytes_moved} for k in g.record.kernels]})
    x = watcher.explain()
    summary = {"lazyrt": lr.__version__, "script": script, "exit_code": code,
               "graphs_distinct": len(watcher.graphs), "graphs_executed": watcher.barriers,
               "recompiles": [str(r) for r in x.recompiles],
               "barriers": [{"count": n, "cause": c, "site": s} for n, c, s in x.causes],
               "fallbacks": [{"count": n, "op": op, "site": s} for n, op, s in x.fallbacks],
               "graphs": graphs, "metrics": lr.metrics.snapshot()}
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    with open(os.path.join(root, "metrics.txt"), "w") as f:
        f.write(lr.metrics.report() + "\n")
    with open(os.path.join(root, "explain.txt"), "w") as f:
        f.write(str(x) + "\n")
    return len(graphs)


def write_trace(watcher, path: str):
    """A Chrome/Perfetto trace (JSON object format) of the watched run."""
    import lazyrt as lr
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"traceEvents": watcher.trace_events(), "displayTimeUnit": "ms",
                   "otherData": {"lazyrt": lr.__version__}}, f)


def cmd_explain(args) -> int:
    from ..explain import GraphLimitError
    from ..observe import max_graphs_from_env
    _use_backend(args.backend)
    limit = args.max_graphs if args.max_graphs is not None else max_graphs_from_env()
    watcher = _observer(max_graphs=limit)
    outcome = run_script(args.script, args.args, watcher, stdout_to_stderr=True,
                         expected=(GraphLimitError,))
    print_explanation(watcher.explain())
    if watcher.limit_error is not None:
        print(f"lazyrt explain: error: {_plain(watcher.limit_error)}", file=sys.stderr)
        return outcome.code or 1
    return outcome.code


def print_explanation(x):
    output.heading(f"lazyrt explain: {x.summary()}")
    for title, body in x.sections():
        output.line()
        output.line(f"{title}:", "bold")
        for text in body:
            output.line(f"  {text}")


def cmd_check(args) -> int:
    from .. import check
    backend = args.backend
    import lazyrt as lr
    if backend is None:
        backend = lr.runtime.current_backend_name()
    if backend == "numpy":
        raise _usage("check compares a backend against the numpy oracle: choose another "
                     f"with --backend ({', '.join(b for b in lr.available_backends() if b != 'numpy') or 'none available here'})")
    check.install_test_fault()
    _use_backend(backend)
    checker = check.Checker(args.rtol, args.atol)
    watcher = _observer(checker=checker)
    outcome = run_script(args.script, args.args, watcher, stdout_to_stderr=True,
                         expected=(check.CheckFailed,))
    if isinstance(outcome.error, check.CheckFailed):
        m = outcome.error.mismatch
        if args.repro:
            check.write_repro(m, args.repro, args.rtol, args.atol)
        output.line(f"lazyrt check: {m.lines()[0]}", "bold red")
        for text in m.lines()[1:]:
            output.line(text)
        if m.kernel is not None and m.kernel.source:
            output.line()
            output.line(f"{m.kernel.name} ({m.kernel.language}):", "bold")
            output.source(m.kernel.source, m.kernel.language)
        return 1
    output.line(f"lazyrt check: {checker.runs_checked} graph runs ({len(checker.graphs_checked)} "
                f"distinct graphs) on {backend} agree with the numpy oracle", "green")
    return outcome.code


def _plain(error) -> str:
    """An error's message without its "lazyrt: " prefix (the command names itself)."""
    return str(error).removeprefix("lazyrt: ")


def _usage(message):
    from .script import UsageError
    return UsageError(message)
