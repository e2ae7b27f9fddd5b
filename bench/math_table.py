"""The CPU suite's math table (issue 37): each elementwise transcendental at
2^24 float32 and float64 elements, lazyrt's C backend beside NumPy, torch
eager and ``jax.jit``, in one run.

For each function and dtype: milliseconds per call, the time as a multiple of
copy time (the faster of ``np.copyto`` and torch's threaded ``copy_`` into a
reused buffer, measured in the same run: the memory-bound floor for one read
and one write), and elements per second per core (the suite's ``THREADS``). NumPy and torch write into a reused output
(``out=``), so no peer pays for page faults of a fresh one; ``jax.jit`` and
lazyrt return fresh arrays (lazyrt's come from its buffer pool). Each peer's
output is checked once against the float64 reference (torch in float64, which
has every function): relative error, absolute near zero, at most 8 eps, else
MISMATCH in red. ``jax.jit`` runs with ``jax_enable_x64`` so float64 is float64.

A library without the function (NumPy has no erf, erfc, GELU or softplus) shows
a dash rather than a composition that would not be the function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from bench import report, timing

#: between samples: each call streams 128-256 MB, so spinning threads of the last
#: peer settle quickly; the CPU suite's 0.2 s would make this table take minutes
PAUSE_S = 0.05
SQRT1_2 = 1.0 / math.sqrt(2.0)


@dataclass(frozen=True)
class Fn:
    """One function: its input range, and how each library computes it (None:
    the library has no such function)."""
    name: str
    lo: float
    hi: float
    lazy: Optional[Callable]
    numpy: Optional[Callable]
    torch: Callable
    jax: Callable
    binary: bool = False       # a second operand, drawn from the same range
    #: errors relative to |x| too: GELU's left tail is x times a tiny Phi(x), where
    #: every library's x * (1 + erf) cancels; its error is small next to x
    input_scale: bool = False


def functions() -> list[Fn]:
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as tf

    import lazyrt as lr

    def np_sigmoid(x, out):
        np.negative(x, out=out)
        np.exp(out, out=out)
        out += 1
        return np.reciprocal(out, out=out)

    return [
        Fn("exp", -80, 80, lr.exp, np.exp, torch.exp, jnp.exp),
        Fn("exp2", -120, 120, lr.exp2, np.exp2, torch.exp2, jnp.exp2),
        Fn("expm1", -10, 10, lr.expm1, np.expm1, torch.expm1, jnp.expm1),
        Fn("log", 1e-6, 1e6, lr.log, np.log, torch.log, jnp.log),
        Fn("log2", 1e-6, 1e6, lr.log2, np.log2, torch.log2, jnp.log2),
        Fn("log10", 1e-6, 1e6, lr.log10, np.log10, torch.log10, jnp.log10),
        Fn("log1p", -0.99, 1e6, lr.log1p, np.log1p, torch.log1p, jnp.log1p),
        Fn("tanh", -10, 10, lr.tanh, np.tanh, torch.tanh, jnp.tanh),
        Fn("sigmoid", -20, 20, lr.sigmoid, np_sigmoid, torch.sigmoid, jax.nn.sigmoid),
        Fn("erf", -5, 5, lr.erf, None, torch.erf, jax.scipy.special.erf),
        Fn("erfc", -5, 5, lr.erfc, None, torch.erfc, jax.scipy.special.erfc),
        Fn("gelu", -6, 6, lambda x: lr.nn.gelu(x), None, tf.gelu,
           lambda x: jax.nn.gelu(x, approximate=False), input_scale=True),
        Fn("gelu_tanh", -6, 6, lambda x: lr.nn.gelu(x, approximate="tanh"), None,
           lambda x, **k: tf.gelu(x, approximate="tanh"),
           lambda x: jax.nn.gelu(x, approximate=True), input_scale=True),
        Fn("softplus", -20, 20, lr.softplus, None, tf.softplus, jax.nn.softplus),
        Fn("pow", 0.01, 10, lr.pow, np.power, torch.pow, jnp.power, binary=True),
        Fn("sin", -100, 100, lr.sin, np.sin, torch.sin, jnp.sin),
        Fn("cos", -100, 100, lr.cos, np.cos, torch.cos, jnp.cos),
        Fn("tan", -1.5, 1.5, lr.tan, np.tan, torch.tan, jnp.tan),
        Fn("atan2", -10, 10, lr.atan2, np.arctan2, torch.atan2, jnp.arctan2, binary=True),
    ]


def _reference(fn: Fn, args) -> np.ndarray:
    """float64 values of ``fn`` on ``args`` (torch in float64 has every function)."""
    import torch
    wide = [torch.from_numpy(a.astype(np.float64)) for a in args]
    return fn.torch(*wide).numpy()


def _peers(fn: Fn, args, dtype):
    """(name, call, result-as-numpy) of every library that has ``fn``."""
    import jax
    import torch

    import lazyrt as lr
    out = []
    if fn.numpy is not None:
        buf = np.empty_like(args[0])
        np_call = (lambda: fn.numpy(*args, out=buf))
        out.append(("numpy", np_call, lambda r: r))
    targs = [torch.from_numpy(a) for a in args]
    tbuf = torch.empty_like(targs[0])
    try:
        fn.torch(*targs, out=tbuf)
        t_call = (lambda: fn.torch(*targs, out=tbuf))
    except TypeError:  # F.gelu and friends take no out=
        t_call = (lambda: fn.torch(*targs))
    out.append(("torch eager", t_call, lambda r: r.numpy()))
    jargs = [jax.device_put(a) for a in args]
    jf = jax.jit(fn.jax)
    out.append(("jax.jit", lambda: jf(*jargs).block_until_ready(), np.asarray))
    if fn.lazy is not None:
        ts = [lr.tensor(a) for a in args]

        def lazy_call():
            y = fn.lazy(*ts)
            lr.sync(y)
            return y
        out.append(("lazyrt-c", lazy_call, lambda r: r.numpy()))
    return out


def _check(result, want, dtype, scale=None) -> tuple[str, float]:
    """'ok' or 'MISMATCH', and the largest error relative to the reference (or to
    ``scale`` where that is larger), absolute near 0."""
    got = np.asarray(result, dtype=np.float64)
    eps = np.finfo(dtype).eps
    size = np.abs(want) if scale is None else np.maximum(np.abs(want), np.abs(scale))
    with np.errstate(all="ignore"):
        err = np.where(np.isfinite(want), np.abs(got - want) / (size + eps), 0.0)
    worst = float(np.nanmax(err)) if err.size else 0.0
    return ("ok" if worst <= 8 * eps else "MISMATCH"), worst


def run(repeats: int = timing.MIN_REPEATS, quick: bool = False, threads: int = 2,
        elements: int = 0, target_s: float = 0.02) -> dict:
    """Time every function at each dtype; print the table; return its rows.
    ``elements`` and ``target_s`` (seconds per sample) shrink it for a smoke test."""
    import jax
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # else jax.jit computes float64 in float32
    try:
        rows, n = _measure(repeats, quick, threads, elements, target_s)
    finally:
        jax.config.update("jax_enable_x64", x64)
    print_table(rows, n, threads)
    return {"elements": n, "threads": threads, "rows": rows}


def _copy_time(x, repeats, target_s) -> tuple[float, str]:
    """The faster copy of ``x`` into a reused buffer: ``np.copyto`` runs on one
    thread, torch's ``copy_`` on the team (at 2^24 float32 here: 4.3 vs ~2.5 ms)."""
    import torch
    dst, tx = np.empty_like(x), torch.from_numpy(x)
    tdst = torch.empty_like(tx)
    peers = timing.interleaved([timing.Peer("np.copyto", lambda: np.copyto(dst, x)),
                                timing.Peer("torch copy_", lambda: tdst.copy_(tx))],
                               repeats, pause_s=PAUSE_S, target_s=target_s)
    best = min(peers, key=lambda p: p.median_s)
    return best.median_s, best.name


def _measure(repeats, quick, threads, elements, target_s):
    import lazyrt as lr
    n = elements or 1 << (22 if quick else 24)
    rng = np.random.default_rng(37)
    rows = []
    with lr.backend("c"):
        for dtype in (np.float32, np.float64):
            x = rng.standard_normal(n).astype(dtype)
            copy, copier = _copy_time(x, repeats, target_s)
            name = np.dtype(dtype).name
            rows.append({"function": "copy", "dtype": name, "impl": copier,
                         "ms": copy * 1e3, "x_copy": 1.0})
            for fn in functions():
                report.console.print(f"[dim]… {fn.name} {name}[/dim]")
                args = [rng.uniform(fn.lo, fn.hi, n).astype(dtype)
                        for _ in range(2 if fn.binary else 1)]
                want = _reference(fn, args)
                checked, timed = {}, []
                for impl, call, as_np in _peers(fn, args, dtype):
                    try:
                        checked[impl] = _check(as_np(call()), want, dtype,
                                               args[0] if fn.input_scale else None)
                    except Exception as e:  # noqa: BLE001 - a peer that fails is listed
                        checked[impl] = (f"error: {type(e).__name__}", float("nan"))
                        continue
                    timed.append(timing.Peer(impl, call))
                timing.interleaved(timed, repeats, pause_s=0 if elements else PAUSE_S,
                                   target_s=target_s)
                for peer in timed:
                    s = peer.median_s
                    rows.append({"function": fn.name, "dtype": name, "impl": peer.name,
                                 "ms": s * 1e3, "x_copy": s / copy,
                                 "elems_per_s_per_core": n / s / threads,
                                 "check": checked[peer.name][0],
                                 "max_rel_err": checked[peer.name][1]})
                if fn.lazy is None:
                    rows.append({"function": fn.name, "dtype": name, "impl": "lazyrt-c",
                                 "error": "no lazyrt op"})
                timing.pause(0 if elements else PAUSE_S)
    return rows, n


def print_table(rows, n, threads) -> None:
    table, styles = [], []
    for r in rows:
        if "error" in r:
            table.append([r["function"], r["dtype"], r["impl"], "n/a", "", "", r["error"]])
            styles.append("dim")
            continue
        rate = r.get("elems_per_s_per_core")
        table.append([r["function"], r["dtype"], r["impl"], r["ms"], r["x_copy"],
                      f"{rate / 1e9:.2f} G" if rate else "", r.get("check", "")])
        styles.append("bold red" if r.get("check") == "MISMATCH" else
                      "cyan" if r["impl"].startswith("lazyrt") else None)
    report.print_table(f"Math functions, {n:,} elements, {threads} threads",
                       ["function", "dtype", "impl", "ms", "x copy", "elem/s/core", "check"],
                       table, styles,
                       caption="x copy: time / the faster copy's in the same run. check: against "
                               "torch float64, error / (|exact| + eps) <= 8 eps.")
