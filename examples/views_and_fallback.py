"""A program with a reshape, a reduction, a printed tensor, a bool() and an
advanced index (run eagerly by NumPy: a counted fallback). `lazyrt kernels`
and `lazyrt graph` show what it compiles to; `lazyrt run --trace` times it.
Its exit status is its first argument (0 by default).

    lazyrt kernels examples/views_and_fallback.py
    lazyrt graph examples/views_and_fallback.py --format dot
    lazyrt run examples/views_and_fallback.py --dump out/ --trace trace.json
"""
import sys

import numpy as np

import lazyrt as lr

x = lr.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
y = (x.T + 1.0).reshape(3, 8)
z = lr.exp(y / 24.0).sum(axis=1)
print(z)                                       # a barrier: print
if bool(z.max() > 100):                        # a barrier: bool()
    print("large")
picked = x[np.array([0, 2]), np.array([1, 5])]  # two index arrays: a fallback
print(float((picked * 2).sum()))               # a barrier: float()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
