"""Which OpenBLAS the C backend's matmuls call, and with which of its kernel families.

NumPy's wheel ships one OpenBLAS built for many CPUs: when it loads, it picks a
kernel family (a *core type*: ``Haswell`` is the AVX2 one, ``SkylakeX`` an
AVX-512 one) from the CPU's features. That pick is a rule, not a measurement.
On an AMD EPYC with AVX-512 it picks ``SkylakeX``, and the AVX2 family measured
4-7% faster per core on the benchmark models' shapes, interleaved in one
process, and 0.4-0.9 ms faster per MLP training step (of 19-20 ms).

The family is fixed when the library loads (OpenBLAS reads ``$OPENBLAS_CORETYPE``
then), and NumPy has loaded its copy before lazyrt can say anything. So, once
per host and library:

* **measure**: a child process per candidate loads NumPy's OpenBLAS file with
  ``$OPENBLAS_CORETYPE`` set (the library's own pick, then the family of the
  other vector width this CPU can run) and times a single-threaded 512^3 sgemm,
  the way lazyrt calls it (one call per OpenMP thread); two alternating rounds,
  the best of each. The other family wins only by :data:`MARGIN` or more.
* **remember** the outcome in ``<cache>/blas/`` (keyed by the CPU model and
  flags and the library file), so every process on the host makes the same
  choice and measures nothing.
* **load**: when the other family won, a byte-for-byte copy of the library in
  ``<cache>/blas/`` (the loader would hand back NumPy's instance for the same
  file) is loaded with that family and one thread. A private single-threaded
  instance never starts BLAS threads, so :mod:`.c_gemm`'s launch need not
  lower NumPy's BLAS thread count around it. When the library's pick won, or
  anything on this path fails, lazyrt calls NumPy's own instance as before.

``$LAZYRT_BLAS_CORETYPE`` overrides the choice: ``numpy`` (NumPy's instance),
or an OpenBLAS core type name (a private copy with it, measured or not). A
user's own ``$OPENBLAS_CORETYPE`` is respected: lazyrt then calls NumPy's
instance, which honours it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Optional

from .. import cache
from .c_compiler import _host_cpu, cpu_flags

#: the other family must be this much faster (GF/s ratio) to be chosen
MARGIN = 1.03

#: OpenBLAS's AVX-512 families (x86-64), and the AVX2 one they are measured against
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
AVX2_CORES = ("haswell", "zen")
_AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")

_LOCK = threading.Lock()
_CHOICE_LOCK = threading.Lock()

# Times a single-threaded sgemm in a child process: argv = library path, sgemm
# symbol, corename symbol; prints {"core": ..., "gflops": ...}.
_PROBE = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL(sys.argv[1])
sgemm, corename = getattr(lib, sys.argv[2]), getattr(lib, sys.argv[3])
corename.restype = ctypes.c_char_p
i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
sgemm.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [f32, ptr, i64, ptr, i64, f32, ptr, i64]
sgemm.restype = None
n = 512
a, b, c = ((ctypes.c_float * (n * n))(*([0.5] * (n * n))) for _ in range(3))
def run():
    sgemm(101, 111, 111, n, n, n, 1.0, a, n, b, n, 0.0, c, n)
for _ in range(3):
    run()
times = []
for _ in range(9):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
print(json.dumps({"core": corename().decode(), "gflops": 2 * n ** 3 / sorted(times)[4] / 1e9}))
"""


@dataclass(frozen=True)
class GemmLibrary:
    """What ``lz_gemm`` calls: sgemm and dgemm addresses, and OpenBLAS's thread
    count getter and setter (0 for a private single-threaded instance, whose
    count never changes)."""
    sgemm: int
    dgemm: int
    get_threads: int
    set_threads: int
    library: object = field(repr=False)   # the ctypes.CDLL: keeps it loaded
    path: str = ""
    core: str = ""                        # the kernel family it runs
    private: bool = False
    why: str = ""                         # how it was chosen, for `lazyrt doctor`


def gemm_library(numpy_blas) -> Optional[GemmLibrary]:
    """The library lazyrt's matmuls call, given :func:`.c_gemm.numpy_openblas`'s
    answer (None: there is none). Chosen once per process and override."""
    if numpy_blas is None:
        return None
    with _CHOICE_LOCK:  # two threads compiling at once measure and copy once
        return _chosen(os.environ.get("LAZYRT_BLAS_CORETYPE", "").strip(), numpy_blas)


@functools.lru_cache(maxsize=None)
def _chosen(override: str, numpy_blas) -> GemmLibrary:
    lib = numpy_blas[0]
    own = _numpy_instance(numpy_blas)
    if override.lower() == "numpy":
        return replace(own, why="$LAZYRT_BLAS_CORETYPE=numpy")
    if os.environ.get("OPENBLAS_CORETYPE"):
        return replace(own, why=f"$OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} "
                                "chose NumPy's kernels")
    if override:
        return _private_or(own, override, f"$LAZYRT_BLAS_CORETYPE={override}")
    other = other_family(own.core, cpu_flags())
    if other is None:
        return replace(own, why="OpenBLAS's own pick; no other kernel family to measure here")
    try:
        measured = _measured(lib, other)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return replace(own, why=f"OpenBLAS's own pick (measuring {other} failed: {e})")
    mine, theirs = measured.get(other, 0.0), measured.get("", 0.0)
    numbers = f"{other} {mine:.0f} vs {own.core} {theirs:.0f} GF/s per core (sgemm 512^3)"
    if mine >= MARGIN * theirs > 0:
        return _private_or(own, other, f"measured faster here: {numbers}")
    return replace(own, why=f"OpenBLAS's own pick, measured: {numbers}")


def other_family(core: str, flags) -> Optional[str]:
    """The kernel family of the other vector width this CPU runs, or None."""
    core = core.lower()
    if core in AVX512_CORES and {"avx2", "fma"} <= flags:
        return "Haswell"
    if core in AVX2_CORES and set(_AVX512_FLAGS) <= flags:
        return "SkylakeX"
    return None


#: the name prefixes of ILP64 OpenBLAS builds' exports (NumPy's wheels: ``scipy_``)
_PREFIXES = ("scipy_", "")


def symbol(lib, name: str) -> str:
    """The exported name of OpenBLAS function ``name`` (``cblas_sgemm``,
    ``openblas_get_num_threads``...) in ILP64 build ``lib``; OSError if none."""
    for prefix in _PREFIXES:
        if hasattr(lib, f"{prefix}{name}64_"):
            return f"{prefix}{name}64_"
    raise OSError(f"no ILP64 {name} in {lib._name}")


def address(lib, name: str) -> int:
    """The address of OpenBLAS function ``name`` in ``lib`` (see :func:`symbol`)."""
    return ctypes.cast(getattr(lib, symbol(lib, name)), ctypes.c_void_p).value


def _corename(lib) -> str:
    fn = getattr(lib, symbol(lib, "openblas_get_corename"))
    fn.restype = ctypes.c_char_p
    return fn().decode()


def _numpy_instance(numpy_blas) -> GemmLibrary:
    lib, sgemm, dgemm, get_threads, set_threads = numpy_blas
    return GemmLibrary(sgemm, dgemm, get_threads, set_threads, lib, lib._name, _corename(lib))


def _private_or(own: GemmLibrary, core: str, why: str) -> GemmLibrary:
    """A private single-threaded instance running ``core``, else NumPy's."""
    try:
        lib, path = _load_private(own.path, core)
    except OSError as e:
        return replace(own, why=f"{why}, but its private copy failed to load ({e}): "
                                "NumPy's instance")
    return GemmLibrary(address(lib, "cblas_sgemm"), address(lib, "cblas_dgemm"), 0, 0, lib,
                       path, _corename(lib), True, why)


def _folder() -> cache.CacheFolder:
    root = cache.cache_root()
    return cache.CacheFolder(os.path.join(root, "blas"), root, what="BLAS library copies")


def _library_key(path: str) -> str:
    """The library file and this host's CPU, hashed: what a measurement holds for."""
    st = os.stat(path)
    ident = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{_host_cpu()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _measured(lib, other: str) -> dict:
    """``{"": library's pick GF/s, other: GF/s}``, from the cache or measured now."""
    path, folder = lib._name, _folder()
    name = f"choice-{_library_key(path)}.json"
    found = folder.find(name)
    if found:
        try:
            with open(found) as f:
                kept = json.load(f)
            if set(kept) == {"", other}:
                return kept
        except (OSError, ValueError):
            pass
    symbols = (symbol(lib, "cblas_sgemm"), symbol(lib, "openblas_get_corename"))
    best: dict = {}
    for _ in range(2):  # alternate, so both see the same machine; keep each one's best
        for core in ("", other):
            best[core] = max(best.get(core, 0.0), _probe(path, core, symbols))
    folder.write(name, json.dumps(best).encode())
    return best


def _probe(path: str, core: str, symbols) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    if core:
        env["OPENBLAS_CORETYPE"] = core
    done = subprocess.run([sys.executable, "-c", _PROBE, path, *symbols], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    if not isinstance(result, dict) or not {"core", "gflops"} <= set(result):
        raise ValueError(f"the probe printed {done.stdout.strip()[-200:]!r}")
    if core and result["core"].lower() != core.lower():
        raise ValueError(f"OpenBLAS ran {result['core']} when asked for {core}")
    return float(result["gflops"])


def _load_private(path: str, core: str):
    """(CDLL, path) of a copy of the library at ``path`` loaded with kernel family
    ``core`` and one thread. The copy is verified byte for byte before loading."""
    folder = _folder()
    st = os.stat(path)
    name = f"{os.path.basename(path).rsplit('.so', 1)[0]}-{st.st_size}-{st.st_mtime_ns}.so"
    with open(path, "rb") as f:
        data = f.read()
    copy = folder.find(name)
    if copy is None or not _same_bytes(copy, data):
        copy = folder.write(name, data)
    with _LOCK:  # OpenBLAS reads these when it loads, so set them just then
        saved = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")}
        os.environ["OPENBLAS_CORETYPE"], os.environ["OPENBLAS_NUM_THREADS"] = core, "1"
        try:
            lib = ctypes.CDLL(copy, mode=os.RTLD_LOCAL)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if lib._handle == ctypes.CDLL(path)._handle:
        raise OSError("the loader returned NumPy's own instance for the copy")
    if _corename(lib).lower() != core.lower():
        raise OSError(f"it runs {_corename(lib)}, not {core}")
    return lib, copy


def _same_bytes(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False
