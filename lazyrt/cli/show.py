"""``lazyrt kernels`` and ``lazyrt graph``: what each distinct graph of a run
compiled to, read from its compile record."""
from __future__ import annotations

import os
import shutil
import subprocess
from time import perf_counter

import numpy as np

from . import output
from .script import CommandError, UsageError, run_script


def _watched_run(args):
    from ..observe import Observer
    if args.backend:
        import lazyrt as lr
        lr.set_backend(args.backend)
    watcher = Observer()
    outcome = run_script(args.script, args.args, watcher, stdout_to_stderr=True)
    graphs = [g for g in watcher.graphs if g.record is not None]
    if args.graph is not None:
        if args.graph > len(graphs):
            raise UsageError(f"--graph {args.graph}: the run compiled {len(graphs)} graph"
                             f"{'s' if len(graphs) != 1 else ''}")
        graphs = [graphs[args.graph - 1]]
    return outcome, graphs


def _title(g) -> str:
    from ..explain import short
    r = g.record
    return (f"graph {g.no} ({g.key:016x}) at {short(g.site)} ({g.cause}): "
            f"{len(r.kernels)} kernels on {r.backend}, compiled in {r.compile_s * 1e3:.1f} ms, "
            f"ran {g.runs}x")


# --- kernels --------------------------------------------------------------------------

def random_params(graph, seed=0) -> list:
    """Random inputs of the graph's recorded shapes and dtypes (runtime scalars: 0.5 or 1)."""
    from .. import dtypes as D
    from .. import ops
    rng = np.random.default_rng(seed)
    out = []
    for i in graph.params:
        n = graph.nodes[i]
        dt = np.dtype(D.DTYPES[n.dtype])
        is_float = n.dtype in D.FLOATING  # bfloat16 (ml_dtypes') is NumPy kind "V"
        if n.op is ops.SCALAR:
            out.append(0.5 if is_float else True if dt.kind == "b" else 1)
        elif is_float:
            out.append(rng.standard_normal(n.shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.random(n.shape) < 0.5)
        else:
            out.append(rng.integers(0, 10, n.shape).astype(dt))
    return out


def bench_kernels(g, repeats=5) -> dict:
    """``name -> best seconds`` of each launch, run on random inputs of the
    recorded shapes (each launch timed on its own, synchronized)."""
    import lazyrt as lr
    program = lr.runtime.program_cache.get(g.key) or \
        lr.backends.get(g.record.backend).compile(g.graph)
    params = random_params(g.graph)
    program.run(params)  # warm: first-launch costs are not the kernel's
    best = {}

    def report(name, seconds, nbytes):
        best[name] = min(best.get(name, float("inf")), seconds)
    deadline = perf_counter() + 2.0
    for _ in range(repeats):
        program.run(params, report)
        if perf_counter() > deadline:
            break
    return best


def _bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def cmd_kernels(args) -> int:
    outcome, graphs = _watched_run(args)
    for g in graphs:
        kernels = [k for k in g.record.kernels if not args.kernel or args.kernel in k.name]
        if not kernels:
            continue
        output.line()
        output.heading(_title(g))
        times = bench_kernels(g) if args.bench else {}
        columns = ["kernel", "fuses (user lines)", "bytes moved", "cache", "compile ms"]
        if args.bench:
            columns += ["time µs", "GB/s"]
        rows = []
        for k in kernels:
            row = [k.name, k.comment or ", ".join(k.ops), _bytes(k.bytes_moved), k.cache,
                   f"{k.compile_s * 1e3:.2f}"]
            if args.bench:
                t = times.get(k.name)
                row += ["-", "-"] if t is None else \
                    [f"{t * 1e6:.1f}", f"{k.bytes_moved / t / 1e9:.2f}" if t > 0 else "-"]
            rows.append(row)
        output.table(columns, rows)
        if args.no_source:
            continue
        for k in kernels:
            if k.source:
                output.line()
                output.line(f"--- {k.name} ({k.language}) ---", "bold")
                output.source(k.source, k.language)
    if args.kernel and not any(args.kernel in k.name for g in graphs for k in g.record.kernels):
        raise UsageError(f"--kernel {args.kernel}: no kernel of the chosen graphs has that "
                         "name; `lazyrt kernels SCRIPT --no-source` lists them")
    return outcome.code


# --- graph ----------------------------------------------------------------------------

def fusion_groups(g) -> dict:
    """node -> (step number, kernel name) of the first step that computes it."""
    from ..check import step_nodes
    per_step = step_nodes(g.graph, g.record.plan) or []
    group = {}
    for k, (written, fused) in enumerate(per_step):
        for i in list(fused) + list(written):
            group.setdefault(i, (k, g.record.kernels[k].name))
    return group


def _dot_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(g) -> str:
    """The graph in DOT: one box per node (op, type, user line), params as
    ellipses, outputs doubled, each fusion group a cluster named by its kernel."""
    from .. import ops
    from ..explain import short
    graph = g.graph
    group = fusion_groups(g)
    params = {p: k for k, p in enumerate(graph.params)}
    outputs = set(graph.outputs)
    lines = [f'digraph "graph_{g.no}" {{',
             f'  label="{_dot_label(_title(g))}"; labelloc=t; rankdir=TB;',
             '  node [shape=box, fontname="monospace", fontsize=10];']
    decl = {}
    for i, n in enumerate(graph.nodes):
        ty = f"{n.dtype_name}{list(n.shape)}"
        if i in params:
            text, shape = f"%{i} param {params[i]} ({n.op.name})\n{ty}", "ellipse"
        elif n.op is ops.CONST:
            text, shape = f"%{i} const {n.value!r}\n{ty}", "plaintext"
        else:
            text, shape = f"%{i} {n.op.name}\n{ty}", "box"
        if n.source:
            text += f"\n{short(n.source)}"
        extra = ", peripheries=2" if i in outputs else ""
        decl[i] = f'n{i} [label="{_dot_label(text)}", shape={shape}{extra}];'
    clusters = {}
    for i, (k, name) in group.items():
        clusters.setdefault((k, name), []).append(i)
    for (k, name), members in sorted(clusters.items()):
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f'    label="{_dot_label(name)}"; style=rounded; color=blue;')
        lines += [f"    {decl.pop(i)}" for i in sorted(members) if i in decl]
        lines.append("  }")
    lines += [f"  {d}" for _, d in sorted(decl.items())]
    for i, n in enumerate(graph.nodes):
        lines += [f"  n{j} -> n{i};" for j in n.inputs]
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text(g) -> str:
    groups = {}
    for i, (k, name) in fusion_groups(g).items():
        groups.setdefault((k, name), []).append(i)
    lines = [_title(g), g.record.graph_text, "fusion groups:"]
    lines += [f"  {name}: " + ", ".join(f"%{i}" for i in sorted(members))
              for (k, name), members in sorted(groups.items())] or ["  (none: one launch per op)"]
    lines.append(g.record.plan_text)
    return "\n".join(lines) + "\n"


def _numbered(path: str, no: int, many: bool) -> str:
    if not many:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}-{no}{ext}"


def cmd_graph(args) -> int:
    outcome, graphs = _watched_run(args)
    many = len(graphs) > 1
    if args.format in ("text", "dot"):
        render = to_text if args.format == "text" else to_dot
        text = "\n".join(render(g) for g in graphs)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text)
        else:
            print(text, end="")
        return outcome.code
    dot = shutil.which("dot")
    if dot is None:
        raise CommandError(f"--format {args.format} needs Graphviz's `dot`, which is not "
                           "installed: install the graphviz package (apt-get install graphviz, "
                           "brew install graphviz, conda install graphviz), or use --format dot")
    for g in graphs:
        path = _numbered(args.output or f"graph-{g.no}.{args.format}", g.no,
                         many and bool(args.output))
        done = subprocess.run([dot, f"-T{args.format}", "-o", path], input=to_dot(g),
                              text=True, capture_output=True)
        if done.returncode:
            raise CommandError(f"dot failed on graph {g.no}: {done.stderr.strip()}")
        print(f"graph {g.no}: {path}")
    return outcome.code
