"""Per-kernel roofline of a lazy training step, by kernel class, beside eager's
time for the same kind of ops (issue 38).

For one model case (bench/torch_models.py), the lazy front-end's step
(``lazyrt-c``: the whole step is one graph at ``mark_step``) runs a few times
under ``lr.debug.watch(time_launches=True)``; every launch of the step's graph
gets its median time, and from its plan step:

* its class: ``products`` (BLAS), ``reductions`` (a kernel with reduced axes or
  a scan), ``pointwise``, ``gathers/scatters`` (a kernel that gathers, or a
  scatter/gather step), ``host`` (concat, setslice: NumPy on the host);
* its bytes: what the launch reads and writes, re-reads a fusion causes
  included (``bytes_moved``: an input read through a broadcast or a gather is
  counted once per element the kernel loads; plus ``reread_bytes``: a
  reduction kernel's input read again by each later pass over the row, a
  LayerNorm's input three times);
* its flops (products: 2mnk per batch; kernels: one per body op per element);
* the cache level its data lives in: the smallest of L2 (per core), L3 or DRAM
  that holds its bytes, and that level's bandwidth, measured on this host at
  the start of the run (``torch.add(a, b, out=c)`` on the same threads, at a
  working set of half the L2s, 8x the L2s, and 256 MiB); the *fraction of
  bound* is the time the bytes need at that bandwidth over the measured time.

Eager's side is ``torch.profiler`` on the eager step: the self time of each
aten op, classed the same way (mm/bmm/addmm/attention: products; norms,
softmax, sums, losses: reductions; embedding and index ops: gathers/scatters;
the rest: pointwise; AdamW's ``_foreach_*``: pointwise).

``python -m bench --suite torch`` prints the class table per model; run this
module alone for the kernel list too::

    python -m bench.kernel_profile "GPT b8x64" --top 25
"""
from __future__ import annotations

import os
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from lazyrt.codegen.layout import reread_bytes

CLASSES = ("products", "reductions", "pointwise", "gathers/scatters", "host")
WATCHED_STEPS = 7
WARM_STEPS = 3

_PRODUCT_OPS = ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "dot", "addmv", "mv",
                "scaled_dot_product", "efficient_attention", "flash_attention")
_REDUCTION_OPS = ("sum", "mean", "var", "std", "norm", "softmax", "log_softmax", "layer_norm",
                  "nll_loss", "cross_entropy", "max", "min", "amax", "amin", "argmax", "cumsum",
                  "logsumexp", "prod", "_foreach_norm", "batch_norm")
_GATHER_OPS = ("embedding", "index", "gather", "scatter", "take", "masked_select", "put")


def aten_class(name: str) -> str:
    """The kernel class of an aten op by name (``aten::native_layer_norm`` ...)."""
    op = name.split("::")[-1].split(".")[0]
    if op.startswith("_foreach_") and op != "_foreach_norm":
        return "pointwise"
    core = op.lstrip("_")
    core = core[len("native_"):] if core.startswith("native_") else core
    if any(core == p or core.startswith(p) for p in _PRODUCT_OPS):
        return "products"
    if any(core == p or core.startswith(p + "_") or core.startswith(p + "backward")
           for p in _REDUCTION_OPS):
        return "reductions"
    if any(p in core for p in _GATHER_OPS):
        return "gathers/scatters"
    return "pointwise"


def step_class(step) -> str:
    """The kernel class of one plan step."""
    from lazyrt.planner.schedule import KernelStep, MatmulStep
    if isinstance(step, MatmulStep):
        return "products"
    if isinstance(step, KernelStep):
        ops = {b.op for b in step.spec.body}
        if "gather" in ops:
            return "gathers/scatters"
        if step.spec.reduce_axes or "scan" in ops:
            return "reductions"
        return "pointwise"
    from lazyrt.backends import gather_scatter
    if getattr(step, "kind", None) in gather_scatter.KINDS:
        return "gathers/scatters"
    return "host"


def step_flops(step, buffers) -> int:
    from lazyrt.planner.schedule import KernelStep, MatmulStep
    import numpy as np
    if isinstance(step, MatmulStep):
        a, b = step.a.view.shape, step.b.view.shape
        out = buffers[step.out].shape
        return 2 * int(np.prod(out, dtype=np.int64)) * int(a[-1])
    if isinstance(step, KernelStep):
        work = int(np.prod(step.spec.domain, dtype=np.int64))
        return work * sum(1 for b in step.spec.body
                          if b.op not in ("load", "scalar", "const", "gather"))
    return 0


# -- this host's cache levels and their bandwidths ------------------------------------

def cache_sizes() -> dict:
    """{"L2": bytes per core, "L3": bytes} from sysfs (defaults when absent)."""
    sizes = {"L2": 1 << 20, "L3": 32 << 20}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            path = os.path.join(base, entry)
            if not entry.startswith("index"):
                continue
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip()
            n = int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(
                text[-1], 1)
            if level in (2, 3) and kind in ("Unified", "Data"):
                sizes[f"L{level}"] = n
    except OSError:
        pass
    return sizes


def level_bandwidths(threads: int, repeats: int = 15) -> dict:
    """{level: (working-set bytes, bytes/s)}: ``torch.add(a, b, out=c)`` (two
    reads, one write) at half of each cache level, and at 256 MiB for DRAM."""
    import torch
    sizes = cache_sizes()
    # a VM's L3 is the socket's, shared with its other tenants: measured at 8x
    # this process's L2, not at half of all of it
    sets = {"L2": sizes["L2"] * threads // 2,
            "L3": min(sizes["L3"] // 2, 8 * sizes["L2"] * threads), "DRAM": 256 << 20}
    out = {}
    for level, nbytes in sets.items():
        n = max(1024, nbytes // 12)
        a, b, c = torch.rand(n), torch.rand(n), torch.empty(n)
        inner = max(1, int(2e6 // n))
        for _ in range(3):
            torch.add(a, b, out=c)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                torch.add(a, b, out=c)
            ts.append((time.perf_counter() - t0) / inner)
        out[level] = (12 * n, 12 * n / statistics.median(ts))
    return out


def level_of(nbytes: int, bandwidths: dict) -> str:
    for level in ("L2", "L3"):
        if nbytes <= 2 * bandwidths[level][0]:
            return level
    return "DRAM"


# -- the lazy step -----------------------------------------------------------------------

@dataclass
class KernelRow:
    index: int
    name: str
    cls: str
    ms: float
    nbytes: int          # distinct bytes read and written, plus every re-read
    flops: int
    reread: int = 0      # of nbytes: what walks after a reduction's first pass read again
    level: str = ""
    fraction: float = 0.0
    note: str = ""


@dataclass
class StepProfile:
    model: str
    kernels: list = field(default_factory=list)
    mark_step_ms: float = 0.0     # median mark_step wall time: kernels + barrier
    eager_step_ms: float = 0.0    # median eager step, interleaved with the lazy ones
    eager_classes: dict = field(default_factory=dict)  # class -> (ops, ms per step)
    graphs_per_step: int = 0

    def classes(self) -> dict:
        """class -> (launches, ms per step)."""
        n, ms = Counter(), Counter()
        for k in self.kernels:
            n[k.cls] += 1
            ms[k.cls] += k.ms
        return {c: (n[c], ms[c]) for c in CLASSES if n[c] or c in self.eager_classes}


def profile_lazy_step(case, bandwidths: dict, steps: int = WATCHED_STEPS) -> StepProfile:
    """Kernels of the lazy front-end's step of ``case``, on the C backend."""
    import torch
    import lazyrt as lr
    import lazyrt.torch as lt
    from bench.torch_peers import LR
    lr.set_backend("c")
    model = lt.lazy(case.build())
    x, y = (t.to("lazy") for t in case.batch())
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    emodel = case.build()
    ex, ey = case.batch()
    eopt = torch.optim.AdamW(emodel.parameters(), lr=LR)

    def lazy_step():
        loss = case.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t0 = time.perf_counter()
        lt.mark_step()
        return time.perf_counter() - t0

    def eager_step():
        t0 = time.perf_counter()
        loss = case.loss(emodel(ex), ey)
        eopt.zero_grad()
        loss.backward()
        eopt.step()
        return time.perf_counter() - t0

    for _ in range(WARM_STEPS):
        lazy_step()
        eager_step()
    times, marks, eager, record = defaultdict(list), [], [], None
    for _ in range(steps):
        eager.append(eager_step())
        with lr.debug.watch(time_launches=True) as run:
            marks.append(lazy_step())
        events = [e for e in run.events if e.launches]
        event = max(events, key=lambda e: len(e.launches))
        record = event.graph.record
        for i, (_, _, seconds, _) in enumerate(event.launches):
            times[i].append(seconds)
    prof = StepProfile(case.name, mark_step_ms=statistics.median(marks) * 1e3,
                       eager_step_ms=statistics.median(eager) * 1e3,
                       graphs_per_step=len(events))
    the_plan = record.plan
    for i, (step, kernel) in enumerate(zip(the_plan.steps, record.kernels)):
        ms = statistics.median(times[i]) * 1e3
        spec = getattr(step, "spec", None)
        again = reread_bytes(spec) if spec is not None else 0
        row = KernelRow(i, kernel.name, step_class(step), ms, kernel.bytes_moved + again,
                        step_flops(step, the_plan.buffers), again,
                        note=getattr(spec, "comment", "") or "")
        if row.nbytes and row.cls != "products":
            row.level = level_of(kernel.bytes_moved, bandwidths)  # where the data lives
            row.fraction = row.nbytes / bandwidths[row.level][1] / (ms / 1e3) if ms else 0.0
        prof.kernels.append(row)
    prof.eager_classes = eager_classes(emodel, eopt, case, ex, ey)
    return prof


def eager_classes(model, opt, case, x, y, steps: int = 3) -> dict:
    """class -> (aten calls, self ms per step) of eager's step (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    def step():
        loss = case.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    step()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps):
            step()
    n, us = Counter(), Counter()
    for e in p.key_averages():
        if not e.key.startswith("aten::") or e.self_cpu_time_total <= 0:
            continue
        c = aten_class(e.key)
        n[c] += e.count
        us[c] += e.self_cpu_time_total
    return {c: (n[c] // steps, us[c] / steps / 1e3) for c in CLASSES if n[c]}


# -- printing ---------------------------------------------------------------------------

def class_rows(prof: StepProfile) -> list[dict]:
    rows = []
    for c, (n, ms) in prof.classes().items():
        en, ems = prof.eager_classes.get(c, (0, 0.0))
        rows.append({"model": prof.model, "class": c, "launches": n, "ms": ms,
                     "eager_ops": en, "eager_ms": ems,
                     "vs_eager": ms / ems if ems else None})
    return rows


def summary(prof: StepProfile) -> dict:
    kernels_ms = sum(k.ms for k in prof.kernels)
    bound = [k for k in prof.kernels if k.cls in ("pointwise", "reductions", "gathers/scatters")
             and k.level]
    return {"model": prof.model, "kernels": len(prof.kernels), "kernels_ms": kernels_ms,
            "mark_step_ms": prof.mark_step_ms, "eager_step_ms": prof.eager_step_ms,
            "mark_step_vs_eager": prof.mark_step_ms / prof.eager_step_ms,
            "graphs_per_step": prof.graphs_per_step,
            "below_half_bound": sum(1 for k in bound if k.fraction < 0.5),
            "bound_kernels": len(bound)}


def print_profile(prof: StepProfile, bandwidths: dict, top: int = 0) -> None:
    from bench import report
    s = summary(prof)
    report.console.print(
        f"[bold]{prof.model}[/]: lazy mark_step (kernels + barrier) {s['mark_step_ms']:.2f} ms = "
        f"{s['mark_step_vs_eager']:.2f}x eager's whole step ({s['eager_step_ms']:.2f} ms); "
        f"{s['kernels']} launches, {s['kernels_ms']:.2f} ms; {s['below_half_bound']} of "
        f"{s['bound_kernels']} pointwise/reduction/gather kernels below 50% of their bound")
    report.print_table(
        f"{prof.model}: time per step by kernel class",
        ["class", "lazyrt launches", "lazyrt ms", "eager aten ops", "eager ms", "lazyrt/eager"],
        [[r["class"], r["launches"], f"{r['ms']:.3f}", r["eager_ops"], f"{r['eager_ms']:.3f}",
          f"{r['vs_eager']:.2f}" if r["vs_eager"] else "-"] for r in class_rows(prof)])
    if top:
        worst = sorted(prof.kernels, key=lambda k: -k.ms)[:top]
        report.print_table(
            f"{prof.model}: the {top} slowest launches",
            ["#", "kernel", "class", "ms", "bytes", "GB/s", "level", "of bound", "fuses"],
            [[k.index, k.name[:40], k.cls, f"{k.ms:.3f}", _kb(k.nbytes),
              f"{k.nbytes / k.ms / 1e6:.1f}" if k.ms else "-", k.level or "-",
              f"{k.fraction:.0%}" if k.level else "-", k.note[:60]] for k in worst])


def print_bandwidths(bandwidths: dict) -> None:
    from bench import report
    report.console.print("cache-level bandwidths here (torch.add, 2 reads + 1 write): " + ", ".join(
        f"{lvl} {bw / 1e9:.0f} GB/s at {_kb(n)}" for lvl, (n, bw) in bandwidths.items()))


def _kb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def run(cases, threads: int, top: int = 0) -> list[dict]:
    bandwidths = level_bandwidths(threads)
    print_bandwidths(bandwidths)
    out = []
    for case in cases:
        prof = profile_lazy_step(case, bandwidths)
        print_profile(prof, bandwidths, top)
        out.append({"summary": summary(prof), "classes": class_rows(prof),
                    "kernels": [vars(k) for k in prof.kernels]})
    return out


def main(argv=None) -> None:
    import argparse
    import torch
    from bench.torch_models import model_cases
    p = argparse.ArgumentParser(prog="python -m bench.kernel_profile")
    p.add_argument("models", nargs="*", help="model names or prefixes (default: every model)")
    p.add_argument("--top", type=int, default=25, help="list the N slowest launches")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cases = [c for c in model_cases()
             if not args.models or any(c.name.startswith(m) for m in args.models)]
    run(cases, args.threads, args.top)


if __name__ == "__main__":
    main()
