"""Autotune configs of the generated Triton kernels (``lzm.POINTWISE_CONFIGS``...,
re-exported by :mod:`triton_math`): one config under the interpreter, small lists
per kernel kind on a GPU, the first only with ``LAZYRT_TRITON_AUTOTUNE=0``."""
import os

import triton

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: LAZYRT_TRITON_AUTOTUNE=0: first config only (tests on a GPU: no tuning runs)
SINGLE_CONFIG = INTERPRETED or os.environ.get("LAZYRT_TRITON_AUTOTUNE") == "0"


# --- autotuning: small config lists per kernel kind (one under the interpreter,
# where timing configs means nothing and every config costs a slow run) ------

if INTERPRETED:
    POINTWISE_CONFIGS = [triton.Config({"BLOCK": 1024}, num_warps=4)]
    REDUCTION_CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=4)]
else:  # pragma: no cover - needs a GPU
    POINTWISE_CONFIGS = [triton.Config({"BLOCK": 1024}, num_warps=4),
                         triton.Config({"BLOCK": 2048}, num_warps=8),
                         triton.Config({"BLOCK": 4096}, num_warps=8, num_stages=2)]
    REDUCTION_CONFIGS = [triton.Config({"BLOCK": 2048}, num_warps=8),
                         triton.Config({"BLOCK": 4096}, num_warps=16),
                         triton.Config({"BLOCK": 1024}, num_warps=4)]

# tiled pointwise kernels (a transpose feeding a pointwise op): square-ish tiles
# keep both the row-contiguous and the column-contiguous buffers in long runs
if INTERPRETED:
    TILE_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4)]
else:  # pragma: no cover - needs a GPU
    TILE_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4),
                    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=8),
                    triton.Config({"BLOCK_M": 32, "BLOCK_N": 128}, num_warps=4)]

if INTERPRETED:
    MATMUL_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8},
                                    num_warps=4)]
else:  # pragma: no cover - needs a GPU
    # sm_90 registers, read from ptxas by the AOT check (tests/test_triton_aot.py):
    # 128x256x64/8 warps spilled 42 KB in float32 and, like 128x128x32/4 warps,
    # hit 255 registers and spilled with a GELU epilogue in float16, so neither is here
    MATMUL_CONFIGS = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
                      num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                      num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8},
                      num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                      num_warps=4, num_stages=3),
    ]

if SINGLE_CONFIG and not INTERPRETED:  # pragma: no cover - needs a GPU
    POINTWISE_CONFIGS, REDUCTION_CONFIGS, TILE_CONFIGS, MATMUL_CONFIGS = (
        POINTWISE_CONFIGS[:1], REDUCTION_CONFIGS[:1], TILE_CONFIGS[:1], MATMUL_CONFIGS[:1])

#: integer matmuls multiply-add through a [BM, BK, BN] product (no integer tl.dot
#: that matches NumPy's int64 wrap-around), so their tiles stay small
MATMUL_INT_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8},
                                    num_warps=4)]
