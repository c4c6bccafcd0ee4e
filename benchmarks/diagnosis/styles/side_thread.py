"""Gradient all-reduce on the main thread (one blocking call on the flattened gradients after
backward) and a side thread that reports metrics each step: it all-reduces the step's loss and
timing on its own process group (a ``heartbeat`` range), as a monitoring thread would. Ranges
(main): dataloader, forward, backward, flat_allreduce, optimizer, save_checkpoint; (side):
heartbeat."""

import io
import queue
import threading

import torch
import torch.distributed as dist
from _harness import Run, parser
from torch.profiler import record_function

args = parser(__doc__).parse_args()
run = Run(args)
side_group = dist.new_group(list(range(run.world)))
torch.manual_seed(5)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
params = list(model.parameters())
opt = torch.optim.SGD(params, lr=0.01)
todo: queue.Queue = queue.Queue()


def reporter() -> None:
    while True:
        item = todo.get()
        if item is None:
            return
        with record_function("heartbeat"):
            if args.slow_range == "heartbeat" and run.slow_rank() == run.rank:
                run._plant(args.slow_ms / 1e3)
            dist.all_reduce(item, group=side_group)


side = threading.Thread(target=reporter, name="metrics-reporter", daemon=True)
side.start()


def step(i: int) -> None:
    with run.range("dataloader"):
        x = torch.randn(run.batch(64), 256)
    with run.range("forward"):
        loss = model(x).pow(2).mean()
    with run.range("backward"):
        loss.backward()
    todo.put(torch.tensor([loss.item(), float(i)]))
    with run.range("flat_allreduce"):
        flat = torch.cat([q.grad.reshape(-1) for q in params])
        dist.all_reduce(flat)
        off = 0
        for q in params:
            q.grad.copy_(flat[off : off + q.numel()].view_as(q))
            off += q.numel()
    with run.range("optimizer"):
        opt.step()
        opt.zero_grad()
    with run.range("save_checkpoint"):
        torch.save(model.state_dict(), io.BytesIO())


def finish() -> None:
    todo.put(None)
    side.join()


run.loop(step, finish=finish)
