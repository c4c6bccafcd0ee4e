"""Expert parallelism with uneven routing: two ranks, one expert each; the router sends three
quarters of every rank's tokens to expert 1, so rank 1's ``expert`` range computes 3x the tokens
of rank 0's. Tokens move with ``all_to_all_single`` (uneven splits) before the experts
(``dispatch``) and back after them (``combine``); the gradients of a shared head are summed
with one all-reduce. Cause by construction: rank 1 is late at ``combine`` because its
``expert`` ran longer (diagnosis.md §14: the root is ``expert``, not the ``forward`` around it).

    OMP_NUM_THREADS=1 python workloads/styles/moe_uneven.py OUT
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

TOKENS, WIDTH = 512, 384
TO_EXPERT_1 = 3 * TOKENS // 4  # of each rank's tokens


def moe_forward(x, w_expert, head, rank):
    with record_function("forward"):
        with record_function("router"):
            order = torch.argsort(x.sum(1))  # any deterministic routing
            send = x[order].contiguous()
        send_splits = [TOKENS - TO_EXPERT_1, TO_EXPERT_1]
        recv_splits = [send_splits[rank]] * 2
        got = torch.empty(sum(recv_splits), WIDTH)
        with record_function("dispatch"):
            dist.all_to_all_single(got, send, recv_splits, send_splits)
        with record_function("expert"):
            h = got
            for _ in range(4):
                h = torch.tanh(h @ w_expert)
        back = torch.empty(TOKENS, WIDTH)
        with record_function("combine"):
            dist.all_to_all_single(back, h.contiguous(), send_splits, recv_splits)
        return (back @ head).square().mean()


def run(rank, out, store):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(rank)
    w_expert = torch.randn(WIDTH, WIDTH) / WIDTH**0.5
    head = torch.randn(WIDTH, 8, requires_grad=True)
    x = torch.randn(TOKENS, WIDTH)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
    ) as prof:
        for _ in range(5):
            loss = moe_forward(x, w_expert, head, rank)
            with record_function("backward"):
                loss.backward()
            with record_function("grad_sync"):
                dist.all_reduce(head.grad)
            head.grad = None
            prof.step()
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json.gz"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, ".store"))
    if os.path.exists(store):
        os.remove(store)
    mp.spawn(run, args=(out, store), nprocs=2)
    if os.path.exists(store):
        os.remove(store)
