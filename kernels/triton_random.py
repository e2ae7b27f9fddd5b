"""Counter-based random bits for generated Triton kernels (imported as ``lzr``).

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
1, 2, 3", SC11) in uint32 arithmetic with ``tl.umulhi``; ``tl.rand`` is not used,
its stream layout differs from lazyrt's. Word ``p`` of seed's stream is output
``p & 3`` of the block with counter (b & 0xffffffff, b >> 32, 0, 0), b = p >> 2,
under key (seed & 0xffffffff, seed >> 32); p and seed taken as uint64. The
NumPy reference (``lazyrt.ops.philox4x32_10``), the C header
``lazyrt_random.h`` and ``jax_math.philox_word`` compute the same words.
"""
import triton
import triton.language as tl


@triton.jit
def philox_word(seed, position):
    """Word ``position`` of ``seed``'s stream: an int64 in [0, 2^32)."""
    p = position.to(tl.uint64, bitcast=True)
    s = seed.to(tl.uint64, bitcast=True)
    b = p >> 2
    c0 = b.to(tl.uint32)
    c1 = (b >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    k0 = s.to(tl.uint32) + c2  # as a block, whether seed is a scalar or not
    k1 = (s >> 32).to(tl.uint32) + c2
    m0 = c2 + 0xD2511F53
    m1 = c2 + 0xCD9E8D57
    for _ in tl.static_range(10):
        n0 = tl.umulhi(m1, c2) ^ c1 ^ k0
        n2 = tl.umulhi(m0, c0) ^ c3 ^ k1
        c1 = m1 * c2
        c3 = m0 * c0
        c0 = n0
        c2 = n2
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    lane = (p & 3).to(tl.uint32)
    lo = tl.where((lane & 1) != 0, c1, c0)
    hi = tl.where((lane & 1) != 0, c3, c2)
    return tl.where((lane & 2) != 0, hi, lo).to(tl.int64)
