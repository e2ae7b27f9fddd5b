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


class _CausalBlock(nn.Module):
    """Pre-norm decoder block: causal self-attention (one fused QKV product,
    ``scaled_dot_product_attention``) and an exact-GELU MLP, both residual."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.up, self.down = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.gelu = nn.GELU()

    def forward(self, h):
        b, t, d = h.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(h)).split(d, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.down(self.gelu(self.up(self.ln2(h))))


class TinyGPT(nn.Module):
    """A GPT language model: token and position embeddings, ``layers`` causal
    pre-norm blocks, a final LayerNorm and a linear head."""

    def __init__(self, vocab: int, block: int, d_model: int, heads: int, layers: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(block, d_model)
        self.blocks = nn.ModuleList(_CausalBlock(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            h = block(h)
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


def _tokens(batch, seq, vocab, seed):
    """A fixed batch of (inputs, targets) token ids."""
    def data():
        g = torch.Generator().manual_seed(seed)
        return (torch.randint(0, vocab, (batch, seq), generator=g),
                torch.randint(0, vocab, (batch, seq), generator=g))
    return data


def _encoder_case(batch, seq, vocab, d_model, heads, d_ff, layers) -> ModelCase:
    return ModelCase(f"transformer b{batch}x{seq}",
                     _seeded(lambda: TinyEncoder(vocab, d_model, heads, d_ff, layers)),
                     _tokens(batch, seq, vocab, 2),
                     token_loss,
                     f"Embedding({vocab}, {d_model}), {layers} TransformerEncoderLayer ({heads} "
                     f"heads, ff {d_ff}, dropout 0), LayerNorm, Linear head, cross entropy",
                     twin=lambda: _encoder_case(1, 4, 16, 2 * heads, heads, 16, layers))


def _gpt_case(batch, seq, vocab, d_model, heads, layers) -> ModelCase:
    return ModelCase(f"GPT b{batch}x{seq}",
                     _seeded(lambda: TinyGPT(vocab, seq, d_model, heads, layers)),
                     _tokens(batch, seq, vocab, 3),
                     token_loss,
                     f"token + position Embedding({vocab}, {d_model}), {layers} causal pre-norm "
                     f"blocks ({heads} heads, SDPA, exact GELU MLP 4x), LayerNorm, Linear head, "
                     f"cross entropy",
                     twin=lambda: _gpt_case(1, 4, 16, 2 * heads, heads, layers))


def model_cases(tiny: bool = False) -> list[ModelCase]:
    """The benchmark models; ``tiny`` shrinks them so a smoke test takes seconds."""
    if tiny:
        return [_mlp_case(8, 16, 32, 4), _encoder_case(2, 8, 32, 16, 2, 32, 1),
                _gpt_case(2, 8, 32, 16, 2, 1)]
    return [_mlp_case(256, 784, 512, 10), _mlp_case(1024, 784, 512, 10),
            _encoder_case(8, 64, 1000, 128, 4, 512, 2),
            _encoder_case(32, 64, 1000, 128, 4, 512, 2),
            _gpt_case(8, 64, 512, 128, 4, 2)]
