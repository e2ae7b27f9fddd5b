"""How many elements a C kernel needs before it runs on an OpenMP team: the
break-even of this host, measured once and remembered.

A parallel region costs the team's fork and join, about a microsecond with the
threads awake, more on some hosts than others; below some size a kernel is
faster on the calling thread alone. Generated kernels say
``#pragma omp parallel ... if(parallel: total > LZ_PAR_MIN)``, and the C backend
compiles them with ``-DLZ_PAR_MIN=<n>``, ``n`` from :func:`parallel_min`:

* ``$LAZYRT_PARALLEL_MIN`` when set (an element count);
* 2^62 (never parallel) with one OpenMP thread;
* else measured: a two-input pointwise kernel (``c = a * 1.5 + b * 0.5``, the
  lightest kind generated kernels run, so its break-even is the largest) timed
  on one thread and on the team, the team woken first (kernels of one program
  run back to back), at every power of two from 2^10 to 2^20 elements, the
  fastest of five runs of each. ``n`` is the smallest size from which the team
  is at least :data:`MIN_GAIN` faster at that size and every larger one,
  within [2^12, 2^18]. The outcome is kept in ``<cache>/parallel/``, keyed by
  the CPU, the thread count and this probe, so every process on the host uses
  the same ``n`` and measures nothing.

Measured on a 2-core Intel Xeon (Emerald Rapids): one thread 0.29 us at 2^10
elements, 2.1 at 2^14, 3.8 at 2^15; the team 0.92, 2.0, 2.7: the team wins
from 2^15 (0.71x). The fixed default before this was 32768.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os

from .. import cache
from ..lowering.c import PARALLEL_THRESHOLD
from .c_compiler import _host_cpu

MIN_GAIN = 0.8                  # the team's time over one thread's, at most
NEVER = 1 << 62
SIZES = tuple(1 << k for k in range(10, 21))
CLAMP = (1 << 12, 1 << 18)

_PROBE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>

static void lz_probe_kernel(const float *restrict a, const float *restrict b,
                            float *restrict c, int64_t n, int team)
{
    #pragma omp parallel for simd if(parallel: team) schedule(static)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] * 1.5f + b[i] * 0.5f;
}

/* seconds per kernel on the team (team = 1) or on this thread, threads awake */
double lz_probe_parallel(int64_t n, int team)
{
    float *a = aligned_alloc(64, (size_t)n * 4 + 64), *b = aligned_alloc(64, (size_t)n * 4 + 64);
    float *c = aligned_alloc(64, (size_t)n * 4 + 64);
    if (!a || !b || !c) { free(a); free(b); free(c); return -1.0; }
    for (int64_t i = 0; i < n; i++) { a[i] = (float)i; b[i] = 1.0f; c[i] = 0.0f; }
    int reps = (int)(4000000 / n) + 4;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        lz_probe_kernel(a, b, c, n, 1);
        double t0 = omp_get_wtime();
        for (int q = 0; q < reps; q++) lz_probe_kernel(a, b, c, n, team);
        double t = (omp_get_wtime() - t0) / reps;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return best;
}

int lz_probe_threads(void) { return omp_get_max_threads(); }
"""

_CHOSEN: dict = {}


def parallel_min(compiler) -> int:
    """The element count above which this host's kernels run on the team
    (see the module docstring); ``compiler`` compiles the probe."""
    forced = os.environ.get("LAZYRT_PARALLEL_MIN", "").strip()
    if forced:
        if not forced.isdigit():
            raise ValueError(f"LAZYRT_PARALLEL_MIN={forced!r}: expected a whole number of "
                             "elements")
        return int(forced)
    if "n" not in _CHOSEN:
        _CHOSEN["n"] = _measured(compiler)["n"]
    return _CHOSEN["n"]


def measurement(compiler) -> dict:
    """``{"n": threshold, "threads": t, "one": {size: s}, "team": {size: s}}`` of
    this host (from the cache, or measured now)."""
    return _measured(compiler)


def choose(one: dict, team: dict) -> int:
    """The threshold from times per size (seconds, on one thread and on the team)."""
    winning = None
    for size in sorted(one, reverse=True):
        if team[size] <= MIN_GAIN * one[size]:
            winning = size
        else:
            break
    if winning is None:
        return NEVER
    return min(max(winning, CLAMP[0]), CLAMP[1])


def _measured(compiler) -> dict:
    lib = compiler.load("lz_probe_parallel", _PROBE)
    probe, threads = lib.lz_probe_parallel, lib.lz_probe_threads
    probe.restype, probe.argtypes = ctypes.c_double, (ctypes.c_int64, ctypes.c_int)
    threads.restype = ctypes.c_int
    t = threads()
    key = hashlib.sha256(f"{_host_cpu()}\0{t}\0{_PROBE}\0{SIZES}\0{MIN_GAIN}".encode()) \
        .hexdigest()[:16]
    root = cache.cache_root()
    folder = cache.CacheFolder(os.path.join(root, "parallel"), root,
                               what="parallel thresholds")
    name = f"threshold-{key}.json"
    found = folder.find(name)
    if found:
        try:
            with open(found) as f:
                kept = json.load(f)
            if isinstance(kept.get("n"), int):
                return kept
        except (OSError, ValueError, AttributeError):
            pass  # unreadable: measure again
    if t <= 1:
        result = {"n": NEVER, "threads": t, "one": {}, "team": {}}
    else:
        one = {n: probe(n, 0) for n in SIZES}
        team = {n: probe(n, 1) for n in SIZES}
        if any(v <= 0 for v in list(one.values()) + list(team.values())):
            return {"n": PARALLEL_THRESHOLD, "threads": t, "one": {}, "team": {}}
        result = {"n": choose(one, team), "threads": t, "one": one, "team": team}
    try:
        folder.write(name, json.dumps(result).encode())
    except OSError:
        pass  # kept for this process only
    return result
