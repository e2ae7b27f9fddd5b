"""The one way lazyrt says it runs correctly but slower than it could.

It sits at the bottom, beside :mod:`lazyrt.errors` and :mod:`lazyrt._frames`
(the only lazyrt modules it imports), so the cache, the backends and the runtime
can all warn without importing each other.
"""
from __future__ import annotations

from . import _frames
from .errors import PerformanceWarning


def warn_performance(message: str):
    """``warnings.warn(message, PerformanceWarning)``, shown at the user's line
    (:mod:`lazyrt._frames`'s rule) rather than at lazyrt's or torch's."""
    _frames.warn(message, PerformanceWarning)
