"""A modelled roofline for the GPU cases: the least time a device can take.

For each case of ``python -m bench --suite gpu``: its minimal bytes (every
input read once, every output written once) and minimal FLOPs, and the
time those need at the device's memory bandwidth and peak FLOP rate:
``max(bytes / bandwidth, flops / peak)``. The target for each kernel is
known before the first GPU run; on a GPU the same model, with the
bandwidth the suite measures for a device-to-device copy, is printed
beside the measured times.

Until a copy is measured the bandwidth is the published H200 figure
(4.8 TB/s HBM3e), and the FLOP peaks are always published figures
(dense, no sparsity), labelled as such wherever they are printed.

>>> round(modelled_s(2 * 2 ** 28 * 4, 0, "float32") * 1e3, 3)   # copy of 1 GiB
0.447
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceModel:
    name: str
    bandwidth: float        # bytes/s
    bandwidth_source: str   # where the bandwidth comes from, printed with it
    peak_flops: dict        # dtype -> FLOP/s
    peak_source: str


#: NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e; 67 TFLOP/s FP32 (CUDA cores: lazyrt's
#: float32 matmul is IEEE, not TF32); 989 TFLOP/s FP16/BF16 Tensor Core, dense.
H200 = DeviceModel(
    "NVIDIA H200", 4.8e12, "published H200 HBM3e bandwidth (4.8 TB/s), not measured",
    {"float32": 67e12, "float16": 989e12, "bfloat16": 989e12, "float64": 34e12},
    "published H200 SXM peaks, dense")


def with_measured_copy(model: DeviceModel, copy_bytes_per_s: float) -> DeviceModel:
    """The model at a device-to-device copy bandwidth measured in this run."""
    return DeviceModel(model.name, copy_bytes_per_s,
                       f"copy bandwidth measured in this run ({copy_bytes_per_s / 1e9:.0f} GB/s)",
                       model.peak_flops, model.peak_source)


def modelled_s(nbytes: int, flops: int, dtype: str, model: DeviceModel = H200) -> float:
    """Seconds at the roofline: the slower of moving the bytes and doing the FLOPs."""
    return max(nbytes / model.bandwidth, flops / model.peak_flops.get(dtype, model.peak_flops["float32"]))


def bound(nbytes: int, flops: int, dtype: str, model: DeviceModel = H200) -> str:
    """Which roof the case is under: ``memory`` or ``compute``."""
    peak = model.peak_flops.get(dtype, model.peak_flops["float32"])
    return "compute" if flops / peak > nbytes / model.bandwidth else "memory"


def rows(cases, model: DeviceModel = H200, measured: dict | None = None) -> list[dict]:
    """One row per case: bytes, FLOPs, bound and modelled ms; with ``measured``
    (case name -> {impl: seconds}), each implementation's ms and its fraction of
    the model (modelled / measured: 1.0 is at the roof)."""
    out = []
    for c in cases:
        t = modelled_s(c.nbytes, c.flops, c.dtype, model)
        row = {"case": c.name, "dtype": c.dtype, "mbytes": c.nbytes / 1e6,
               "gflop": c.flops / 1e9, "bound": "latency" if c.latency else
               bound(c.nbytes, c.flops, c.dtype, model), "model_ms": t * 1e3}
        for impl, s in (measured or {}).get(c.name, {}).items():
            row[impl] = s * 1e3
            row[impl + " of roof"] = t / s if s else None
        out.append(row)
    return out


def print_model(cases, model: DeviceModel = H200, measured: dict | None = None,
                impls: tuple = ()) -> list[dict]:
    """Print the modelled table (and measured columns for ``impls``); returns its rows."""
    from bench import report
    table_rows = rows(cases, model, measured)
    columns = ["case", "dtype", "MB", "GFLOP", "bound", "model ms"]
    for impl in impls:
        columns += [f"{impl} ms", "of roof"]
    table = []
    for r in table_rows:
        line = [r["case"], r["dtype"], r["mbytes"], r["gflop"], r["bound"], r["model_ms"]]
        for impl in impls:
            line += [r.get(impl), r.get(impl + " of roof")]
        table.append(line)
    report.print_table(f"Modelled roofline: {model.name}", columns, table,
                       caption=f"bandwidth: {model.bandwidth_source}; FLOP/s: "
                               f"{model.peak_source}. Minimal bytes and FLOPs; 'latency' "
                               "cases are bound by launch overhead, not by the roofline.")
    return table_rows
