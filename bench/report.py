"""Output of a suite: a rich table on the terminal, JSON on disk, a PNG bar chart.

Suites hand over plain data (lists of row dicts); nothing here measures.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# piped output (CI logs, `| tee`) would otherwise wrap wide tables at 80 columns
console = Console(width=None if sys.stdout.isatty() else 150)


def fmt(value, digits=3) -> str:
    """A number for a table cell: '—' for missing, 3 significant digits otherwise."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return escape(value)
    if value != value:  # NaN
        return "—"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


def print_table(title: str, columns: list[str], rows: list[list], styles: list = None,
                caption: str = None) -> None:
    """Print one rich table; ``styles`` optionally gives a row style per row."""
    table = Table(title=title, caption=caption, show_lines=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for i, row in enumerate(rows):
        style = styles[i] if styles else None
        table.add_row(*[fmt(c) for c in row], style=style)
    console.print(table)


def environment() -> dict:
    """What the numbers depend on: machine, Python and library versions."""
    env = {"python": sys.version.split()[0], "platform": platform.platform(),
           "load_avg_1m": os.getloadavg()[0],
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "threads_env": {k: os.environ.get(k) for k in
                           ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    for mod in ("numpy", "torch", "jax", "lazyrt"):
        m = sys.modules.get(mod)
        if m is not None:
            env[mod] = getattr(m, "__version__", "?")
    return env


def warn_if_busy(threshold: float = 0.5) -> None:
    """Other processes on the cores make every number noisy; say so up front."""
    load = os.getloadavg()[0]
    if load > threshold:
        console.print(f"[yellow]machine is busy (1-min load {load:.2f}): timings will be "
                      f"noisy; interleaving keeps the comparisons fair, not the absolutes.[/]")


def default_json_path(suite: str) -> Path:
    return RESULTS_DIR / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def write_json(path, suite: str, payload: dict) -> Path:
    """Write results atomically (temp file + rename) and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    doc = {"suite": suite, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "environment": environment(), **payload}
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)
    console.print(f"[dim]results: {path}[/dim]")
    return path


def ms_series(payload) -> dict:
    """{case: {impl: ms}} from a suite's rows, for :func:`plot_bars`."""
    series = {}
    for r in payload["rows"]:
        if "ms" in r:
            series.setdefault(r["case"], {})[r["impl"]] = r["ms"]
    return series


def plot_bars(path, title: str, series: dict, ylabel: str, log: bool = True) -> bool:
    """Grouped bar chart: ``series`` = {case: {peer: value}}. False when no matplotlib.

    Log scale by default: cases span µs to 100s of ms."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("[dim]matplotlib not installed: no PNG (pip install matplotlib, or run make bench)[/dim]")
        return False
    cases = list(series)
    peers = sorted({p for values in series.values() for p in values})
    width = 0.8 / max(1, len(peers))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(cases)), 4.5))
    for j, peer in enumerate(peers):
        xs = [i + j * width for i in range(len(cases))]
        ys = [series[c].get(peer, 0) or 0 for c in cases]
        ax.bar(xs, ys, width, label=peer)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    console.print(f"[dim]plot: {path}[/dim]")
    return True
