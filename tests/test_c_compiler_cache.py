"""The C compiler driver and its on-disk binary cache (lazyrt/backends/c_compiler.py)."""
import ctypes
import hashlib
import json
import multiprocessing
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys

import pytest

import lazyrt
from lazyrt.backends.c_compiler import CCompiler, openmp_env
from lazyrt.errors import BackendError, CompileError

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler")

SOURCE = """
#include <omp.h>
#include "lazyrt_math.h"
double add_one(double x) { return x + 1; }
int n_threads(void) { return omp_get_max_threads(); }
"""

# A fresh interpreter loads SOURCE from the same cache and reports its metrics.
CHILD = f"""
import ctypes, json, sys
import lazyrt
from lazyrt.backends.c_compiler import CCompiler
lazyrt.metrics.reset()
lib = CCompiler().load("k_add_one", {SOURCE!r})
lib.add_one.restype = ctypes.c_double
snap = lazyrt.metrics.snapshot()
print(json.dumps({{"value": lib.add_one(ctypes.c_double(1.5)), "compiles": snap["compiles"],
                  "disk_cache_hits": snap["disk_cache_hits"]}}))
"""


def run_child(cache_dir):
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_new_process_reuses_binary_on_disk_without_compiling(tmp_path):
    first = run_child(tmp_path)
    second = run_child(tmp_path)
    assert first == {"value": 2.5, "compiles": 1, "disk_cache_hits": 0}
    assert second == {"value": 2.5, "compiles": 0, "disk_cache_hits": 1}


def test_same_process_loads_once_and_counts_no_disk_hit(tmp_path):
    lazyrt.metrics.reset()
    cc = CCompiler(cache_dir=str(tmp_path))
    lib = cc.load("k_add_one", SOURCE)
    assert CCompiler(cache_dir=str(tmp_path)).load("k_add_one", SOURCE) is lib
    assert cc.load("k_add_one", SOURCE) is lib
    snap = lazyrt.metrics.snapshot()
    assert snap["compiles"] == 1 and snap["disk_cache_hits"] == 0
    assert snap["compile_time_s"] > 0


def test_a_kernel_at_another_plan_number_reuses_its_binary(tmp_path):
    """A plan numbers its kernels by position (k3_..., k7_...): the same kernel at
    another position (a graph that differs earlier) is the same binary, loaded, not
    compiled again, and each name still finds its function."""
    lazyrt.metrics.reset()
    cc = CCompiler(cache_dir=str(tmp_path))
    kernel = "double {0}(double x) {{ return {0}_twice(x) + 1; }}\n" \
             "static double {0}_twice(double x);\n"
    source = "static double {0}_twice(double x) {{ return 2 * x; }}\n" + kernel
    first, _, got_first = cc.load_kernel("k3_fused_mul_add", source.format("k3_fused_mul_add"))
    again, _, got_again = cc.load_kernel("k7_fused_mul_add", source.format("k7_fused_mul_add"))
    assert (got_first, got_again) == ("compiled", "memory")
    assert first == again
    add = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(again)
    assert add(20.0) == 41.0
    assert lazyrt.metrics.snapshot()["compiles"] == 1


def test_truncated_binary_is_rebuilt_not_trusted(tmp_path):
    run_child(tmp_path)
    (so,) = [p for p in tmp_path.rglob("*.so")]
    # A new inode, as a crash mid-copy or a bad disk would leave it.
    broken = so.with_suffix(".broken")
    broken.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    os.replace(broken, so)
    assert run_child(tmp_path) == {"value": 2.5, "compiles": 1, "disk_cache_hits": 0}
    assert run_child(tmp_path) == {"value": 2.5, "compiles": 0, "disk_cache_hits": 1}


def test_binary_with_wrong_checksum_is_rebuilt(tmp_path):
    run_child(tmp_path)
    (digest,) = tmp_path.rglob("*.sha256")
    digest.write_text("0" * 64 + "\n")
    assert run_child(tmp_path)["compiles"] == 1


def test_cache_dir_writable_by_others_is_refused(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(BackendError, match="writable by group or others"):
        CCompiler(cache_dir=str(cache)).load("k_add_one", SOURCE)


def test_cache_dir_is_created_private(tmp_path, monkeypatch):
    cache = tmp_path / "new" / "lazyrt"
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(cache))
    cc = CCompiler()
    cc.load("k_add_one", SOURCE)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cc.cache_dir).st_mode) == 0o700
    assert os.path.dirname(cc.library_path("k_add_one", SOURCE)) == cc.cache_dir
    assert cc.cache_dir.endswith("v" + lazyrt.__version__)


def test_default_cache_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("LAZYRT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert CCompiler().cache_root == str(tmp_path / "lazyrt")


def _compile_in_child(cache_dir, queue, barrier):
    import ctypes
    lazyrt.metrics.reset()
    compiler = CCompiler(cache_dir=cache_dir)
    barrier.wait(30)  # both children reach the compiler together
    lib = compiler.load("k_concurrent", SOURCE + "// concurrent\n")
    lib.add_one.restype = ctypes.c_double
    queue.put((lib.add_one(ctypes.c_double(2.0)), lazyrt.metrics.snapshot()["compiles"]))


def test_two_processes_compiling_the_same_kernel_both_succeed(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue, barrier = ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=_compile_in_child, args=(str(tmp_path), queue, barrier))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    results = [queue.get(timeout=5) for _ in procs]
    assert [value for value, _ in results] == [3.0, 3.0]
    assert sum(compiles for _, compiles in results) >= 1
    assert not list(tmp_path.rglob("*.tmp*"))  # no temp files left behind
    assert len(list(tmp_path.rglob("*.so"))) == 1


def test_syntax_error_names_kernel_source_path_and_compiler_message(tmp_path):
    cc = CCompiler(cache_dir=str(tmp_path))
    with pytest.raises(CompileError) as err:
        cc.load("k7_broken", "double f(double x) { return x +; }\n")
    msg = str(err.value)
    assert "k7_broken" in msg
    (c_file,) = tmp_path.rglob("k7_broken-*.c")
    assert str(c_file) in msg
    assert "expected expression" in msg  # gcc's own words
    assert not list(tmp_path.rglob("k7_broken*.so"))


def test_missing_compiler_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent")
    with pytest.raises(BackendError, match=r"/nonexistent.*apt-get install gcc"):
        CCompiler(cache_dir=str(tmp_path)).load("k_add_one", SOURCE)


def test_compiler_without_openmp_says_to_install_libgomp(tmp_path, monkeypatch):
    fake = tmp_path / "cc-without-openmp"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && '
                    '{ echo "fatal error: omp.h: No such file or directory" >&2; exit 1; }; done\n'
                    f'exec {shutil.which("cc")} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(BackendError, match=r"OpenMP.*libgomp") as err:
        CCompiler(cache_dir=str(tmp_path / "cache")).load("k_add_one", SOURCE)
    assert "omp.h" in str(err.value)


def test_stale_temp_files_of_killed_compiles_are_cleaned(tmp_path):
    """The first compile of a process into a cache folder sweeps it (once: it can be large)."""
    cc = CCompiler(cache_dir=str(tmp_path))
    os.makedirs(cc.cache_dir, mode=0o700, exist_ok=True)
    stale = os.path.join(cc.cache_dir, "k_add_one-dead.123.abcd.tmp.so")
    fresh = os.path.join(cc.cache_dir, "k_add_one-live.456.abcd.tmp.so")
    for path in (stale, fresh):
        open(path, "wb").close()
    os.utime(stale, (0, 0))
    cc.load("k_add_one", SOURCE)
    assert not os.path.exists(stale)
    assert os.path.exists(fresh)  # a compile still running in another process


def test_key_changes_with_source_and_flags(tmp_path):
    cc = CCompiler(cache_dir=str(tmp_path))
    path = cc.library_path("k", SOURCE)
    assert cc.library_path("k", SOURCE) == path
    assert cc.library_path("k", SOURCE + " ") != path
    cc.flags = cc.flags + ("-DLZ_TEST",)
    assert cc.library_path("k", SOURCE) != path


def test_flags_are_exact_and_without_fast_math():
    flags = CCompiler().flags
    assert flags[:6] == ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11")
    assert flags[6].startswith("-I") and os.path.isfile(
        os.path.join(flags[6][2:], "lazyrt_math.h"))
    assert not any("fast-math" in f for f in flags)


def test_openmp_workers_spin_briefly_unless_user_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    env = openmp_env()
    assert env["GOMP_SPINCOUNT"] == "10000" and "OMP_WAIT_POLICY" not in env
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the user's policy: no spin count
    env = openmp_env()
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in env
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "500")
    assert openmp_env()["GOMP_SPINCOUNT"] == "500"


# --- entries that cannot be used, caches that cannot be written (issue 9, items 7-9) ---

# Like CHILD, for several kernels (SOURCE with a comment per tag), and it reports
# the warnings raised and the error, if any, instead of dying with a traceback.
CHILD_REPORT = f"""
import ctypes, json, sys, warnings
caught = []
warnings.simplefilter("always")
warnings.showwarning = lambda msg, cat, *rest, **kw: caught.append([cat.__name__, str(msg)])
import lazyrt
from lazyrt.backends.c_compiler import CCompiler
lazyrt.metrics.reset()
values, error = [], None
try:
    for tag in sys.argv[1:]:
        lib = CCompiler().load("k_add_one" + tag, {SOURCE!r} + "// " + tag + "\\n")
        lib.add_one.restype = ctypes.c_double
        values.append(lib.add_one(ctypes.c_double(1.5)))
except lazyrt.LazyrtError as e:
    error = [type(e).__name__, str(e)]
snap = lazyrt.metrics.snapshot()
print(json.dumps({{"values": values, "error": error, "warnings": caught,
                  "compiles": snap["compiles"], "disk_cache_hits": snap["disk_cache_hits"]}}))
"""


def _drop_root_override():
    """preexec_fn: permission bits bind this child even when it runs as root.

    Root writes into a 0500 folder through CAP_DAC_OVERRIDE; a child that
    drops it (and its read/search and owner twins) from its bounding set
    execs with neither, yet keeps uid 0, so the cache still passes the
    ownership check."""
    import ctypes as c
    libc = c.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(97)


def run_tags(cache_dir, *tags, read_only=False):
    """Run CHILD_REPORT on ``cache_dir`` for ``tags``; ``read_only``: as a user
    whom the folder's permission bits stop (root drops its override)."""
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(cache_dir))
    preexec = _drop_root_override if read_only and os.geteuid() == 0 else None
    out = subprocess.run([sys.executable, "-c", CHILD_REPORT, *tags], env=env,
                         capture_output=True, text=True, preexec_fn=preexec)
    if out.returncode == 97 and preexec:
        pytest.skip("running as root, and this container does not let a child drop "
                    "CAP_DAC_OVERRIDE, so a read-only folder cannot be simulated")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _plant_unloadable_binary(so):
    """Garbage in place of ``so``, with its recorded sha256 updated to match:
    the checksum passes, dlopen fails ('invalid ELF header')."""
    junk = b"not an ELF file, but its checksum is right\n" * 64
    so.write_bytes(junk)
    so.with_suffix(".sha256").write_text(hashlib.sha256(junk).hexdigest() + "\n")


def test_binary_that_fails_to_load_is_evicted_and_rebuilt(tmp_path):
    run_child(tmp_path)
    (so,) = tmp_path.rglob("*.so")
    _plant_unloadable_binary(so)
    assert run_child(tmp_path) == {"value": 2.5, "compiles": 1, "disk_cache_hits": 0}
    assert run_child(tmp_path) == {"value": 2.5, "compiles": 0, "disk_cache_hits": 1}


FAKE_CC_WRITING_JUNK = """#!/bin/sh
# a "compiler" that says something on stderr and writes a binary no loader takes
for a in "$@"; do [ "$a" = --version ] && { echo "junk-cc 1.0"; exit 0; }; done
out=""; prev=""
for a in "$@"; do [ "$prev" = -o ] && out="$a"; prev="$a"; done
echo "junk-cc: note: this compiler writes junk" >&2
i=0; while [ $i -lt 64 ]; do echo "junk, not an ELF file"; i=$((i+1)); done > "$out"
"""


@pytest.mark.parametrize("cached", [True, False], ids=["cached-entry", "fresh-build"])
def test_binary_that_still_fails_to_load_after_rebuild_raises_with_compiler_output(
        tmp_path, cached):
    fake = tmp_path / "junk-cc"
    fake.write_text(FAKE_CC_WRITING_JUNK)
    fake.chmod(0o755)
    cc = CCompiler(cache_dir=str(tmp_path / "cache"), cc=str(fake))
    if cached:  # a verified entry that does not load: evicted, rebuilt once, fails again
        so = cc.library_path("k_junk", SOURCE)
        os.makedirs(os.path.dirname(so), mode=0o700)
        _plant_unloadable_binary(pathlib.Path(so))
    lazyrt.metrics.reset()
    with pytest.raises(CompileError) as err:
        cc.load("k_junk", SOURCE)
    msg = str(err.value)
    (c_file,) = (tmp_path / "cache").rglob("k_junk-*.c")
    assert "k_junk" in msg and str(c_file) in msg
    assert "junk-cc: note: this compiler writes junk" in msg  # the compiler's output
    assert "invalid ELF header" in msg  # the loader's
    assert lazyrt.metrics.snapshot()["compiles"] == 1
    assert not list((tmp_path / "cache").rglob("k_junk*.so"))  # not left to be trusted


@pytest.mark.parametrize("suffix", [".so", ".c", ".sha256"])
def test_cache_entry_that_is_a_directory_is_a_clear_error(tmp_path, suffix):
    cc = CCompiler(cache_dir=str(tmp_path))
    entry = cc.library_path("k_add_one", SOURCE)[:-3] + suffix
    os.makedirs(entry, mode=0o700)
    with pytest.raises(BackendError) as err:
        cc.load("k_add_one", SOURCE)
    msg = str(err.value)
    assert entry in msg and "is a directory" in msg and "k_add_one" in msg
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]  # no stray temp file


def _read_only(*folders):
    for d in folders:
        d.chmod(0o500)


@pytest.mark.parametrize("populated", [False, True], ids=["empty", "populated"])
def test_read_only_cache_compiles_new_kernels_into_a_private_temp_cache(tmp_path, populated):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    if populated:
        assert run_tags(cache, "a")["compiles"] == 1
    before = sorted(cache.rglob("*"))
    folders = [cache, *cache.iterdir()]
    _read_only(*folders)
    try:
        out = run_tags(cache, "a", "b", read_only=True)
    finally:
        for d in folders:
            d.chmod(0o700)
    assert out["error"] is None and out["values"] == [2.5, 2.5]
    assert out["compiles"] == (1 if populated else 2)  # what the cache has is still used
    assert out["disk_cache_hits"] == (1 if populated else 0)
    (warning,) = out["warnings"]
    assert warning[0] == "PerformanceWarning"
    for words in (str(cache), "Permission denied", "temporary", "LAZYRT_CACHE_DIR"):
        assert words in warning[1]
    assert sorted(cache.rglob("*")) == before


def test_read_only_cache_gives_the_same_message_empty_or_populated(tmp_path):
    messages = []
    for populated in (False, True):
        cache = tmp_path / f"cache-{populated}"
        cache.mkdir(mode=0o700)
        if populated:
            run_tags(cache, "a")
        folders = [cache, *cache.iterdir()]
        _read_only(*folders)
        try:
            (warning,) = run_tags(cache, "b", read_only=True)["warnings"]
        finally:
            for d in folders:
                d.chmod(0o700)
        # the private folder's name is random; the rest must read the same
        messages.append(re.sub(r"/\S*lazyrt-cache-\S*?(?=[\s/])", "<tmp>",
                               warning[1].replace(str(cache), "<cache>")))
    assert messages[0] == messages[1]


def test_cache_dir_owned_by_another_user_is_refused_with_a_fix_that_works(
        tmp_path, monkeypatch):
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(cache, 65534, 65534)  # nobody's
    else:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(cache).st_uid + 1)
    with pytest.raises(BackendError) as err:
        CCompiler(cache_dir=str(cache)).load("k_add_one", SOURCE)
    msg = str(err.value)
    assert str(cache) in msg and "owned by another user" in msg
    # chmod cannot help someone who does not own the folder: say what can
    assert "LAZYRT_CACHE_DIR" in msg and "chown" in msg
    assert "chmod" not in msg


def _kernel(k):
    symbol = f"k{k}_add_{k}"
    return symbol, f"double {symbol}(double x) {{ return x + {k}; }}\n"


def test_kernels_compiled_together_load_as_compiled_then_as_disk_hits(tmp_path):
    kernels = [_kernel(k) for k in range(1, 6)]
    cc = CCompiler(cache_dir=str(tmp_path))
    compiles = lazyrt.metrics.compiles
    cc.compile_kernels(kernels + kernels[:2])  # duplicates compile once
    assert lazyrt.metrics.compiles - compiles == 5
    for k, (symbol, source) in enumerate(kernels, 1):
        address, _, outcome = cc.load_kernel(symbol, source)
        assert outcome == "compiled"  # built ahead of the load, in this process
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(address)
        assert fn(1.0) == 1.0 + k
        assert cc.kernel_build_log(symbol, source).startswith("$ ")
    again = CCompiler(cache_dir=str(tmp_path))
    compiles = lazyrt.metrics.compiles
    again.compile_kernels(kernels)  # all on disk: nothing to do
    assert lazyrt.metrics.compiles == compiles
    assert {again.load_kernel(s, src)[2] for s, src in kernels} <= {"disk cache", "memory"}


def test_a_kernel_that_fails_together_fails_at_its_load_with_its_name(tmp_path):
    good, bad = _kernel(1), ("k2_broken", "double k2_broken(double x) { return x + ; }\n")
    cc = CCompiler(cache_dir=str(tmp_path))
    cc.compile_kernels([good, bad])  # no raise here: the load says which kernel
    assert cc.load_kernel(*good)[2] == "compiled"
    with pytest.raises(CompileError, match="broken"):
        cc.load_kernel(*bad)


def test_the_vector_width_follows_the_host_and_the_environment(monkeypatch):
    from lazyrt.backends import c as cb
    monkeypatch.setenv("LAZYRT_VECTOR_WIDTH", "256")
    assert cb.vector_width() == 256
    assert "-mprefer-vector-width=256" in cb.CBackend().compiler.flags
    monkeypatch.setenv("LAZYRT_VECTOR_WIDTH", "300")
    with pytest.raises(ValueError, match="LAZYRT_VECTOR_WIDTH"):
        cb.vector_width()
    monkeypatch.delenv("LAZYRT_VECTOR_WIDTH")
    monkeypatch.setattr(cb, "cpu_flags", lambda: frozenset({"avx2"}))
    assert cb.vector_width() == 256          # no AVX-512: 256-bit AVX2 loops
    monkeypatch.setattr(cb, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert cb.vector_width() in (256, 512)   # 256 only on a model that downclocks


def test_the_parallel_threshold_is_the_smallest_size_the_team_keeps_winning_from():
    from lazyrt.backends import c_parallel as cp
    one = {1024: 1.0, 2048: 2.0, 4096: 4.0, 8192: 8.0, 16384: 16.0, 32768: 32.0}
    team = {1024: 3.0, 2048: 1.0, 4096: 5.0, 8192: 6.0, 16384: 9.0, 32768: 15.0}
    assert cp.choose(one, team) == 8192          # 2048 wins alone: noise, not a trend
    assert cp.choose(one, dict(one)) == cp.CLAMP[1]  # never 20% faster: a busy machine
    big = {n: 1.0 for n in (1 << 19, 1 << 20)}
    assert cp.choose(big, {n: 0.1 for n in big}) == cp.CLAMP[1]
    small = {n: 1.0 for n in (1024, 2048)}
    assert cp.choose(small, {n: 0.1 for n in small}) == cp.CLAMP[0]


def test_the_c_backend_compiles_kernels_with_this_hosts_threshold(monkeypatch):
    from lazyrt.backends import c as cb
    monkeypatch.setenv("LAZYRT_PARALLEL_MIN", "4096")
    backend = cb.CBackend()
    assert backend.parallel_min == 4096 and "-DLZ_PAR_MIN=4096" in backend.compiler.flags
    monkeypatch.setenv("LAZYRT_PARALLEL_MIN", "many")
    with pytest.raises(ValueError, match="LAZYRT_PARALLEL_MIN"):
        cb.CBackend()
    monkeypatch.delenv("LAZYRT_PARALLEL_MIN")
    from lazyrt.backends import c_parallel as cp
    m = cp.measurement(cb.CBackend().compiler)  # measured or kept: either way
    assert m["threads"] >= 1 and (m["n"] == cp.NEVER or
                                   cp.CLAMP[0] <= m["n"] <= cp.CLAMP[1])
