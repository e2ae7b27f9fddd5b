"""Which OpenBLAS the C backend's matmuls call, and with which of its kernel families.

NumPy's wheel ships one OpenBLAS built for many CPUs: when it loads, it picks a
kernel family (a *core type*: ``Haswell`` is the AVX2 one, ``SkylakeX`` an
AVX-512 one) from the CPU's features. That pick is a rule, not a measurement.
On an AMD EPYC with AVX-512 it picks ``SkylakeX``, and the AVX2 family measured
4-7% faster per core on the benchmark models' shapes, interleaved in one
process, and 0.4-0.9 ms faster per MLP training step (of 19-20 ms).

Which family is faster also depends on the product. The AVX-512 family has
small-matrix kernels (no packing) that OpenBLAS uses for products of at most
about 100^3 multiply-adds: on that EPYC they ran attention's per-head products
(64x64x32) at 190-225 GF/s against the AVX2 family's 120-170, except where only
B is transposed (110-130 against 120-160). So large products and small ones of
each transposition are chosen separately.

The family is fixed when the library loads (OpenBLAS reads ``$OPENBLAS_CORETYPE``
then), and NumPy has loaded its copy before lazyrt can say anything. So, once
per host and library:

* **measure**: a child process per candidate loads NumPy's OpenBLAS file with
  ``$OPENBLAS_CORETYPE`` set (the library's own pick, then the family of the
  other vector width this CPU can run) and times single-threaded sgemms the way
  lazyrt calls them (one call per OpenMP thread): a 512^3 product, and runs of
  96^3 ones in each of the four transpositions; two alternating rounds, the
  best of each. For each kind of product (:func:`product_kind`) the other
  family wins only by :data:`MARGIN` or more.
* **remember** the outcome in ``<cache>/blas/`` (keyed by the CPU model and
  flags and the library file), so every process on the host makes the same
  choice and measures nothing.
* **load**: when the other family won, a byte-for-byte copy of the library in
  ``<cache>/blas/`` (the loader would hand back NumPy's instance for the same
  file) is loaded with that family and one thread. A private single-threaded
  instance never starts BLAS threads, so :mod:`.c_gemm`'s launch need not
  lower NumPy's BLAS thread count around it. Where the library's pick won, or
  anything on this path fails, lazyrt calls NumPy's own instance.

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

#: products of at most this many multiply-adds (M*N*K) are "small": about where
#: OpenBLAS's AVX-512 family stops using its small-matrix kernels (measured on an
#: EPYC: it won at 100^3 and lost at 128x128x64)
SMALL_MNK = 1_000_000

#: the kinds of product measured and chosen for separately (see product_kind)
KINDS = ("large", "small nn", "small nt", "small tn", "small tt")

#: OpenBLAS's AVX-512 families (x86-64), and the AVX2 one they are measured against
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
AVX2_CORES = ("haswell", "zen")
_AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")

_LOCK = threading.Lock()
_CHOICE_LOCK = threading.Lock()

# Times single-threaded sgemms in a child process: argv = library path, sgemm
# symbol, corename symbol; prints {"core": ..., "gflops": {kind: GF/s}} for the
# kinds of KINDS: a 512^3 product, and 32 products of 96^3 per sample in each
# transposition.
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
def large():
    sgemm(101, 111, 111, n, n, n, 1.0, a, n, b, n, 0.0, c, n)
base = [ctypes.addressof(x) for x in (a, b, c)]
s = 96  # 96^3 < SMALL_MNK; big enough that ctypes' call overhead is a few percent
def small(ta, tb):
    for i in range(32):
        off = 4 * s * s * (i % 8)  # eight products, each with operands of its own
        sgemm(101, 112 if ta else 111, 112 if tb else 111, s, s, s, 1.0,
              base[0] + off, s, base[1] + off, s, 0.0, base[2] + off, s)
def gflops(run, flops):
    for _ in range(3):
        run()
    times = []
    for _ in range(9):
        t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
    return flops / sorted(times)[4] / 1e9
out = {"large": gflops(large, 2 * n ** 3)}
for ta in (0, 1):
    for tb in (0, 1):
        kind = "small " + "nt"[ta] + "nt"[tb]
        out[kind] = gflops(lambda: small(ta, tb), 2 * s ** 3 * 32)
print(json.dumps({"core": corename().decode(), "gflops": out}))
"""


def product_kind(m: int, n: int, k: int, a_transposed: bool, b_transposed: bool) -> str:
    """Which of :data:`KINDS` an ``m x k @ k x n`` product is."""
    if m * n * k > SMALL_MNK:
        return "large"
    return "small " + "nt"[bool(a_transposed)] + "nt"[bool(b_transposed)]


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


def gemm_library(numpy_blas, kind: str = "large") -> Optional[GemmLibrary]:
    """The library lazyrt's matmuls of ``kind`` (:func:`product_kind`) call, given
    :func:`.c_gemm.numpy_openblas`'s answer (None: there is none)."""
    choice = gemm_choice(numpy_blas)
    return None if choice is None else choice[kind]


def gemm_choice(numpy_blas) -> Optional[dict]:
    """``{kind: GemmLibrary}`` for every kind of :data:`KINDS`, chosen once per
    process and override (None where NumPy has no OpenBLAS)."""
    if numpy_blas is None:
        return None
    with _CHOICE_LOCK:  # two threads compiling at once measure and copy once
        return _chosen(os.environ.get("LAZYRT_BLAS_CORETYPE", "").strip(), numpy_blas)


#: what each kind's measurement timed, for the reasons `lazyrt doctor` prints
_PROBED = {"large": "sgemm 512^3"} | {k: f"sgemm 96^3 {k[-2:].upper()}" for k in KINDS[1:]}


@functools.lru_cache(maxsize=None)
def _chosen(override: str, numpy_blas) -> dict:
    lib = numpy_blas[0]
    own = _numpy_instance(numpy_blas)

    def every(chosen):
        return {kind: chosen for kind in KINDS}
    if override.lower() == "numpy":
        return every(replace(own, why="$LAZYRT_BLAS_CORETYPE=numpy"))
    if os.environ.get("OPENBLAS_CORETYPE"):
        return every(replace(own, why=f"$OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} "
                                      "chose NumPy's kernels"))
    if override:
        return every(_private_or(own, _private(own, override),
                                 f"$LAZYRT_BLAS_CORETYPE={override}"))
    other = other_family(own.core, cpu_flags())
    if other is None:
        return every(replace(own, why="OpenBLAS's own pick; no other kernel family to "
                                      "measure here"))
    try:
        measured = _measured(lib, other)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return every(replace(own, why=f"OpenBLAS's own pick (measuring {other} failed: {e})"))
    chosen, private = {}, None
    for kind in KINDS:
        mine, theirs = measured[kind][other], measured[kind][""]
        numbers = f"{other} {mine:.0f} vs {own.core} {theirs:.0f} GF/s per core ({_PROBED[kind]})"
        if mine >= MARGIN * theirs > 0:
            private = private or _private(own, other)  # one copy, loaded once
            chosen[kind] = _private_or(own, private, f"measured faster here: {numbers}")
        else:
            chosen[kind] = replace(own, why=f"OpenBLAS's own pick, measured: {numbers}")
    return chosen


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


def _private(own: GemmLibrary, core: str):
    """A private single-threaded instance of ``own``'s library running ``core``, or
    the OSError that kept it from loading."""
    try:
        lib, path = _load_private(own.path, core)
    except OSError as e:
        return e
    return GemmLibrary(address(lib, "cblas_sgemm"), address(lib, "cblas_dgemm"), 0, 0, lib,
                       path, _corename(lib), True)


def _private_or(own: GemmLibrary, private, why: str) -> GemmLibrary:
    """``private`` (from :func:`_private`) chosen for ``why``, else NumPy's instance."""
    if isinstance(private, OSError):
        return replace(own, why=f"{why}, but its private copy failed to load ({private}): "
                                "NumPy's instance")
    return replace(private, why=why)


def _folder() -> cache.CacheFolder:
    root = cache.cache_root()
    return cache.CacheFolder(os.path.join(root, "blas"), root, what="BLAS library copies")


def _library_key(path: str) -> str:
    """The library file and this host's CPU, hashed: what a measurement holds for."""
    st = os.stat(path)
    ident = f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{_host_cpu()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _measured(lib, other: str) -> dict:
    """``{kind: {"": library's pick GF/s, other: GF/s}}`` for every kind of
    :data:`KINDS`, from the cache or measured now."""
    path, folder = lib._name, _folder()
    name = f"choice-{_library_key(path)}.json"
    found = folder.find(name)
    if found:
        try:
            with open(found) as f:
                kept = json.load(f)
            if set(kept) == set(KINDS) and all(set(v) == {"", other} for v in kept.values()):
                return kept
        except (OSError, ValueError, TypeError):
            pass  # unreadable, or from a lazyrt that measured other things: measure
    symbols = (symbol(lib, "cblas_sgemm"), symbol(lib, "openblas_get_corename"))
    best: dict = {kind: {} for kind in KINDS}
    for _ in range(2):  # alternate, so both see the same machine; keep each one's best
        for core in ("", other):
            speeds = _probe(path, core, symbols)
            for kind in KINDS:
                best[kind][core] = max(best[kind].get(core, 0.0), speeds[kind])
    folder.write(name, json.dumps(best).encode())
    return best


def _probe(path: str, core: str, symbols) -> dict:
    """``{kind: GF/s}`` of one child process running ``core`` ("": the library's pick)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    if core:
        env["OPENBLAS_CORETYPE"] = core
    done = subprocess.run([sys.executable, "-c", _PROBE, path, *symbols], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    if not isinstance(result, dict) or not {"core", "gflops"} <= set(result) or \
            set(result["gflops"]) != set(KINDS):
        raise ValueError(f"the probe printed {done.stdout.strip()[-200:]!r}")
    if core and result["core"].lower() != core.lower():
        raise ValueError(f"OpenBLAS ran {result['core']} when asked for {core}")
    return {kind: float(v) for kind, v in result["gflops"].items()}


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
