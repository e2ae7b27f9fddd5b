"""A small training-style loop whose last batch is larger: the graph is
compiled again for the new shape. `lazyrt explain` names the change and the
line it came from; `--max-graphs 1` turns it into a failure for CI.

    lazyrt explain examples/batch_sizes.py
    lazyrt explain examples/batch_sizes.py --max-graphs 1
"""
import numpy as np

import lazyrt as lr

rng = np.random.default_rng(0)
w = lr.tensor(rng.standard_normal(16).astype(np.float32))

for step, batch in enumerate((8, 8, 12)):
    x = lr.tensor(rng.standard_normal((batch, 16)).astype(np.float32))
    h = lr.nn.relu(x * w + 0.5)
    loss = (h * h).mean()
    print(f"step {step}: loss {loss.item():.4f}")  # the barrier: .item()
