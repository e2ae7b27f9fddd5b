"""The proof that lazyrt is an array API namespace others can use: libraries
written against the standard (scikit-learn with ``array_api_dispatch``,
SciPy with ``SCIPY_ARRAY_API=1``) run end to end on lazyrt tensors and give
NumPy's results, returning lazyrt tensors where they return arrays.

SciPy reads ``SCIPY_ARRAY_API`` once, when it is first imported (and
scikit-learn's dispatch requires it), so each consumer runs in a fresh
subprocess on the backend under test (``LAZYRT_BACKEND``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lazyrt as lr

pytest.importorskip("array_api_compat")

# Each case: name -> the call, with ``xp`` the array constructor (lr.asarray or
# np.asarray). The script runs every case both ways and reports the largest error.
CASES = {
    "sklearn MinMaxScaler": "MinMaxScaler().fit_transform(xp(X))",
    "sklearn StandardScaler": "StandardScaler().fit_transform(xp(X))",
    "sklearn MaxAbsScaler": "MaxAbsScaler().fit_transform(xp(X))",
    "sklearn Normalizer": "Normalizer().fit_transform(xp(X))",
    "sklearn PolynomialFeatures": "PolynomialFeatures().fit_transform(xp(X))",
    "sklearn LabelEncoder": "LabelEncoder().fit_transform(xp(labels))",
    "sklearn r2_score": "r2_score(xp(y), xp(pred))",
    "sklearn mean_squared_error": "mean_squared_error(xp(y), xp(pred))",
    "sklearn accuracy_score": "accuracy_score(xp(labels), xp(guess))",
    "sklearn f1_score": "f1_score(xp(labels), xp(guess))",
    "sklearn log_loss": "log_loss(xp(labels), xp(prob))",
    "sklearn confusion_matrix": "confusion_matrix(xp(labels), xp(guess))",
    "sklearn euclidean_distances": "euclidean_distances(xp(X))",
    "sklearn rbf_kernel": "rbf_kernel(xp(X))",
    "scipy logsumexp": "special.logsumexp(xp(X), axis=1)",
    "scipy softmax": "special.softmax(xp(X), axis=1)",
    "scipy xlogy": "special.xlogy(xp(prob), xp(prob))",
    "scipy zscore": "stats.zscore(xp(X), axis=0)",
    "scipy skew": "stats.skew(xp(X), axis=0)",
    "scipy pearsonr": "stats.pearsonr(xp(y), xp(pred)).statistic",
}

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import lazyrt as lr
    import sklearn
    from scipy import special, stats
    from sklearn.preprocessing import (LabelEncoder, MaxAbsScaler, MinMaxScaler, Normalizer,
                                       PolynomialFeatures, StandardScaler)
    from sklearn.metrics import (accuracy_score, confusion_matrix, f1_score, log_loss,
                                 mean_squared_error, r2_score)
    from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel

    warnings.simplefilter("ignore")
    sklearn.set_config(array_api_dispatch=True)
    rng = np.random.default_rng(int(sys.argv[1]))
    X = rng.normal(size=(25, 4)); y = rng.normal(size=25); pred = y + rng.normal(size=25)
    labels = (X[:, 0] > 0).astype(np.int64); guess = (pred > 0).astype(np.int64)
    prob = rng.uniform(0.05, 0.95, size=25)
    report = {}
    for name, call in json.loads(sys.argv[2]).items():
        try:
            got = eval(call, globals(), {"xp": lr.asarray})
            want = eval(call, globals(), {"xp": np.asarray})
            err = float(np.max(np.abs(np.asarray(got, dtype=np.float64)
                                      - np.asarray(want, dtype=np.float64)), initial=0.0))
            report[name] = {"type": type(got).__name__, "error": err,
                            "shape": list(np.shape(want))}
        except Exception as exc:  # reported per case, so one gap does not hide the rest
            report[name] = {"failed": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report))
""")


def _run_consumers(backend: str, seed: int) -> dict:
    env = dict(os.environ, SCIPY_ARRAY_API="1", LAZYRT_BACKEND=backend)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(seed), json.dumps(CASES)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_array_api_compat_names_lazyrt_as_the_namespace():
    import array_api_compat
    x = lr.asarray(np.arange(3.0))
    assert array_api_compat.array_namespace(x) is lr
    assert array_api_compat.is_array_api_obj(x)
    assert array_api_compat.array_namespace(x, lr.asarray([1])) is lr
    xp = array_api_compat.array_namespace(x)
    assert isinstance(xp.mean(x * 2), lr.Tensor)


@pytest.fixture(scope="module")
def consumer_reports():
    """backend -> the consumers' report, each run once per module (a subprocess each)."""
    return {}


@pytest.mark.parametrize("case", list(CASES))
def test_consumer_runs_on_lazyrt_as_on_numpy(backend, consumer_reports, case):
    pytest.importorskip("sklearn")
    pytest.importorskip("scipy")
    if backend not in consumer_reports:
        consumer_reports[backend] = _run_consumers(backend, seed=0)
    result = consumer_reports[backend][case]
    assert "failed" not in result, result.get("failed")
    assert result["error"] < 1e-9, result
    if result["shape"]:   # an array result comes back as a lazyrt tensor
        assert result["type"] == "Tensor", result
