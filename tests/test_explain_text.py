"""How ``lazyrt explain`` writes what it found: a recompile's line stays
readable when an optimizer's first step changes dozens of inputs, and each
fallback says who ran it."""
from __future__ import annotations

from lazyrt import explain as X


def test_a_recompile_shows_its_first_differences_and_counts_the_rest():
    diffs = tuple(X.Difference(f"input {i} was a runtime scalar, now a tensor", "train.py:21")
                  for i in range(10))
    text = str(X.Recompile(4, 0xB441245D2B65BFC9, "train.py:22", "lt.mark_step()", 3, diffs))
    assert text.count("now a tensor") == X.MAX_SHOWN
    assert text.endswith("input 5 was a runtime scalar, now a tensor, from train.py:21; "
                         "and 4 more")


def test_fallbacks_say_who_ran_them():
    e = X.Explanation(1, 2, fallbacks=((3, "aten.erfc.default", "/x/train.py:9"),
                                       (1, "getitem[advanced]", "/x/train.py:12")))
    (title, rows), = [s for s in e.sections() if s[0].startswith("fallbacks")]
    assert rows[0].endswith("train.py:9  (run by torch, eagerly on the CPU)")
    assert rows[1].endswith("train.py:12  (run by NumPy)")


def test_a_backend_switch_is_counted_as_one_at_the_with_line():
    """The switch syncs through contextlib's frames: the cause is still lazyrt's
    entry point (``lr.backend() switch``), not ``__enter__`` / ``__exit__``."""
    import inspect

    import numpy as np
    import pytest

    import lazyrt as lr
    others = [b for b in ("numpy", "c") if b in lr.available_backends()
              and b != lr.runtime.current_backend_name()]
    if not others:
        pytest.skip("one backend here: nothing to switch to")
    x = lr.tensor(np.ones(3)) * 2
    with lr.debug.watch() as run:
        with lr.backend(others[0]):
            y = x + 1
        line = inspect.currentframe().f_lineno - 2
    (y * 3).numpy()
    causes = {(cause, site) for _, cause, site in run.explain().causes}
    assert causes == {("lr.backend() switch", f"{__file__}:{line}")}
