"""Timing shared by every suite: warm-up, repeats, median, pauses, interleaving.

``interleaved(peers, repeats)`` compares implementations ("peers") of one
case. A sample is a timeit-style loop of ``number`` calls (enough for ~20 ms,
so sub-microsecond work is measurable); the result is the median sample.
Each repeat runs every peer once, round-robin, so a slow drift of the machine
(thermal, another process) hits all peers alike instead of the one that
happened to run last. A ``pause()`` before each sample lets the previous
library's worker threads (OpenMP spin-waits) go to sleep first.
"""
from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

PAUSE_S = 0.2      # between blocks; --quick lowers it (see set_pause)
MIN_REPEATS = 10


def set_pause(seconds: float) -> None:
    """Change the pause used between blocks (``--quick`` shortens it)."""
    global PAUSE_S
    PAUSE_S = seconds


def pause(seconds: Optional[float] = None) -> None:
    """Sleep so spinning threads of the previous block stop competing for cores."""
    time.sleep(PAUSE_S if seconds is None else seconds)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def paired_ratio(a: list, b: list, confidence: float = 0.95) -> Optional[tuple]:
    """``(median, low, high)`` of the per-round ratios ``a[i] / b[i]`` of two
    interleaved peers, with a distribution-free confidence interval for that
    median (order statistics: the interval between the k-th smallest and the
    k-th largest ratio holds the median with probability >= ``confidence``);
    None when there are too few rounds for one.

    Samples of one round ran back to back, so a slow spell of the machine lands
    in both and cancels in their ratio; the interval says how sure the ratio is.

    >>> paired_ratio([2.0, 2.2, 1.8, 2.0, 2.1, 1.9, 2.0, 2.0, 2.0, 2.0],
    ...              [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    (1.0, 0.95, 1.05)
    """
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    n = len(ratios)
    # largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2
    k, tail = 0, 0.0
    while True:
        tail_next = tail + math.comb(n, k) / 2 ** n
        if tail_next > (1 - confidence) / 2:
            break
        tail, k = tail_next, k + 1
    if k == 0:
        return None
    return statistics.median(ratios), ratios[k - 1], ratios[n - k]


def calls_for(fn: Callable[[], object], target_s: float = 0.02, cap: int = 100_000) -> int:
    """How many calls of ``fn`` make one sample of about ``target_s`` (at least 1)."""
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(cap, int(target_s / dt) if dt > 0 else cap))


@dataclass
class Peer:
    """One implementation of a case.

    ``fn`` runs the work to completion (it synchronizes itself: ``lr.sync``,
    ``block_until_ready``, ``torch.cuda.synchronize``...). ``activate`` runs
    untimed before each sample (select a backend, set thread counts).
    """
    name: str
    fn: Callable[[], object]
    activate: Callable[[], None] = lambda: None
    number: int = 0                      # calls per sample; 0: chosen by calls_for
    samples: list = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return median(self.samples)


def one_sample(peer: Peer, warm: bool = True) -> float:
    """Seconds per call of one sample: a warm call (unless ``warm`` is false), then
    ``peer.number`` timed calls."""
    peer.activate()
    if warm:
        peer.fn()
    fn = peer.fn
    t0 = time.perf_counter()
    for _ in itertools.repeat(None, peer.number):
        fn()
    return (time.perf_counter() - t0) / peer.number


def interleaved(peers: list[Peer], repeats: int = MIN_REPEATS, warmup: int = 2,
                target_s: float = 0.02, pause_s: Optional[float] = None,
                sample: Callable[[Peer], float] = None) -> list[Peer]:
    """Time ``peers`` round-robin: ``repeats`` rounds, each peer once per round.

    Fills ``peer.samples`` (seconds per call) and returns the peers. ``pause_s``
    overrides the pause before each sample (single-threaded suites need less);
    ``sample`` replaces the wall-clock sampler (the GPU suite uses CUDA events).
    """
    sample = sample or one_sample
    for peer in peers:
        peer.activate()
        for _ in range(warmup):
            peer.fn()
        if peer.number <= 0:
            peer.number = calls_for(peer.fn, target_s)
    for _ in range(max(repeats, MIN_REPEATS)):
        for peer in peers:
            pause(pause_s)
            peer.samples.append(sample(peer))
    return peers


def first_call_s(fn: Callable[[], object]) -> float:
    """Wall time of one call: for a compiled peer, its first call pays the compile."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
