"""``python -m bench --suite torch`` in its quickest form: tiny models, the lazyrt
and eager peers (torch.compile's first compile alone takes longer than this whole
test; its peer is built the same way and runs in the real suite), and the JSON
holds every column the table shows. A peer that fails is a row with its reason;
a loss that differs from eager's is marked."""
import json

import pytest

torch = pytest.importorskip("torch")

import lazyrt as lr  # noqa: E402
from bench import __main__ as bench_main  # noqa: E402
from bench import kernel_profile, timing, torch_peers, torch_suite  # noqa: E402
from bench.torch_models import ModelCase, model_cases  # noqa: E402

needs_c = pytest.mark.skipif("c" not in lr.available_backends(), reason="no C compiler")

LAZY_COLUMNS = {"ms", "vs_eager", "trace_ms", "trace_pct", "trace_us_per_op", "aten_ops",
                "compile_s", "kernels", "graphs", "fallbacks", "fallback_ops", "check",
                "losses", "samples_ms", "floor_ms", "floor_step_ms", "floor_pct",
                "floor_share_of_trace"}


def test_the_torch_suite_is_registered_and_in_all():
    assert "torch" in bench_main.SUITES              # --suite all runs SUITES
    assert bench_main.parse_args(["--suite", "torch", "--quick"]).suite == "torch"


@needs_c
def test_quick_tiny_run_writes_every_column(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_suite, "model_cases", lambda tiny=False: model_cases(tiny=True))
    monkeypatch.setattr(torch_suite, "PEERS", ("lazyrt-c", "lazyrt (torch.compile)",
                                               "torch eager"))
    monkeypatch.setattr(timing, "PAUSE_S", timing.PAUSE_S)   # --quick lowers it globally
    monkeypatch.setattr(lr.runtime, "_default_backend", lr.runtime._default_backend)
    out = tmp_path / "torch.json"
    with lr.backend("c"):
        assert bench_main.main(["--suite", "torch", "--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["suite"] == "torch" and doc["cpu_model"] and doc["repeats"] >= 10
    rows = doc["rows"]
    eager_samples = {r["model"]: r["samples_ms"] for r in rows if r["peer"] == "torch eager"}
    assert {(r["model"], r["peer"]) for r in rows} == {
        (c.name, p) for c in model_cases(tiny=True)
        for p in ("lazyrt-c", "lazyrt (torch.compile)", "torch eager")}
    for r in rows:
        assert "error" not in r, r
        assert 0 < r["best_ms"] <= r["ms"] and len(r["samples_ms"]) >= 10 and len(r["losses"]) == 3
        if r["peer"] == "torch eager":
            assert r["check"] == "ref" and r["vs_eager"] == 1 and r["aten_ops"] > 0
            continue
        if r["peer"] == "lazyrt (torch.compile)":  # replayed: no trace, no lazy counters
            assert r["check"] == "ok", r["losses"]
            assert "trace_ms" not in r and r["paired_vs_eager"] is not None
            assert r["paired_vs_best"] == r["paired_vs_eager"]  # the only timed peer
            continue
        assert LAZY_COLUMNS <= set(r), LAZY_COLUMNS - set(r)
        assert r["check"] == "ok", r["losses"]
        assert r["steady_compiles"] == 0 and r["kernels"] > 0 and r["graphs"] >= 1
        assert 0 < r["trace_ms"] <= r["ms"] * 1.5 and r["aten_ops"] > 10
        assert r["run_ms"] == pytest.approx(r["ms"] - r["trace_ms"])
        assert r["run_vs_compile"] is None   # torch.compile was not timed
        assert r["paired_vs_compile"] is None
        median, low, high = r["paired_vs_eager"]    # 10 rounds (--quick): 2nd and 9th
        ratios = sorted(a / b for a, b in zip(r["samples_ms"], eager_samples[r["model"]]))
        assert (low, high) == pytest.approx((ratios[1], ratios[8])) and low <= median <= high
        # measured, not judged: a replayed step ran and was timed
        assert r["floor_ms"] > 0 and r["floor_step_ms"] > 0 and r["floor_share_of_trace"] > 0
        parts = r["cpp_floor_parts_ms"]
        assert r["cpp_floor_ms"] == pytest.approx(parts["optimizer"] +
                                                  parts["functional_forward_backward"])
        assert 0 < r["cpp_floor_ms"] and 0 < r["cpp_floor_pct"] < 100
        assert r["fallbacks"] == sum(r["fallback_ops"].values())
    # one target per replayed row, judged against the better peer timed (eager here)
    replayed = {r["model"]: r for r in rows if r["peer"] == "lazyrt (torch.compile)"}
    steps = [t for t in doc["targets"] if t["measured"] == "step / best peer's"]
    assert {t["model"] for t in steps} == set(replayed)
    # and its fixed costs: per call (three peers), first call with cold caches (--quick:
    # the first model), each judged
    costs = doc["compile_costs"]
    assert {r["peer"] for r in costs["fixed_cost"]} == {
        "lazyrt (torch.compile)", "torch.compile", "torch eager"}
    assert all(r["us"] > 0 for r in costs["fixed_cost"])
    first = model_cases(tiny=True)[0].name
    assert {(r["model"], r["backend"]) for r in costs["cold_first_call"]} == {
        (first, "lazyrt (BLAS choice kept)"), (first, "lazyrt"), (first, "inductor")}
    assert all("error" not in r and r["compile_s"] > 0 for r in costs["cold_first_call"])
    assert {t["target"] for t in doc["targets"]} - {t["target"] for t in steps} == {
        "per-call cost <= Inductor's", "first call (cold) <= 1/5 of Inductor's"}
    for t in steps:
        r = replayed[t["model"]]
        assert t["value"] == r["vs_eager"] and t["pass"] == (r["vs_eager"] <= 0.8), t
        assert t["paired"] == r["paired_vs_best"]
    # the lazy step's kernels by class, beside eager's (issue 38), every model
    profiles = {p["summary"]["model"]: p for p in doc["kernel_profile"]}
    assert set(profiles) == {c.name for c in model_cases(tiny=True)}
    for p in profiles.values():
        s = p["summary"]
        assert s["kernels"] == len(p["kernels"]) > 0 and s["mark_step_ms"] > 0
        assert s["eager_step_ms"] > 0 and s["kernels_ms"] > 0
        by_class = {r["class"]: r for r in p["classes"]}
        assert sum(r["launches"] for r in by_class.values()) == s["kernels"]
        assert by_class["products"]["launches"] > 0 and by_class["products"]["eager_ms"] > 0
        assert sum(r["ms"] for r in by_class.values()) == pytest.approx(s["kernels_ms"])
        for k in p["kernels"]:
            assert k["ms"] >= 0 and k["cls"] in kernel_profile.CLASSES
            assert (k["cls"] == "products") == (k["level"] == "") or not k["nbytes"]


def test_aten_ops_are_classed_as_lazyrt_kernels_are():
    c = kernel_profile.aten_class
    assert [c("aten::mm"), c("aten::addmm"), c("aten::bmm"),
            c("aten::_scaled_dot_product_flash_attention_for_cpu")] == ["products"] * 4
    assert [c("aten::native_layer_norm"), c("aten::native_layer_norm_backward"),
            c("aten::_log_softmax"), c("aten::sum"), c("aten::nll_loss_forward"),
            c("aten::_softmax_backward_data")] == ["reductions"] * 6
    assert [c("aten::embedding_dense_backward"), c("aten::index_select"),
            c("aten::scatter_add_")] == ["gathers/scatters"] * 3
    assert [c("aten::add"), c("aten::gelu_backward"), c("aten::_foreach_mul_"),
            c("aten::copy_")] == ["pointwise"] * 4


def test_a_model_that_cannot_be_built_is_n_a_with_its_reason(capsys):
    def broken():
        raise RuntimeError("no such layer")
    case = ModelCase("broken", broken, lambda: (torch.zeros(1), torch.zeros(1)), None)
    rows = torch_suite.measure_model(case, 10, True, ("torch eager", "torch.compile"))
    assert [(r["peer"], r["error"]) for r in rows] == [
        ("torch eager", "RuntimeError: no such layer"),
        ("torch.compile", "RuntimeError: no such layer")]
    torch_suite.print_results(rows)
    assert "n/a" in capsys.readouterr().out


def test_a_loss_that_differs_from_eagers_is_a_mismatch(capsys):
    peers = [torch_peers.StepPeer(name, extra={"losses": losses}) for name, losses in
             (("torch eager", [2.0, 1.5, 1.0]), ("lazyrt-c", [2.0, 1.5, 1.0 + 1e-7]),
              ("torch.compile", [2.0, 1.6, 1.0]))]
    torch_suite._check_losses(peers)
    assert [p.extra.get("check") for p in peers] == [None, "ok", "MISMATCH"]
    assert "MISMATCH" in capsys.readouterr().out


@pytest.mark.parametrize("warm", [True, False])
def test_the_trace_median_counts_the_timed_steps_only(warm):
    calls = []
    peer = torch_peers.StepPeer("lazyrt-c", trace_s=[0.5, 0.5])  # warm-up steps before
    peer.step = lambda: (calls.append(1), peer.trace_s.append(0.001 * len(calls)))
    timed = timing.Peer("lazyrt-c", peer.step, number=3)
    sample, timed_traces = torch_suite._sampler([peer], warm=warm)
    sample(timed)
    sample(timed)
    # each sample: its warm call (dropped) and 3 timed steps (kept)
    per = 4 if warm else 3
    assert len(calls) == 2 * per
    kept = [round(t * 1000) for t in timed_traces["lazyrt-c"]]
    assert kept == [n for n in range(1, 2 * per + 1) if not (warm and n % per == 1)]


def test_the_paired_ratio_interval_is_distribution_free():
    """The median of round-by-round ratios, between the order statistics whose
    binomial tails hold 2.5% each: the 2nd and 9th of 10, the 10th and 21st of
    30; too few rounds for a 95% interval give none."""
    assert timing.paired_ratio([1.0] * 5, [1.0] * 5) is None
    a = [1.0 + i / 100 for i in range(10)]                 # ratios 1.00 .. 1.09
    assert timing.paired_ratio(a[::-1], [1.0] * 10) == pytest.approx((1.045, 1.01, 1.08))
    a = [2.0 + i / 100 for i in range(30)]
    median, low, high = timing.paired_ratio(a, [2.0] * 30)
    assert (low, high) == pytest.approx((1.045, 1.1)) and median == pytest.approx(1.0725)
    # a slow spell that hits both peers of a round cancels in its ratio
    slow = [1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert timing.paired_ratio([1.02 * x for x in slow], slow)[0] == pytest.approx(1.02)


def test_math_table_times_every_function_and_checks_every_peer():
    """The CPU suite's math table, shrunk: every function of the issue at both
    dtypes, lazyrt-c's rows checked against torch float64 (never MISMATCH), the
    functions lazyrt lacks listed as such, and ratios to copy positive."""
    from bench import math_table
    doc = math_table.run(repeats=1, elements=4096, target_s=0.0005)
    rows = doc["rows"]
    names = {f.name for f in math_table.functions()}
    assert {"exp", "log1p", "erf", "gelu", "sin", "atan2"} <= names
    for dtype in ("float32", "float64"):
        mine = {r["function"]: r for r in rows if r["dtype"] == dtype and r["impl"] == "lazyrt-c"}
        assert set(mine) == names
        for name, r in mine.items():
            if "error" in r:
                assert r["error"] == "no lazyrt op" and name in ("exp2", "erfc", "softplus")
            else:
                assert r["check"] == "ok", (name, dtype, r)
                assert r["x_copy"] > 0 and r["elems_per_s_per_core"] > 0
