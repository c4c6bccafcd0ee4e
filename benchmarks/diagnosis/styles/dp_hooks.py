"""Data parallel by hand: a post-accumulate-grad hook per parameter launches an async all-reduce
as soon as that gradient is ready; the loop waits for them all before the optimizer.
Ranges: dataloader, forward, backward, optimizer, save_checkpoint."""

import io

import torch
import torch.distributed as dist
from _harness import Run, parser

args = parser(__doc__).parse_args()
run = Run(args)
layers = [torch.nn.Linear(256, 256) for _ in range(6)]
model = torch.nn.Sequential(*[m for lin in layers for m in (lin, torch.nn.ReLU())])
for p in model.parameters():
    dist.broadcast(p.data, 0)
pending: list = []


def hook(p: torch.Tensor) -> None:
    p.grad.div_(run.world)
    pending.append(dist.all_reduce(p.grad, async_op=True))


for p in model.parameters():
    p.register_post_accumulate_grad_hook(hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step(i: int) -> None:
    with run.range("dataloader"):
        x = torch.randn(run.batch(64), 256)
        y = torch.randn(run.batch(64), 256)
    with run.range("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with run.range("backward"):
        loss.backward()
    with run.range("grad_sync"):
        while pending:
            run.wait(pending.pop(0))
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()
    with run.range("save_checkpoint"):
        torch.save(model.state_dict(), io.BytesIO())


run.loop(step)
