"""The fixed costs of ``torch.compile(backend="lazyrt")`` beside TorchInductor's
(part of ``--suite torch``):

* **per call**: a compiled 10-op elementwise function on 16 float32 elements,
  where the call's own machinery (Dynamo's guards, AOTAutograd's wrapper, binding
  the inputs, one launch, wrapping the result) is all there is; lazyrt's backend,
  Inductor and eager, interleaved rounds of ``CALLS`` calls each, median;
* **first call with cold caches**: a child process per backend with empty disk
  caches (lazyrt's kernels and plans, Inductor's FX graph and code caches; lazyrt
  once more with its per-host BLAS choice measured too, which a host does once) trains
  ``COLD_STEPS`` steps of a model; the first step's wall time less a steady
  step's is that backend's compile time for the whole training step (forward,
  backward, optimizer).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench import report, timing

CALLS = 2000
COLD_STEPS = 4
FIXED_PEERS = ("lazyrt (torch.compile)", "torch.compile", "torch eager")


def ten_ops(x, y):
    """Ten elementwise ops: what a small fused graph costs to call."""
    a = x * y + 1.0
    b = (a.relu() - x).exp() * 0.5
    c = b / (y.abs() + 1.0)
    return (c.tanh() + a).sigmoid()


def fixed_cost(rounds: int = 7) -> list[dict]:
    """Per-call µs of :func:`ten_ops` on 16 elements for each peer (median of
    ``rounds`` interleaved rounds of ``CALLS`` calls)."""
    import torch
    import lazyrt.torch as lt
    from bench.peers import allow_many_compiles
    allow_many_compiles()
    x, y = torch.randn(16), torch.randn(16)
    fns = {"lazyrt (torch.compile)": torch.compile(ten_ops, backend=lt.backend("c")),
           "torch.compile": torch.compile(ten_ops), "torch eager": ten_ops}
    expected = ten_ops(x, y)
    for name, fn in fns.items():
        for _ in range(3):
            got = fn(x, y)
        if not torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"{name}: ten_ops differs from eager")
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(CALLS):
                fn(x, y)
            samples[name].append((time.perf_counter() - t0) / CALLS)
    return [{"peer": name, "us": timing.median(s) * 1e6, "samples_us": [v * 1e6 for v in s]}
            for name, s in samples.items()]


_CHILD = """
import json, sys, time, torch
torch.set_num_threads({threads})
from bench.torch_models import model_cases
from bench.peers import allow_many_compiles
allow_many_compiles()
case = next(c for c in model_cases() + model_cases(tiny=True) if c.name == {model!r})
model = case.build(); x, y = case.batch()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if {backend!r} == "lazyrt":
    import lazyrt.torch as lt
    backend = lt.backend("c")
else:
    backend = "inductor"
forward = torch.compile(lambda a, b: case.loss(model(a), b), backend=backend)
step_opt = torch.compile(lambda: opt.step(), backend=backend)
walls = []
for _ in range({steps}):
    t0 = time.perf_counter()
    opt.zero_grad(); loss = forward(x, y); loss.backward(); step_opt(); loss.item()
    walls.append(time.perf_counter() - t0)
print(json.dumps(walls))
"""


def cold_first_call(model: str, backend: str, threads: int = 2, keep_blas=False) -> dict:
    """First-step compile seconds of ``backend`` ("lazyrt" or "inductor") training
    ``model`` in a fresh process with empty disk caches. ``keep_blas``: lazyrt's
    per-host BLAS choice (measured once per host and library, ~2 s) is copied in,
    so only the compile caches are cold."""
    root = tempfile.mkdtemp(prefix="lazyrt-cold-")
    if keep_blas:
        from lazyrt.backends.c_compiler import default_cache_dir
        blas = os.path.join(default_cache_dir(), "blas")
        if os.path.isdir(blas):
            shutil.copytree(blas, os.path.join(root, "lazyrt", "blas"))
    env = dict(os.environ, LAZYRT_CACHE_DIR=os.path.join(root, "lazyrt"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    code = _CHILD.format(threads=threads, model=model, backend=backend, steps=COLD_STEPS)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        return {"model": model, "backend": backend,
                "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    walls = json.loads(done.stdout.strip().splitlines()[-1])
    steady = min(walls[2:])  # step 1 creates AdamW's state: step 2 compiles again
    return {"model": model, "backend": backend + (" (BLAS choice kept)" if keep_blas else ""),
            "first_steps_s": walls,
            "compile_s": sum(walls[:2]) - 2 * steady, "process_s": time.perf_counter() - t0}


def run(models, quick=False) -> dict:
    """Both measurements, printed; returns the data for the suite's JSON."""
    fixed = fixed_cost(rounds=5 if quick else 9)
    cold = [cold_first_call(m, b, keep_blas=keep) for m in models
            for b, keep in (("lazyrt", True), ("lazyrt", False), ("inductor", False))]
    report.print_table(
        "torch.compile fixed costs: per call (10 elementwise ops on 16 float32)",
        ["peer", "µs per call", "× torch.compile"],
        [[r["peer"], r["us"], r["us"] / fixed[1]["us"]] for r in fixed],
        caption=f"median of interleaved rounds of {CALLS} calls")
    rows = []
    for m in models:
        pair = {r["backend"]: r for r in cold if r["model"] == m}
        kept, lz, ind = pair["lazyrt (BLAS choice kept)"], pair["lazyrt"], pair["inductor"]

        def ratio(r):
            return r["compile_s"] / ind["compile_s"] if "compile_s" in r and \
                ind.get("compile_s") else None
        rows.append([m, kept.get("compile_s", kept.get("error")),
                     lz.get("compile_s", lz.get("error")), ind.get("compile_s", ind.get("error")),
                     ratio(kept), ratio(lz)])
    report.print_table(
        "torch.compile first call, cold caches: compile seconds of a training step",
        ["model", "lazyrt s", "lazyrt s, BLAS probe too", "inductor s", "lazyrt / inductor",
         "with the probe"], rows,
        caption="a fresh process per backend with empty disk caches (lazyrt: kernels and "
                "plans; the second column also measures the per-host BLAS choice, once per "
                "host and library); the first two steps' wall less two steady steps (step 1 "
                "creates AdamW's state, so the optimizer compiles again on step 2)")
    return {"fixed_cost": fixed, "cold_first_call": cold}


def targets(costs) -> list[dict]:
    """Issue 32's cost targets with their measured values."""
    out = []
    by = {r["peer"]: r["us"] for r in costs["fixed_cost"]}
    v = by["lazyrt (torch.compile)"] / by["torch.compile"]
    out.append({"model": "10 ops on 16 elements", "target": "per-call cost <= Inductor's",
                "measured": "µs per call / Inductor's", "value": v, "pass": v <= 1,
                "paired": None, "eager_ms": None})
    models = {r["model"] for r in costs["cold_first_call"]}
    for m in sorted(models):
        pair = {r["backend"]: r for r in costs["cold_first_call"] if r["model"] == m}
        lz = pair["lazyrt (BLAS choice kept)"].get("compile_s")
        ind = pair["inductor"].get("compile_s")
        v = lz / ind if lz is not None and ind else None
        out.append({"model": m, "target": "first call (cold) <= 1/5 of Inductor's",
                    "measured": "compile s / Inductor's", "value": v,
                    "pass": v is not None and v <= 0.2, "paired": None, "eager_ms": None})
    return out
