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
