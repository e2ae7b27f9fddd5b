"""Shared by the float32 accuracy tests of the JAX and Triton lowerings: a
stratified sample of float32 bit patterns, the ULP distance between float32
values, and the operand pairs the binary functions are measured on."""
import numpy as np


def stratified_float32(per_stratum, seed, specials):
    """``per_stratum`` random mantissas under each of the 512 sign-exponent patterns
    (NaN payloads and subnormals included), then ``specials``."""
    rng = np.random.default_rng(seed)
    top = np.repeat(np.arange(512, dtype=np.uint32), per_stratum) << np.uint32(23)
    bits = top | rng.integers(0, 1 << 23, top.size, dtype=np.uint32)
    return np.concatenate([bits.view(np.float32), specials])


def ulp_distance(y, ref):
    """How many float32 values lie between ``y`` and ``ref`` (-0 and +0: none);
    NaN vs NaN is 0, NaN vs a number infinite."""
    def ordered(v):
        i = np.asarray(v, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    y, ref = np.asarray(y, np.float32), np.asarray(ref, np.float32)
    d = np.abs(ordered(y) - ordered(ref)).astype(np.float64)
    yn, rn = np.isnan(y), np.isnan(ref)
    return np.where(yn | rn, np.where(yn & rn, 0.0, np.inf), d)


def binary_pairs(n, seed, sample):
    """atan2: two independent stratified samples (``sample(per_stratum, seed)``).
    pow: those, then bases with exponents chosen so that the result lands in
    float32's range (|y log2 x| < 150), then integer exponents of negative bases."""
    rng = np.random.default_rng(seed)
    a = rng.permutation(sample(n >> 9, seed))[:n]
    b = rng.permutation(sample(n >> 9, seed + 1))[:n]
    base = np.abs(rng.permutation(a))
    with np.errstate(all="ignore"):
        expo = (rng.uniform(-150, 128, n) / np.log2(base.astype(np.float64))).astype(np.float32)
    return {"atan2": (a, b), "pow": (np.concatenate([a, base, -base]),
                                     np.concatenate([b, expo, np.round(expo)]))}
