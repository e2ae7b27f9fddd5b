"""CPU suite: lazyrt's CPU backends (``c``; ``jax`` where JAX runs on the CPU)
against NumPy, torch (eager, compile) and plain ``jax.jit``.

Run: ``python -m bench --suite cpu [--quick] [--with-reference]``. The suite ends
with the math table (``bench/math_table.py``): every transcendental at 2^24
float32 and float64 elements, as a multiple of copy time, beside the peers.

One process, 2 threads everywhere (torch.set_num_threads, OMP/MKL/OpenBLAS
env set by ``bench/__init__.py`` before NumPy loads), float32, median of >= 10
interleaved samples after warm-up. Each implementation's output is checked
against NumPy in float64 once before timing; a mismatch is printed in red and
stays in the JSON. GB/s counts the minimal bytes (inputs read once, outputs
written once); "% copy" compares with np.copyto into a reused buffer in the
same run, the practical bandwidth ceiling.

lazyrt-jax and plain ``jax.jit`` share JAX's CPU client, so both run under the
ISA cap lazyrt's jax backend sets for NumPy's rounding (``--xla_cpu_max_isa=AVX``,
see ``lazyrt.backends.jax``); ``XLA_FLAGS=--xla_cpu_max_isa=AVX512`` lifts it for both.
"""
from __future__ import annotations

import numpy as np

from bench import peers as P
from bench import report, timing, workloads

THREADS = 2
PLOT_YLABEL = "ms per call (lower is better)"
F32 = 4
BIG = 1 << 24
ROWS = COLS = 4096
MM = 1024


def _normal(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def cases() -> list[P.Case]:
    """The CPU cases, with their minimal traffic in bytes."""
    n, rc = BIG, ROWS * COLS
    return [
        P.Case("copy 2^24", None, lambda r: [_normal(r, n)], 2 * n * F32, copy=True,
               note="np.copyto into a reused buffer = ceiling; lazyrt: x*1.0"),
        P.Case("triad 2^24", workloads.triad, lambda r: [_normal(r, n), _normal(r, n)],
               3 * n * F32),
        P.Case("5-op chain 2^24", workloads.chain5, lambda r: [_normal(r, n)], 2 * n * F32),
        P.Case("gelu(tanh) 2^24", workloads.gelu, lambda r: [_normal(r, n)], 2 * n * F32),
        P.Case("sum(x*x) 2^24", workloads.sum_squares, lambda r: [_normal(r, n)],
               n * F32 + F32, rtol=2e-3),
        P.Case("softmax 4096x4096", workloads.softmax_rows, lambda r: [_normal(r, ROWS, COLS)],
               2 * rc * F32, atol=1e-6),
        P.Case("layer_norm 4096x4096", workloads.layer_norm,
               lambda r: [_normal(r, ROWS, COLS), 1 + 0.1 * _normal(r, COLS),
                          0.1 * _normal(r, COLS)], (2 * rc + 2 * COLS) * F32),
        P.Case("x.T*0.5 4096x4096", workloads.transpose_scale,
               lambda r: [_normal(r, ROWS, COLS)], 2 * rc * F32,
               note="row-major result: numpy/torch eager transpose, then scale"),
        P.Case("matmul 1024 +bias+gelu", workloads.matmul_bias_gelu,
               lambda r: [_normal(r, MM, MM), _normal(r, MM, MM) / np.float32(MM ** 0.5),
                          _normal(r, MM)], (3 * MM * MM + MM) * F32, flops=2 * MM ** 3,
               atol=1e-3),
        P.Case("10-op graph 16 elems", workloads.chain10,
               lambda r: [_normal(r, 16), _normal(r, 16)], 3 * 16 * F32,
               note="latency: per-call overhead dominates"),
    ]


def build_impls(case, arrays, lazy_backends) -> list[P.Impl]:
    """Every peer of one case, first call done (compile time recorded)."""
    impls = [P.first_call(P.numpy_impl(case, arrays)),
             P.torch_impl(case, arrays),
             P.torch_impl(case, arrays, compiled=True),
             P.jax_impl(case, arrays)]
    impls += [P.lazyrt_impl(case, arrays, b) for b in lazy_backends]
    return impls


def measure_case(case, lazy_backends, repeats, rng) -> list[P.Impl]:
    """Check every peer once, then time the working ones interleaved."""
    arrays = case.make_inputs(rng)
    expected = P.reference_output(case, arrays)
    impls = [P.check(i, case, expected) for i in build_impls(case, arrays, lazy_backends)]
    for impl in impls:
        if impl.extra.get("check") == "MISMATCH":
            report.console.print(f"[bold red]MISMATCH[/] {case.name}: {impl.name} differs from "
                                 f"NumPy (max abs err {impl.extra['max_abs_err']:.3g})")
    runnable = [i for i in impls if not i.error]
    timed = timing.interleaved([timing.Peer(i.name, i.call, i.activate) for i in runnable],
                               repeats)
    for impl, peer in zip(runnable, timed):
        impl.extra["median_s"] = peer.median_s
        impl.extra["samples_s"] = peer.samples
    return impls


def _row(case, impl, copy_gbs):
    """Numbers for one (case, impl): ms, GB/s, % of copy, GFLOP/s, first call."""
    if impl.error:
        return {"case": case.name, "impl": impl.name, "error": impl.error}
    s = impl.extra["median_s"]
    gbs = case.nbytes / s / 1e9
    return {"case": case.name, "impl": impl.name, "ms": s * 1e3, "gb_s": gbs,
            "pct_copy": 100 * gbs / copy_gbs if copy_gbs else None,
            "gflop_s": case.flops / s / 1e9 if case.flops else None,
            "first_call_s": impl.first_call_s if impl.compiled else None,
            "first_call_note": _first_call_note(impl),
            "check": impl.extra.get("check"), "max_abs_err": impl.extra.get("max_abs_err"),
            "samples_ms": [x * 1e3 for x in impl.extra["samples_s"]]}


def _first_call_note(impl):
    """For lazyrt: whether the first call compiled or found its kernels on disk."""
    if "compiles" not in impl.extra or not impl.compiled:
        return None
    if impl.extra["compiles"]:
        return f"{impl.extra['compiles']} compile(s), {impl.extra['compile_time_s']:.2f} s"
    return "disk cache" if impl.extra.get("disk_cache_hits") else "no compile"


def _first_call_cell(r):
    s = r.get("first_call_s")
    if s is None:
        return None
    return f"{s:.3g} ({r['first_call_note']})" if r.get("first_call_note") else s


def print_results(rows) -> None:
    table, styles = [], []
    last = None
    for r in rows:
        case = r["case"] if r["case"] != last else ""
        last = r["case"]
        if "error" in r:
            table.append([case, r["impl"], "n/a", r["error"], "", "", "", ""])
            styles.append("dim")
            continue
        table.append([case, r["impl"], r["ms"], r["gb_s"], r["pct_copy"], r["gflop_s"],
                      _first_call_cell(r), r["check"]])
        styles.append("bold red" if r["check"] == "MISMATCH" else
                      "cyan" if r["impl"].startswith("lazyrt") else None)
    report.print_table(f"CPU suite ({THREADS} threads, float32, median)",
                       ["case", "impl", "ms", "GB/s", "% copy", "GFLOP/s", "1st call s",
                        "check"], table, styles,
                       caption="GB/s: minimal bytes (inputs once + outputs once). "
                               "1st call: compiled peers only (includes compile).")


def ratios(rows) -> list[dict]:
    """Per lazyrt backend and case: its time / the best non-lazyrt peer's time."""
    out = []
    by_case = {}
    for r in rows:
        if "ms" in r and r["check"] != "MISMATCH":
            by_case.setdefault(r["case"], []).append(r)
    for case, rs in by_case.items():
        peers = [r for r in rs if not r["impl"].startswith("lazyrt")]
        if not peers:
            continue
        best = min(peers, key=lambda r: r["ms"])
        for r in rs:
            if r["impl"].startswith("lazyrt"):
                out.append({"case": case, "impl": r["impl"], "best_peer": best["impl"],
                            "ratio": r["ms"] / best["ms"]})
    return out


def print_ratios(rs, lazy_backends, want="c") -> None:
    """The ratio table; says so when the backend that matters most (``want``) is missing."""
    if want not in lazy_backends:
        report.console.print(f"[yellow]lazyrt-{want} is not available here "
                             f"(lazyrt backends timed: {', '.join(lazy_backends) or 'none'}).[/]")
    if not rs:
        return
    report.print_table("lazyrt vs best peer (time ratio; < 1 means lazyrt is faster)",
                       ["case", "lazyrt", "best peer", "ratio"],
                       [[r["case"], r["impl"], r["best_peer"], r["ratio"]] for r in rs],
                       ["green" if r["ratio"] <= 1 else "red" for r in rs])


def jax_parity(rows) -> list[dict]:
    """lazyrt-jax against plain ``jax.jit`` of the same computation, per case:
    the time ratio and lazyrt's added time per call (record + capture + cache
    lookup + dispatch, when the computation itself is the same)."""
    by_case = {}
    for r in rows:
        if "ms" in r and r["impl"] in ("lazyrt-jax", "jax.jit"):
            by_case.setdefault(r["case"], {})[r["impl"]] = r["ms"]
    return [{"case": case, "ratio": t["lazyrt-jax"] / t["jax.jit"],
             "added_us": (t["lazyrt-jax"] - t["jax.jit"]) * 1e3}
            for case, t in by_case.items() if len(t) == 2]


def print_jax_parity(parity) -> None:
    if parity:
        report.print_table("lazyrt-jax vs plain jax.jit (same computation)",
                           ["case", "time ratio", "added µs per call"],
                           [[p["case"], p["ratio"], p["added_us"]] for p in parity])


def run(repeats=timing.MIN_REPEATS, quick=False, with_reference=False) -> dict:
    """Run every CPU case, print the tables, return the data for JSON."""
    import torch
    torch.set_num_threads(THREADS)
    lazy_backends = P.lazyrt_backends(with_reference, "cpu")
    rng = np.random.default_rng(0)
    rows, copy_gbs = [], None
    for case in cases():
        report.console.print(f"[dim]… {case.name}[/dim]")
        impls = measure_case(case, lazy_backends, repeats, rng)
        if case.copy:
            np_copy = next(i for i in impls if i.name == "numpy")
            copy_gbs = case.nbytes / np_copy.extra["median_s"] / 1e9
        rows += [_row(case, i, copy_gbs) for i in impls]
        timing.pause()
    print_results(rows)
    rs = ratios(rows)
    print_ratios(rs, lazy_backends)
    parity = jax_parity(rows)
    print_jax_parity(parity)
    from bench import math_table
    math = math_table.run(repeats, quick, THREADS)
    return {"rows": rows, "ratios": rs, "jax_parity": parity, "math": math,
            "copy_ceiling_gb_s": copy_gbs, "threads": THREADS,
            "repeats": max(repeats, timing.MIN_REPEATS), "lazyrt_backends": lazy_backends,
            "cases": {c.name: {"bytes": c.nbytes, "flops": c.flops, "note": c.note}
                      for c in cases()}}
