"""The on-disk kernel cache (lazyrt/cache.py): where it is, what is in it by
backend, verifying and clearing it, and the same safety for every backend
that writes there (the Triton backend included)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

import lazyrt as lr
from lazyrt import cache

needs_c = pytest.mark.skipif("c" not in lr.available_backends(),
                             reason="no C compiler: the c backend is unavailable")
needs_triton = pytest.mark.skipif("triton" not in lr.available_backends(),
                                  reason="triton (or its interpreter) is unavailable")

SOURCE = "double add_one(double x) { return x + 1; }\n"


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYRT_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_root() == str(tmp_path / "mine")
    monkeypatch.delenv("LAZYRT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == str(tmp_path / "xdg" / "lazyrt")
    assert cache.backend_folder("c").endswith("v" + lr.__version__)
    assert cache.backend_folder("triton") == str(tmp_path / "xdg" / "lazyrt" / "triton")


@needs_c
def test_entries_lists_c_kernels_with_their_files_and_sizes(tmp_path):
    from lazyrt.backends.c_compiler import CCompiler
    CCompiler(cache_dir=str(tmp_path)).load("k_add_one", SOURCE)
    (entry,) = cache.entries(root=str(tmp_path))
    assert entry.backend == "c" and entry.kernel == "k_add_one"
    assert sorted(os.path.splitext(p)[1] for p in entry.paths) == [".c", ".sha256", ".so"]
    assert entry.size == sum(os.path.getsize(p) for p in entry.paths)
    assert cache.summary(str(tmp_path)) == {"c": (1, entry.size)}
    assert cache.entries("triton", str(tmp_path)) == []
    assert cache.verify(root=str(tmp_path)) == []


@needs_c
def test_verify_finds_a_binary_that_does_not_match_its_checksum(tmp_path):
    from lazyrt.backends.c_compiler import CCompiler
    CCompiler(cache_dir=str(tmp_path)).load("k_add_one", SOURCE)
    (entry,) = cache.entries(root=str(tmp_path))
    so = next(p for p in entry.paths if p.endswith(".so"))
    with open(so, "ab") as f:
        f.write(b"tampered")
    ((bad, why),) = cache.verify(root=str(tmp_path))
    assert bad.name == entry.name and "checksum" in why
    os.remove(so[:-3] + ".sha256")
    ((_, why),) = cache.verify(root=str(tmp_path))
    assert "without its checksum" in why


def test_clear_removes_entries_by_backend_and_says_how_much(tmp_path):
    c_dir = tmp_path / f"v{lr.__version__}"
    t_dir = tmp_path / "triton"
    for d in (c_dir, t_dir):
        d.mkdir(mode=0o700)
    (c_dir / "k-abc.c").write_text("int x;\n")
    (c_dir / "k-abc.so").write_bytes(b"\0" * 10)
    (t_dir / "k0_fused_add_0123.py").write_text("# kernel\n")
    by_backend = cache.summary(str(tmp_path))
    assert set(by_backend) == {"c", "triton"} and by_backend["c"] == (1, 17)
    assert cache.clear("triton", str(tmp_path)) == len("# kernel\n")
    assert set(cache.summary(str(tmp_path))) == {"c"}
    assert cache.clear(root=str(tmp_path)) == 17
    assert cache.entries(root=str(tmp_path)) == []


def test_a_cache_folder_writes_atomically_and_privately(tmp_path):
    folder = cache.CacheFolder(str(tmp_path / "root" / "triton"), str(tmp_path / "root"))
    path = folder.write("k.py", b"x = 1\n")
    assert path == str(tmp_path / "root" / "triton" / "k.py")
    assert open(path).read() == "x = 1\n"
    for d in (tmp_path / "root", tmp_path / "root" / "triton"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert [p.name for p in (tmp_path / "root" / "triton").iterdir()] == ["k.py"]  # no temp left


def test_a_group_writable_cache_folder_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(lr.BackendError, match="writable by group or others"):
        cache.CacheFolder(str(d)).write("k.py", b"")


CHILD = """
import json, warnings, numpy as np
import lazyrt as lr
from lazyrt.errors import PerformanceWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with lr.backend("triton"):
        value = (lr.tensor(np.arange(4.0, dtype=np.float32)) * 2 + 1).numpy().tolist()
    record = lr.debug.last_record()
print(json.dumps({"value": value, "sources": [k.source != "" for k in record.kernels],
                  "warnings": [str(w.message) for w in caught
                               if issubclass(w.category, PerformanceWarning)]}))
"""


def _bound_by_permission_bits():
    """preexec_fn: a root child drops CAP_DAC_OVERRIDE (and its read/search and
    owner twins) so a 0500 folder stops it, as it stops any user (as in
    test_c_compiler_cache.py)."""
    import ctypes as c
    libc = c.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(97)


def _run_triton(cache_dir, read_only=False):
    env = dict(os.environ, LAZYRT_CACHE_DIR=str(cache_dir), TRITON_INTERPRET="1")
    env.pop("LAZYRT_BACKEND", None)
    preexec = _bound_by_permission_bits if read_only and os.geteuid() == 0 else None
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=300, preexec_fn=preexec)
    if out.returncode == 97 and preexec:
        pytest.skip("running as root without a way to drop CAP_DAC_OVERRIDE: a read-only "
                    "folder cannot be simulated")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_triton
def test_triton_kernels_go_through_the_shared_cache(tmp_path):
    out = _run_triton(tmp_path)
    assert out["value"] == [1.0, 3.0, 5.0, 7.0] and out["warnings"] == []
    (entry,) = cache.entries("triton", str(tmp_path))
    assert entry.paths[0].endswith(".py")
    assert stat.S_IMODE(os.stat(tmp_path / "triton").st_mode) == 0o700


@needs_triton
def test_a_read_only_cache_sends_triton_kernels_to_a_private_folder(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    root.chmod(0o500)
    try:
        out = _run_triton(root, read_only=True)
    finally:
        root.chmod(0o700)
    assert out["value"] == [1.0, 3.0, 5.0, 7.0]
    (warning,) = out["warnings"]
    assert str(root) in warning and "temporary" in warning and "Triton kernels" in warning
    assert list(root.iterdir()) == []  # nothing written into the read-only cache
