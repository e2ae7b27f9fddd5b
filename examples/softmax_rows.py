"""A row softmax and a scaled residual, run for a few steps: the program
`lazyrt check` compares against the numpy oracle (its exp feeds a fused
softmax kernel).

    lazyrt check examples/softmax_rows.py --backend c
"""
import numpy as np

import lazyrt as lr

rng = np.random.default_rng(0)
x = lr.tensor(rng.standard_normal((32, 64)).astype(np.float32))
w = lr.tensor(rng.standard_normal(64).astype(np.float32))

for step in range(3):
    p = lr.nn.softmax(x * w, axis=-1)
    y = lr.nn.relu(x + p * 0.5)
    print(f"step {step}: row sum {p.sum(axis=-1).numpy()[0]:.4f}, mean {y.mean().item():.4f}")
