"""What the runtime tells the ``LAZYRT_DEBUG`` dial and ``LAZYRT_DUMP_DIR``: the
sink every barrier calls (:func:`level`, :func:`compiled`, :func:`ran`,
:func:`report_graph`, :func:`report_launch`), and the records it keeps.

The user's side, which reads these records and watches the runtime, is
:mod:`lazyrt.debug`; this module imports nothing above
:mod:`lazyrt.compile_record`, so the runtime's calls here lead nowhere back.

It is read on every barrier, so a test or a notebook can turn it on and off
at run time. ``os.environ``'s own lookup of an unset variable raises and
catches a KeyError (about a microsecond, a tenth of a small graph's whole
sync), so the dial reads the environment's underlying dict directly where
the platform has one.
"""
from __future__ import annotations

import os
from collections import deque

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


def watching() -> bool:
    """Whether ``LAZYRT_DEBUG`` is set at all (one dict lookup: what a replayed
    program asks on every run before it pays for :func:`level`)."""
    return _read() is not None


def level() -> int:
    """The current ``LAZYRT_DEBUG`` level (0 when unset)."""
    raw = _read()
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"lazyrt: $LAZYRT_DEBUG must be an integer 0-4, got {raw!r}") from None


# --- what the barrier shows: every backend's compile record, formatted once ----

DUMP_VARIABLE = "LAZYRT_DUMP_DIR"
_read_dump = _reader(DUMP_VARIABLE)
_last = [None]  # the program the last barrier ran (its record is the last record)
#: the records of the last compiles, newest last (kept on a compile, never on a run)
RECORDS_KEPT = 64
_records = deque(maxlen=RECORDS_KEPT)


def ran(program):
    """The barrier ran ``program`` (cheap: one store; the record exists already)."""
    _last[0] = program


def compiled(record, level: int):
    """The barrier compiled a program: print its record at ``level`` and write
    it to ``$LAZYRT_DUMP_DIR`` when set. The only place records are shown."""
    import sys
    from .compile_record import dump_record, format_record
    _records.append(record)
    if level >= 2:
        print(format_record(record, level), file=sys.stderr)
    root = _read_dump()
    if root:
        dump_record(record, root)


def report_launch(name: str, seconds: float, nbytes: int):
    """``LAZYRT_DEBUG>=2``: one line per launch, its time and GB/s (every backend)."""
    import sys
    gbs = nbytes / seconds / 1e9 if seconds > 0 and nbytes else 0.0
    print(f"[lazyrt]   {name:<40s} {seconds * 1e3:9.3f} ms {gbs:8.2f} GB/s", file=sys.stderr)


def report_graph(key: int, nodes: int, kernels: int, compiled: bool, backend: str,
                 seconds: float):
    """``LAZYRT_DEBUG>=1``: one line per executed graph."""
    import sys
    print(f"[lazyrt] graph {key:016x} {nodes} nodes, {kernels} kernels, "
          f"{'compiled' if compiled else 'cached'} on {backend}, {seconds * 1e3:.3f} ms",
          file=sys.stderr)
