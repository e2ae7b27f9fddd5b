"""``lazyrt demo``: a short program a newcomer can read, narrated."""
from __future__ import annotations

import time

import numpy as np


def run_demo(backend_name=None) -> int:
    import lazyrt as lr
    from rich.console import Console
    from rich.table import Table

    out = Console()
    name = backend_name or lr.runtime.current_backend_name()
    lr.set_backend(name)
    lr.metrics.reset()
    out.print(f"[bold]lazyrt {lr.__version__}[/bold] — backend [cyan]{name}[/cyan] "
              f"(available: {', '.join(lr.available_backends())})")
    why = lr.backends.fallback_reason(name)
    if why:  # the default fell back to the slow interpreter: say why, and what to do
        out.print(f"the slow fallback, because {why}", style="yellow", markup=False,
                  highlight=False, soft_wrap=True)
    out.print()

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((256, 512)).astype(np.float32)
    w_np = rng.standard_normal(512).astype(np.float32)

    def step(x, w, scale):
        y = lr.nn.relu(x * scale + 1.0) * 0.5 - x      # a 5-op pointwise chain
        return lr.nn.softmax(y * w, axis=-1)           # a row softmax on top

    out.print("1. Record: [italic]y = softmax((relu(x*scale+1)*0.5 - x) * w)[/italic]")
    t0 = time.perf_counter()
    y = step(lr.tensor(x_np), lr.tensor(w_np), 2.0)
    t_record = time.perf_counter() - t0
    snap = lr.metrics.snapshot()
    out.print(f"   {snap['ops_recorded']} ops recorded in {t_record * 1e6:.0f} µs; "
              f"graphs executed so far: [bold]{snap['graphs_executed']}[/bold] (nothing ran)\n")

    out.print("2. The captured graph (what a barrier hands the compiler):")
    from lazyrt._capture import capture
    from lazyrt.graph import Graph
    be = lr.backends.get(name)
    graph = Graph.from_capture(capture([y._node], be.salt))
    out.print(graph.describe(), markup=False, highlight=False)
    out.print()

    out.print("3. Materialize (y.numpy() is a barrier): capture → key → compile → run")
    before = lr.metrics.snapshot()
    t0 = time.perf_counter()
    first = y.numpy()
    t_first = time.perf_counter() - t0
    after = lr.metrics.snapshot()
    compiled = after["compiles"] - before["compiles"]
    from_disk = after["disk_cache_hits"] - before["disk_cache_hits"]
    if compiled:
        how = f"program cache miss: {compiled} kernel(s) compiled"
    elif from_disk:
        how = f"program cache miss: {from_disk} kernel(s) loaded from the disk cache"
    else:
        how = "program cache miss: planned (this backend compiles nothing)"
    out.print(f"   first run: {t_first * 1e3:.2f} ms ({how})")

    out.print("4. Same program, new data and a new Python scalar: same key, cache hit")
    x2 = rng.standard_normal((256, 512)).astype(np.float32)
    t0 = time.perf_counter()
    second = step(lr.tensor(x2), lr.tensor(w_np), 3.0).numpy()
    t_second = time.perf_counter() - t0
    snap = lr.metrics.snapshot()
    out.print(f"   second run: {t_second * 1e3:.2f} ms; cache hits {snap['cache_hits']}, "
              f"misses {snap['cache_misses']}\n")

    out.print("5. Checked against eager NumPy:")
    ok = True
    for label, xv, s, got in (("first", x_np, 2.0, first), ("second", x2, 3.0, second)):
        z = (np.maximum(xv * s + 1.0, 0) * 0.5 - xv) * w_np
        e = np.exp(z - z.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        err = float(np.max(np.abs(got - ref)))
        good = np.allclose(got, ref, rtol=1e-5, atol=1e-6)
        ok &= good
        out.print(f"   {label}: max abs error {err:.2e} — "
                  f"{'[green]OK[/green]' if good else '[red]MISMATCH[/red]'}")

    t0 = time.perf_counter()
    for _ in range(20):
        step(lr.tensor(x2), lr.tensor(w_np), 3.0).numpy()
    t_lazy = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    for _ in range(20):
        z = (np.maximum(x2 * 3.0 + 1.0, 0) * 0.5 - x2) * w_np
        e = np.exp(z - z.max(-1, keepdims=True))
        e / e.sum(-1, keepdims=True)
    t_np = (time.perf_counter() - t0) / 20

    table = Table(title="timings")
    table.add_column("what")
    table.add_column("ms", justify="right")
    table.add_row("record only", f"{t_record * 1e3:.3f}")
    table.add_row("first call (compile + run)", f"{t_first * 1e3:.3f}")
    table.add_row("cached step (record + run)", f"{t_lazy * 1e3:.3f}")
    table.add_row("eager NumPy step", f"{t_np * 1e3:.3f}")
    out.print(table)
    out.print(lr.metrics.report(), markup=False, highlight=False)
    return 0 if ok else 1
