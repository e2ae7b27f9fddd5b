"""``python -m bench --suite {record,cpu,gpu,torch,planning,all}``: run suites, print, save.

Thread counts for NumPy's BLAS/OpenMP are set by ``bench/__init__.py``,
which runs before this module and before anything imports NumPy.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SUITES = ("record", "cpu", "gpu", "torch", "planning")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench",
                                description="lazyrt benchmarks: run suites, print, save.")
    p.add_argument("--suite", choices=SUITES + ("all",), default="all")
    p.add_argument("--json", metavar="PATH",
                   help="results file (default bench/results/<suite>-<timestamp>.json; "
                        "with --suite all, one file per suite next to PATH)")
    p.add_argument("--png", metavar="PATH", help="bar chart (default: next to the JSON)")
    p.add_argument("--repeats", type=int, default=10, help="timed samples per peer (min 10)")
    p.add_argument("--quick", action="store_true",
                   help="0.05 s pauses instead of 0.2 s, fewer GPU softmax sizes, torch "
                        "steps timed without a warm-up call per sample; same CPU sizes, "
                        "still >= 10 repeats")
    p.add_argument("--with-reference", action="store_true",
                   help="also time lazyrt's numpy reference backend")
    p.add_argument("--cold-caches", action="store_true",
                   help="empty on-disk compile caches (lazyrt, TorchInductor), so first-call "
                        "times are real compiles")
    return p.parse_args(argv)


def use_cold_caches() -> None:
    """Point lazyrt's and TorchInductor's disk caches at a fresh temp dir.

    Must run before lazyrt or torch is imported: both read the env at import."""
    import tempfile
    root = tempfile.mkdtemp(prefix="lazyrt-bench-")
    os.environ["LAZYRT_CACHE_DIR"] = os.path.join(root, "lazyrt")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")


def _paths(args, suite):
    """JSON and PNG paths for one suite."""
    from bench import report
    if args.json:
        json_path = Path(args.json)
        if args.suite == "all":
            json_path = json_path.with_name(f"{json_path.stem}-{suite}{json_path.suffix}")
    else:
        json_path = report.default_json_path(suite)
    if args.png:
        png = Path(args.png)
        png_path = png.with_name(f"{png.stem}-{suite}{png.suffix}") if args.suite == "all" else png
    else:
        png_path = json_path.with_suffix(".png")
    return json_path, png_path


def run_suite(suite, args) -> None:
    """Run one suite, then write its JSON and (when possible) its PNG."""
    from bench import report
    if suite == "record":
        from bench import record_overhead as mod
        payload = mod.run(args.repeats, args.quick)
    elif suite == "cpu":
        from bench import cpu as mod
        payload = mod.run(args.repeats, args.quick, args.with_reference)
    elif suite == "torch":
        from bench import torch_suite as mod
        payload = mod.run(args.repeats, args.quick)
    elif suite == "planning":
        from bench import planning as mod
        payload = mod.run(args.repeats, args.quick)
    else:
        from bench import gpu as mod
        payload = mod.run(args.repeats, args.quick)
    if payload is None:  # suite had nothing to run here (no CUDA device)
        return
    json_path, png_path = _paths(args, suite)
    report.write_json(json_path, suite, payload)
    series = getattr(mod, "series_for_plot", report.ms_series)(payload)
    report.plot_bars(png_path, f"lazyrt bench: {suite}", series, mod.PLOT_YLABEL)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cold_caches:
        use_cold_caches()
    from bench import report, timing
    report.warn_if_busy()
    if args.quick:
        timing.set_pause(0.05)
    for suite in SUITES if args.suite == "all" else (args.suite,):
        run_suite(suite, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
