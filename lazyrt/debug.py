"""The debug dial, ``LAZYRT_DEBUG``: 1 prints one line per executed graph, 2 adds
each kernel's time and GB/s, 3 the fusion plan, 4 the generated source.

It is read on every barrier, so a test or a notebook can turn it on and off
at run time. ``os.environ``'s own lookup of an unset variable raises and
catches a KeyError (about a microsecond, a tenth of a small graph's whole
sync), so the dial reads the environment's underlying dict directly where
the platform has one.
"""
from __future__ import annotations

import os

VARIABLE = "LAZYRT_DEBUG"


def _reader(name):
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    decode = getattr(os.environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:
        return lambda: os.environ.get(name)
    key = encode(name)

    def read():
        raw = data.get(key)
        return None if raw is None else decode(raw)
    return read


_read = _reader(VARIABLE)


def level() -> int:
    """The current ``LAZYRT_DEBUG`` level (0 when unset)."""
    raw = _read()
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"lazyrt: $LAZYRT_DEBUG must be an integer 0-4, got {raw!r}") from None
