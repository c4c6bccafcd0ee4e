"""Megatron-style tensor parallelism on process groups made with ``new_group``: ranks split into
tensor-parallel groups of ``--tp`` (column- then row-parallel MLP blocks; the row-parallel output
is all-reduced in forward, the column-parallel input gradient in backward) and data-parallel
groups across them (a blocking gradient all-reduce after backward). Ranges: dataloader,
tp_forward, tp_backward, dp_grad_sync, optimizer."""

import torch
import torch.distributed as dist
from _harness import Run, parser

p = parser(__doc__)
p.add_argument("--tp", type=int, default=2)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--layers", type=int, default=3)
args = p.parse_args()
run = Run(args)
TP = args.tp
tp_group = dp_group = None
for start in range(0, run.world, TP):
    ranks = list(range(start, start + TP))
    g = dist.new_group(ranks)
    if run.rank in ranks:
        tp_group = g
DP = run.world // TP
if DP > 1:
    for j in range(TP):
        ranks = list(range(j, run.world, TP))
        g = dist.new_group(ranks)
        if run.rank in ranks:
            dp_group = g


class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=tp_group)
        return g


class ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x, group=tp_group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


H = args.hidden
torch.manual_seed(100 + run.rank % TP)  # the shards of one tp group differ; dp replicas agree
w1 = [torch.nn.Parameter(torch.randn(H, 4 * H // TP) * 0.02) for _ in range(args.layers)]
w2 = [torch.nn.Parameter(torch.randn(4 * H // TP, H) * 0.02) for _ in range(args.layers)]
params = w1 + w2
opt = torch.optim.SGD(params, lr=0.01)


def step(i: int) -> None:
    with run.range("dataloader"):
        torch.manual_seed(args.seed * 7919 + i * 31 + run.rank // TP)  # same batch in a tp group
        x = torch.randn(run.batch(64), H)
    with run.range("tp_forward"):
        h = x
        for a, b in zip(w1, w2):
            h = h + ReduceFromTP.apply(torch.relu(CopyToTP.apply(h) @ a) @ b)
        loss = h.pow(2).mean()
    with run.range("tp_backward"):
        loss.backward()
    if dp_group is not None:
        with run.range("dp_grad_sync"):
            for q in params:
                dist.all_reduce(q.grad, group=dp_group)
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()


run.loop(step)
