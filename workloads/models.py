"""Reference models for the workloads: a small GPT-style language model and an MLP.

Presets (``--preset``), chosen so that ``tiny`` runs in seconds on a laptop CPU and the larger ones keep
a GPU busy. Parameter counts are approximate (fp32 bytes = 4 x params):

==========  =================================================  ========================================
preset      GPT (d_model / layers / heads / vocab, seq len)    MLP (width / layers, input dim)
==========  =================================================  ========================================
tiny        64 / 2 / 2 / 512, seq 64          (~0.2 M params)  128 / 4, in 128          (~0.07 M params)
small       512 / 8 / 8 / 8192, seq 256       (~34 M)          1024 / 8, in 1024        (~8 M)
medium      768 / 12 / 12 / 32768, seq 512    (~136 M)         4096 / 8, in 4096        (~134 M)
large       1024 / 24 / 16 / 32768, seq 1024  (~370 M)         8192 / 8, in 8192        (~537 M)
xl          1600 / 48 / 25 / 32768, seq 1024  (~1.6 B)         8192 / 16, in 8192       (~1.1 B)
comm-heavy  32 / 4 / 2 / 256, seq 8           (~0.07 M)        160 / 16, in 160         (~0.4 M)
==========  =================================================  ========================================

Batch per rank: 8 (tiny, small, medium), 4 (large), 2 (xl), 1 (comm-heavy).

``comm-heavy`` is communication-bound by construction: many small gradients (MLP: 34 of them, each
weight 100 KB, just under the CPU bucket cap of 0.1 MiB so bucketing merges little) and almost no
compute (one sample per rank). Each all-reduce costs a fixed latency (a gloo round trip between
threads and processes) that the microseconds of compute per layer cannot match, so with one
all-reduce per gradient (``naive``) communication exceeds compute several times over (measured on
this project's loaded 2-core CPU, MLP + ``naive``: comm 3.5-9.4x compute per step, the exposed
transfer 1.8-3.3x the idle time; with ``bucketed`` or ``overlap`` waiting and compute vary too much
between ranks to promise it). A wide MLP with a tiny batch (lots of gradient *bytes*) does not get
there on a CPU: the freshly allocated gradients and the optimizer cost about as much per byte as
gloo's loopback transfer (width 2048, 2 layers, batch 1, SGD: comm 0.9-1.9x compute; AdamW's step
alone takes longer than the all-reduce).

Nothing here is random except through the global torch seed the caller sets, so every rank that
seeds the same way builds identical weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Preset:
    """Sizes of one preset. ``heads`` and ``vocab`` are unused by the MLP."""

    d_model: int
    layers: int
    heads: int
    vocab: int
    seq_len: int
    batch_size: int
    mlp_width: int
    mlp_layers: int


PRESETS: dict[str, Preset] = {
    "tiny": Preset(64, 2, 2, 512, 64, 8, 128, 4),
    "small": Preset(512, 8, 8, 8192, 256, 8, 1024, 8),
    "medium": Preset(768, 12, 12, 32768, 512, 8, 4096, 8),
    "large": Preset(1024, 24, 16, 32768, 1024, 4, 8192, 8),
    "xl": Preset(1600, 48, 25, 32768, 1024, 2, 8192, 16),
    "comm-heavy": Preset(32, 4, 2, 256, 8, 1, 160, 16),
}

MLP_CLASSES = 16


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention then a 4x MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-style decoder-only LM (learned positions, untied head: one gradient per parameter)."""

    def __init__(self, p: Preset, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(p.vocab, p.d_model)
        self.pos = nn.Embedding(seq_len, p.d_model)
        self.blocks = nn.ModuleList(Block(p.d_model, p.heads) for _ in range(p.layers))
        self.ln_f = nn.LayerNorm(p.d_model)
        self.head = nn.Linear(p.d_model, p.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


class MLP(nn.Module):
    """Plain ReLU MLP classifier (``MLP_CLASSES`` classes)."""

    def __init__(self, p: Preset) -> None:
        super().__init__()
        dims = [p.mlp_width] * (p.mlp_layers + 1)
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(p.mlp_width, MLP_CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x).float(), targets)


def build_model(kind: str, p: Preset, seq_len: int) -> nn.Module:
    if kind == "gpt":
        return GPT(p, seq_len)
    if kind == "mlp":
        return MLP(p)
    raise ValueError(f"unknown model {kind!r} (gpt or mlp)")


def make_batch(
    kind: str, p: Preset, seq_len: int, global_batch: int, step: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole (all ranks') batch of ``step``: seeded, so every rank and the reference agree.

    Each rank takes its own contiguous slice of rows; the concatenation is the global batch.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    if kind == "gpt":
        tokens = torch.randint(0, p.vocab, (global_batch, seq_len + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    x = torch.randn(global_batch, p.mlp_width, generator=g)
    y = torch.randint(0, MLP_CLASSES, (global_batch,), generator=g)
    return x, y


def param_count(model: nn.Module) -> int:
    return sum(t.numel() for t in model.parameters())


def describe(kind: str, p: Preset, model: nn.Module) -> str:
    n = param_count(model)
    size = f"{n / 1e6:.1f} M" if n < 1e9 else f"{n / 1e9:.2f} B"
    if kind == "gpt":
        shape = f"d_model {p.d_model}, {p.layers} layers, {p.heads} heads, vocab {p.vocab}"
    else:
        shape = f"width {p.mlp_width}, {p.mlp_layers} layers"
    return f"{kind} ({shape}): {size} params, {math.ceil(n * 4 / 2**20)} MiB fp32"
