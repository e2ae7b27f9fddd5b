"""Issue 11's end-to-end check: a 2-layer transformer encoder (embedding,
attention, layer norm, MLP, cross-entropy) trained 20 steps on lazy tensors
agrees with eager torch: float64 losses and parameters within 1e-9, float32
losses within 1e-4 relative; no fallback, and from step 3 on nothing compiles.

AdamW divides by sqrt(v) + eps: a parameter whose true gradient is zero (an
embedding row no token uses) gets rounding noise of both runs amplified, so
parameters are compared with an absolute floor scaled to the learning rate."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyrt as lr
import lazyrt.torch as lt
from torch_fixtures import torch_backend  # noqa: F401 (a fixture)

VOCAB, CLASSES, STEPS = 23, 5, 20


class Encoder(nn.Module):
    def __init__(self, d=16, heads=2, ff=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, tokens):
        return self.head(self.norm(self.encoder(self.embed(tokens))).mean(dim=1))


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
}


def _train(model, opt, sched, batches, device):
    losses = []
    for tokens, labels in batches:
        loss = F.cross_entropy(model(tokens.to(device)), labels.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if device == "lazy":
            lt.mark_step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype, opt", [(torch.float64, "adamw"), (torch.float64, "sgd"),
                                        (torch.float32, "adamw")])
def test_a_transformer_trains_20_steps_as_eager_does(torch_backend, dtype, opt):
    if torch_backend == "numpy" and dtype == torch.float32:
        pytest.skip("float32 is checked on the compiled backend; numpy runs op by op")
    torch.manual_seed(3)
    eager = Encoder().to(dtype)
    lazy = lt.lazy(copy.deepcopy(eager))
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randint(0, VOCAB, (4, 7), generator=g),
                torch.randint(0, CLASSES, (4,), generator=g)) for _ in range(STEPS)]
    runs = []
    for model, device in ((eager, "cpu"), (lazy, "lazy")):
        o = OPTIMIZERS[opt](model.parameters())
        sched = torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.7)
        lr.metrics.reset()
        losses = _train(model, o, sched, batches[:2], device)
        compiles_after_two = lr.metrics.compiles
        losses += _train(model, o, sched, batches[2:], device)
        runs.append((losses, lr.metrics.compiles - compiles_after_two))
    (eager_losses, _), (lazy_losses, late_compiles) = runs
    assert lr.metrics.snapshot()["fallbacks"] == {}
    assert late_compiles == 0
    rtol = 1e-9 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses),
                               rtol=rtol, atol=0.0)
    if dtype == torch.float64:
        floor = 1e-9 * 1e-2 / 1e-8 if opt == "adamw" else 1e-12  # lr / eps: AdamW's noise gain
        for p, q in zip(eager.parameters(), lt.to_cpu(list(lazy.parameters()))):
            torch.testing.assert_close(q, p, rtol=1e-9, atol=floor)
