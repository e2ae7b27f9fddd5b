"""How many elements a C kernel needs before it runs on an OpenMP team: the
break-even of this host, measured once and remembered.

A parallel region costs the team's fork and join, about a microsecond with the
threads awake, more on some hosts than others; below some size a kernel is
faster on the calling thread alone. Generated kernels say
``#pragma omp parallel ... if(parallel: total > LZ_PAR_MIN)``, and the C backend
compiles them with ``-DLZ_PAR_MIN=<n>``, ``n`` from :func:`parallel_min`:

* ``$LAZYRT_PARALLEL_MIN`` when set (an element count);
* 2^62 (never parallel) with one OpenMP thread;
* else measured: a two-input pointwise kernel (``c = a * 1.5 + b * 0.5``, the lightest
  kind generated kernels run, so its break-even is the largest) timed on one thread and on
  the team, the team woken first (kernels of one program run back to back), at every power
  of two from 2^10 to 2^20 elements, the fastest of five samples of about a millisecond
  each (a loaded machine slows the samples, not the probe: it takes well under a second).
  ``n`` is the smallest size from which the team is at least :data:`MIN_GAIN` faster at
  that size and every larger one, within [2^12, 2^18] (2^18 too where the team never won:
  with several threads that is a machine busy while it was measured, and kernels still
  need the team; that outcome is not kept, so a later process measures again). Any
  other outcome is kept in ``<cache>/parallel/``, keyed by the CPU, the thread count
  and this probe, so every process on the host uses the same ``n`` and measures nothing.

Measured on a 2-core Intel Xeon (Emerald Rapids): one thread 0.29 us at 2^10
elements, 2.1 at 2^14, 3.8 at 2^15; the team 0.92, 2.0, 2.7: the team wins
from 2^15 (0.71x). Another run on that host: the team wins from 2^12 (2.0 vs 1.3
us) and is 3x faster at 2^16 (19 vs 6.1 us, both threads' L2 in use). The fixed
default before this was 32768.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import tempfile

from .. import cache
from ..errors import BackendError
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
    /* each sample runs for about a millisecond: a loaded machine (a team
     * descheduled mid-region) makes samples slower, never the probe endless */
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        lz_probe_kernel(a, b, c, n, 1);
        double t0 = omp_get_wtime(), t = 0.0;
        int reps = 0;
        do {
            lz_probe_kernel(a, b, c, n, team);
            reps++;
            t = omp_get_wtime() - t0;
        } while (t < 1e-3 && reps < 100000);
        if (t / reps < best) best = t / reps;
    }
    free(a); free(b); free(c);
    return best;
}
"""

_CHOSEN: dict = {}


def parallel_min(compiler) -> int:
    """The element count above which this host's kernels run on the team
    (see the module docstring); ``compiler`` (a CCompiler: its command and
    flags) builds the probe. Never raises: where nothing can be measured
    (no compiler, no cache) it is :data:`PARALLEL_THRESHOLD`."""
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
    this host (from the cache, or measured now), with ``"why"`` where ``n`` is
    the default because nothing could be measured."""
    return _measured(compiler)


def choose(one: dict, team: dict) -> int:
    """The threshold from times per size (seconds, on one thread and on the team)."""
    winning = None
    for size in sorted(one, reverse=True):
        if team[size] <= MIN_GAIN * one[size]:
            winning = size
        else:
            break
    if winning is None:  # with several threads: a loaded machine, not a fact of the host
        return CLAMP[1]
    return min(max(winning, CLAMP[0]), CLAMP[1])


def omp_threads() -> int:
    """The OpenMP team size kernels get: ``$OMP_NUM_THREADS``'s first level, else
    the CPUs this process may run on."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _measured(compiler) -> dict:
    threads = omp_threads()
    flags = [f for f in compiler.flags if not f.startswith("-DLZ_PAR_MIN=")]
    key = hashlib.sha256(f"{_host_cpu()}\0{threads}\0{_PROBE}\0{SIZES}\0{MIN_GAIN}\0"
                         f"{flags}".encode()).hexdigest()[:16]
    name, folder = f"threshold-{key}.json", None
    try:
        root = cache.cache_root()
        folder = cache.CacheFolder(os.path.join(root, "parallel"), root,
                                   what="parallel thresholds", warn=False)
        found = folder.find(name)
        if found:
            with open(found) as f:
                kept = json.load(f)
            if isinstance(kept.get("n"), int):
                return kept
    except (OSError, ValueError, AttributeError, BackendError):
        pass  # no cache, or an unreadable entry: measure (and keep it if we can)
    if threads <= 1:
        result = {"n": NEVER, "threads": threads, "one": {}, "team": {}}
    else:
        try:
            one, team = _probe(compiler)
        except (OSError, subprocess.SubprocessError, BackendError) as e:
            return {"n": PARALLEL_THRESHOLD, "threads": threads, "one": {}, "team": {},
                    "why": f"not measured ({e})"}
        result = {"n": choose(one, team), "threads": threads, "one": one, "team": team}
        if not any(team[n] <= MIN_GAIN * one[n] for n in one):
            # a busy machine (a test run beside it), not a fact of the host: the
            # next process measures again rather than every kernel on 2^18 for good
            result["why"] = "the team never won: the machine was busy; not kept"
            return result
    try:
        if folder is not None:
            folder.write(name, json.dumps(result).encode())
    except (OSError, BackendError):
        pass  # kept for this process only
    return result


def _probe(compiler) -> tuple:
    """Times per size on one thread and on the team, from the probe built in a
    temporary folder (not the kernel cache: it is no kernel)."""
    with tempfile.TemporaryDirectory(prefix="lazyrt-parallel-") as tmp:
        src, lib_path = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe.so")
        with open(src, "w") as f:
            f.write(_PROBE)
        flags = [f for f in compiler.flags if not f.startswith("-DLZ_PAR_MIN=")]
        built = subprocess.run(compiler._compiler_argv() + flags
                               + ["-o", lib_path, src, "-lm"], capture_output=True, text=True,
                               timeout=120)
        if built.returncode:
            raise BackendError(built.stderr.strip()[-300:] or "the probe did not build")
        lib = ctypes.CDLL(lib_path)
        probe = lib.lz_probe_parallel
        probe.restype, probe.argtypes = ctypes.c_double, (ctypes.c_int64, ctypes.c_int)
        one = {n: probe(n, 0) for n in SIZES}
        team = {n: probe(n, 1) for n in SIZES}
    if any(v <= 0 for v in list(one.values()) + list(team.values())):
        raise BackendError("the probe could not allocate its arrays")
    return one, team
