"""The plainest data parallel: backward, then one blocking ``all_reduce`` per parameter, then the
optimizer. Nothing overlaps. Ranges: get_batch, forward, backward, allreduce_grads, optimizer,
and a periodic checkpoint (save_checkpoint)."""

import io

import torch
import torch.distributed as dist
from _harness import Run, parser

args = parser(__doc__).parse_args()
run = Run(args)
torch.manual_seed(7)
model = torch.nn.Sequential(
    torch.nn.Embedding(1000, 128),
    torch.nn.Flatten(),
    torch.nn.Linear(128 * 16, 256),
    torch.nn.ReLU(),
    torch.nn.Linear(256, 1000),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(i: int) -> None:
    with run.range("get_batch"):
        tok = torch.randint(0, 1000, (run.batch(64), 16))
        tgt = torch.randint(0, 1000, (run.batch(64),))
    with run.range("forward"):
        loss = torch.nn.functional.cross_entropy(model(tok), tgt)
    with run.range("backward"):
        loss.backward()
    with run.range("allreduce_grads"):
        for prm in model.parameters():
            dist.all_reduce(prm.grad)
            prm.grad /= run.world
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()
    with run.range("save_checkpoint"):
        torch.save(model.state_dict(), io.BytesIO())


run.loop(step)
