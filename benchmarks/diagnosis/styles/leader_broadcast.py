"""A leader-follower loop with broadcasts, no DDP: rank 0 reads the batch and broadcasts it;
every rank computes the gradient of its slice; gradients are reduced to rank 0 (``dist.reduce``),
rank 0 steps the optimizer and broadcasts the new parameters. Ranges: dataloader,
broadcast_batch, compute, reduce_grads, leader_update, broadcast_params."""

import torch
import torch.distributed as dist
from _harness import Run, parser

args = parser(__doc__).parse_args()
run = Run(args)
torch.manual_seed(11)
model = torch.nn.Sequential(torch.nn.Linear(200, 400), torch.nn.ReLU(), torch.nn.Linear(400, 200))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.01) if run.rank == 0 else None
PER = 48


def step(i: int) -> None:
    batch = torch.empty(PER * run.world, 200)
    with run.range("dataloader"):
        if run.rank == 0:
            batch = torch.randn(PER * run.world, 200)
    with run.range("broadcast_batch"):
        dist.broadcast(batch, 0)
    with run.range("compute"):
        mine = batch[run.rank * PER : (run.rank + 1) * PER]
        if run.batch(PER) > PER:  # an uneven share: extra rows of noise
            mine = torch.cat([mine, torch.randn(run.batch(PER) - PER, 200)])
        model(mine).pow(2).mean().backward()
    with run.range("reduce_grads"):
        for q in params:
            dist.reduce(q.grad, 0)
    with run.range("leader_update"):
        if opt is not None:
            opt.step()
        for q in params:
            q.grad = None
    with run.range("broadcast_params"):
        for q in params:
            dist.broadcast(q.data, 0)


run.loop(step)
