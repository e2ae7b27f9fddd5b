"""GPU suite: lazyrt's CUDA backends against torch eager and torch.compile.

Run: ``python -m bench --suite gpu [--quick]``. Without a CUDA device it
prints one line and exits 0.

Same rules as the CPU suite: outputs checked once (here against torch in
float64 on the device), then >= 10 interleaved samples per peer, each timed
with CUDA events around a loop of calls; median. Streaming cases use 2^28
elements (1 GiB in fp32), well past the L2 cache, and report GB/s and the
fraction of the device-to-device copy bandwidth measured in the same run;
matmuls report TFLOP/s. Sized to finish in ~5 minutes on an H200, most of it
torch.compile's first calls.

Every case carries its minimal bytes and FLOPs, so :mod:`bench.roofline`
models the least time an H200 needs for it: printed alone where there is no
GPU (at the published 4.8 TB/s), beside the measured times where there is
(at the copy bandwidth measured in the same run).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from bench import peers as P
from bench import report, roofline, timing, workloads

PLOT_YLABEL = "ms per call (lower is better)"
STREAM = 1 << 28
SOFTMAX_TOTAL = 1 << 26
SOFTMAX_LENGTHS = (128, 512, 1024, 4096, 8192, 32768)
SOFTMAX_LENGTHS_QUICK = (128, 4096, 32768)
MM = 4096
DEVICE = "cuda"  # a constant so a CPU smoke test of this module can swap it


@dataclass
class GpuCase:
    """A GPU case: inputs are made on the device (``make(torch, device)``)."""
    name: str
    workload: Callable
    make: Callable
    nbytes: int
    dtype: str = "float32"
    flops: int = 0
    rtol: float = 1e-3
    atol: float = 1e-4
    copy: bool = False
    latency: bool = False


def _randn(torch, dev, *shape, dtype="float32", scale=1.0):
    g = torch.Generator(device=dev).manual_seed(len(shape) * 7919 + shape[-1])
    return (torch.randn(*shape, device=dev, generator=g) * scale).to(getattr(torch, dtype))


def cases(quick: bool) -> list[GpuCase]:
    n = STREAM
    one = lambda t, d: [_randn(t, d, n)]  # noqa: E731
    # minimal FLOPs per element: one per arithmetic op, one per transcendental
    out = [
        GpuCase("copy 2^28", None, one, 2 * n * 4, copy=True),
        GpuCase("5-op chain 2^28", workloads.chain5, one, 2 * n * 4, flops=5 * n),
        GpuCase("gelu(tanh) 2^28", workloads.gelu, one, 2 * n * 4, flops=9 * n),
        GpuCase("sum(x*x) 2^28", workloads.sum_squares, one, n * 4 + 4, flops=2 * n,
                rtol=2e-3),
    ]
    for length in SOFTMAX_LENGTHS_QUICK if quick else SOFTMAX_LENGTHS:
        rows = SOFTMAX_TOTAL // length
        # max, subtract, exp, sum, divide
        out.append(GpuCase(f"softmax {rows}x{length}", workloads.softmax_rows,
                           functools.partial(_rows, rows=rows, cols=length),
                           2 * rows * length * 4, flops=5 * rows * length, atol=1e-6))
    rows = SOFTMAX_TOTAL // 4096
    # mean, subtract, square, mean, scale by rsqrt, * w, + b
    out.append(GpuCase(f"layer_norm {rows}x4096", workloads.layer_norm,
                       lambda t, d: [_randn(t, d, rows, 4096), 1 + _randn(t, d, 4096, scale=.1),
                                     _randn(t, d, 4096, scale=.1)],
                       (2 * rows * 4096 + 2 * 4096) * 4, flops=7 * rows * 4096))
    for dtype in ("bfloat16", "float16"):
        out.append(GpuCase(f"matmul {MM} +bias+gelu {dtype}", workloads.matmul_bias_gelu,
                           functools.partial(_matmul_inputs, dtype=dtype),
                           (3 * MM * MM + MM) * 2, dtype=dtype, flops=2 * MM ** 3,
                           rtol=3e-2, atol=3e-2))
    out.append(GpuCase("10-op graph 16 elems", workloads.chain10,
                       lambda t, d: [_randn(t, d, 16), _randn(t, d, 16, scale=.5)], 3 * 16 * 4,
                       flops=10 * 16, latency=True))
    return out


def _rows(torch, dev, rows, cols):
    return [_randn(torch, dev, rows, cols)]


def _matmul_inputs(torch, dev, dtype):
    return [_randn(torch, dev, MM, MM, dtype=dtype),
            _randn(torch, dev, MM, MM, dtype=dtype, scale=MM ** -0.5),
            _randn(torch, dev, MM, dtype=dtype)]


# --- timing with CUDA events ---------------------------------------------------------

def _cuda_sample(peer: timing.Peer) -> float:
    """Seconds per call: a warm call, then ``number`` calls between two CUDA events."""
    import torch
    peer.activate()
    peer.fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(peer.number):
        peer.fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / peer.number


def _latency_sample(peer: timing.Peer) -> float:
    """Wall-clock per call including the host side, device synchronized at both ends."""
    import time
    import torch
    peer.activate()
    peer.fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(peer.number):
        peer.fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / peer.number


# --- peers -----------------------------------------------------------------------------

def _lazyrt_impl(case, xs, backend):
    """lazyrt on a CUDA backend, fed host copies of the inputs (no bf16 in lazyrt)."""
    if case.dtype == "bfloat16":
        return P.Impl(f"lazyrt-{backend}", error="lazyrt has no bfloat16 dtype")
    import torch
    arrays = [x.detach().cpu().numpy() for x in xs]
    pcase = P.Case(case.name, case.workload, lambda r: arrays, case.nbytes, copy=case.copy)
    return P.lazyrt_impl(pcase, arrays, backend, torch.cuda.synchronize)


def build_impls(case, xs, lazy_backends):
    pcase = P.Case(case.name, case.workload, lambda r: xs, case.nbytes, copy=case.copy)
    impls = [P.torch_impl(pcase, xs, DEVICE), P.torch_impl(pcase, xs, DEVICE, compiled=True)]
    return impls + [_lazyrt_impl(case, xs, b) for b in lazy_backends]


def check(impl, case, expected):
    """allclose against torch float64 on the device; marks MISMATCH loudly."""
    import torch
    if impl.error:
        return impl
    try:
        impl.activate()
        got = impl.call()
        got = got if isinstance(got, torch.Tensor) else torch.from_numpy(impl.to_numpy(got))
        got = got.to(expected.device, torch.float64)
    except Exception as e:
        impl.error = P.reason(e)
        return impl
    ok = got.shape == expected.shape and torch.allclose(got, expected, case.rtol, case.atol)
    impl.extra["check"] = "ok" if ok else "MISMATCH"
    if not ok:
        report.console.print(f"[bold red]MISMATCH[/] {case.name}: {impl.name}")
    return impl


def measure_case(case, lazy_backends, repeats):
    import torch
    xs = case.make(torch, DEVICE)
    wide = [x.double() for x in xs]
    expected = wide[0] if case.copy else case.workload(workloads.torch_ops(), *wide)
    impls = [check(i, case, expected) for i in build_impls(case, xs, lazy_backends)]
    runnable = [i for i in impls if not i.error]
    sampler = _latency_sample if case.latency else _cuda_sample
    timed = timing.interleaved([timing.Peer(i.name, i.call, i.activate) for i in runnable],
                               repeats, target_s=0.01, pause_s=0.02, sample=sampler)
    for impl, peer in zip(runnable, timed):
        impl.extra["median_s"] = peer.median_s
    del xs, wide, expected
    torch.cuda.empty_cache()
    return impls


def _row(case, impl, copy_gbs):
    if impl.error:
        return {"case": case.name, "impl": impl.name, "error": impl.error}
    s = impl.extra["median_s"]
    gbs = case.nbytes / s / 1e9
    compute = not case.latency and roofline.bound(case.nbytes, case.flops, case.dtype) == "compute"
    return {"case": case.name, "impl": impl.name, "dtype": case.dtype, "ms": s * 1e3,
            "gb_s": None if compute or case.latency else gbs,
            "frac_copy": gbs / copy_gbs if copy_gbs and not (compute or case.latency)
            else None,
            "tflop_s": case.flops / s / 1e12 if compute else None,
            "first_call_s": impl.first_call_s if impl.compiled else None,
            "check": impl.extra.get("check")}


def print_results(rows, device_name):
    table, styles, last = [], [], None
    for r in rows:
        case = r["case"] if r["case"] != last else ""
        last = r["case"]
        if "error" in r:
            table.append([case, r["impl"], "n/a", r["error"], "", "", "", ""])
            styles.append("dim")
            continue
        table.append([case, r["impl"], r["ms"], r["gb_s"], r["frac_copy"], r["tflop_s"],
                      r["first_call_s"], r["check"]])
        styles.append("bold red" if r["check"] == "MISMATCH" else
                      "cyan" if r["impl"].startswith("lazyrt") else None)
    report.print_table(f"GPU suite on {device_name} (median, CUDA events)",
                       ["case", "impl", "ms", "GB/s", "of copy", "TFLOP/s", "1st call s",
                        "check"], table, styles,
                       caption="GB/s: minimal bytes; 'of copy': fraction of the "
                               "device-to-device copy bandwidth in this run.")


def run(repeats=timing.MIN_REPEATS, quick=False) -> dict | None:
    """Run the GPU cases; without a CUDA device, print the modelled H200
    roofline of every case instead and return None (nothing was measured)."""
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        print("bench gpu: no CUDA device here; the modelled roofline alone (nothing measured):")
        roofline.print_model(cases(quick))
        return None
    from bench.cpu import ratios, print_ratios
    device_name = torch.cuda.get_device_name()
    lazy_backends = P.lazyrt_backends(False, "cuda")
    rows, copy_gbs = [], None
    for case in cases(quick):
        report.console.print(f"[dim]… {case.name}[/dim]")
        impls = measure_case(case, lazy_backends, repeats)
        if case.copy:
            eager = next(i for i in impls if i.name == "torch eager")
            copy_gbs = case.nbytes / eager.extra["median_s"] / 1e9
        rows += [_row(case, i, copy_gbs) for i in impls]
    print_results(rows, device_name)
    rs = ratios(rows)
    print_ratios(rs, lazy_backends, want="triton")
    model = roofline.with_measured_copy(roofline.H200, copy_gbs * 1e9) if copy_gbs \
        else roofline.H200
    measured = {}
    for r in rows:
        if "ms" in r:
            measured.setdefault(r["case"], {})[r["impl"]] = r["ms"] / 1e3
    impls = tuple(f"lazyrt-{b}" for b in lazy_backends) + ("torch eager", "torch.compile")
    model_rows = roofline.print_model(cases(quick), model, measured, impls)
    return {"rows": rows, "ratios": rs, "copy_gb_s": copy_gbs, "device": device_name,
            "lazyrt_backends": lazy_backends, "repeats": max(repeats, timing.MIN_REPEATS),
            "roofline": {"bandwidth": model.bandwidth_source, "peaks": model.peak_source,
                         "rows": model_rows}}
