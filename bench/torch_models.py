"""The models the torch suite trains, at a benchmark size and a tiny one (tests).

Each :class:`ModelCase` builds its module from a fixed seed and draws one fixed
batch, so every peer (lazyrt, torch eager, torch.compile) starts from the same
weights and sees the same data: their losses must agree step for step.
Each model runs at two batch sizes. lazyrt's trace (Python dispatch,
functionalization, recording) is a fixed cost per step, the kernels grow with the
batch, so one size is where the trace weighs most and the other where the
kernels do:

* the small batch, where the trace weighs most: an eager float32 step of 7-10 ms
  (MLP, below the issue's "tens of milliseconds") and 17-25 ms (transformer, at
  the bottom of it), on two cores of the hosts seen so far;
* the large batch, 4x the small: 22-25 and 65-70 ms, inside the issue's range.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Sequential):
    """Linear-ReLU-Linear-ReLU-Linear classifier."""

    def __init__(self, n_in: int, hidden: int, n_out: int):
        super().__init__(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, n_out))


class TinyEncoder(nn.Module):
    """Token embedding, ``layers`` transformer encoder layers (dropout 0), a final
    LayerNorm and a linear head over the vocabulary: a small language model."""

    def __init__(self, vocab: int, d_model: int, heads: int, d_ff: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def token_loss(logits, targets):
    """Cross entropy over every position: (B, S, V) logits, (B, S) targets."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@dataclass
class ModelCase:
    """One model to train: ``build()`` the module (seeded), ``batch()`` its one
    fixed (input, target) pair, ``loss(output, target)``."""
    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[], tuple]
    loss: Callable
    note: str = ""
    #: the same layers at tiny sizes: the same aten ops per step with next to no
    #: compute, for what torch's own machinery costs per step (bench/torch_peers.py)
    twin: Optional[Callable[[], "ModelCase"]] = None


def _seeded(make, seed=0):
    def build():
        torch.manual_seed(seed)
        return make()
    return build


def _mlp_case(batch, n_in, hidden, n_out) -> ModelCase:
    def data():
        g = torch.Generator().manual_seed(1)
        return torch.randn(batch, n_in, generator=g), torch.randint(0, n_out, (batch,), generator=g)
    return ModelCase(f"MLP b{batch}", _seeded(lambda: MLP(n_in, hidden, n_out)), data,
                     F.cross_entropy,
                     f"Linear {n_in}-{hidden}-{hidden}-{n_out}, ReLU, cross entropy",
                     twin=lambda: _mlp_case(2, 8, 8, 4))


def _encoder_case(batch, seq, vocab, d_model, heads, d_ff, layers) -> ModelCase:
    def data():
        g = torch.Generator().manual_seed(2)
        return (torch.randint(0, vocab, (batch, seq), generator=g),
                torch.randint(0, vocab, (batch, seq), generator=g))
    return ModelCase(f"transformer b{batch}x{seq}",
                     _seeded(lambda: TinyEncoder(vocab, d_model, heads, d_ff, layers)), data,
                     token_loss,
                     f"Embedding({vocab}, {d_model}), {layers} TransformerEncoderLayer ({heads} "
                     f"heads, ff {d_ff}, dropout 0), LayerNorm, Linear head, cross entropy",
                     twin=lambda: _encoder_case(1, 4, 16, 2 * heads, heads, 16, layers))


def model_cases(tiny: bool = False) -> list[ModelCase]:
    """The benchmark models; ``tiny`` shrinks them so a smoke test takes seconds."""
    if tiny:
        return [_mlp_case(8, 16, 32, 4), _encoder_case(2, 8, 32, 16, 2, 32, 1)]
    return [_mlp_case(256, 784, 512, 10), _mlp_case(1024, 784, 512, 10),
            _encoder_case(8, 64, 1000, 128, 4, 512, 2),
            _encoder_case(32, 64, 1000, 128, 4, 512, 2)]
