"""``lazyrt doctor``'s Triton line on machines this one is not: a GPU whose
kernel runs (pass), one whose kernel fails (FAIL), a GPU without triton (warn),
neither (skip). The probes are replaced; the verdicts are the doctor's own."""
from __future__ import annotations

import builtins
import sys

import pytest

from lazyrt.backends import triton as triton_backend
from lazyrt.cli import machine


@pytest.fixture
def gpu(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(triton_backend, "cuda_device_present", lambda: True)


def test_a_gpu_whose_kernel_runs_passes(gpu, monkeypatch):
    monkeypatch.setattr(machine, "_triton_kernel_on_gpu", lambda: "NVIDIA H200")
    status, detail = machine._check_triton()
    assert status == machine.PASS and "on NVIDIA H200: compiled and ran a kernel" in detail


def test_a_gpu_whose_kernel_fails_is_a_failure(gpu, monkeypatch):
    def broken():
        raise RuntimeError("PTX .version 8.7 does not support .target sm_120\nmore")
    monkeypatch.setattr(machine, "_triton_kernel_on_gpu", broken)
    status, detail = machine._check_triton()
    assert status == machine.FAIL
    assert detail.endswith("a tiny kernel failed: PTX .version 8.7 does not support "
                           ".target sm_120")


def test_no_gpu_is_skipped_and_a_gpu_without_triton_warns(monkeypatch):
    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton":
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_triton)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.setattr(machine, "_gpu_present", lambda: False)
    assert machine._check_triton()[0] == machine.SKIP
    monkeypatch.setattr(machine, "_gpu_present", lambda: True)
    status, detail = machine._check_triton()
    assert status == machine.WARN and "pip install triton" in detail


def test_a_failed_check_makes_the_exit_status_1(monkeypatch, capsys):
    monkeypatch.setattr(machine, "_check_jax", lambda: (machine.FAIL, "broken jax"))
    monkeypatch.setattr(machine, "_check_triton", lambda: (machine.SKIP, "no GPU here"))
    assert machine.cmd_doctor(None) == 1
    assert "1 failed: JAX" in capsys.readouterr().out
    monkeypatch.setattr(machine, "_check_jax", lambda: (machine.SKIP, "not installed"))
    assert machine.cmd_doctor(None) == 0
