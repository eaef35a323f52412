#!/usr/bin/python3
"""PyTorch DDP peer of bench_dp: the MLP of bench_mlp or the GPT of
bench_gpt trained by `world` processes (torch.distributed, gloo backend:
Debian's torch 1.13 has no MPI backend), each with one intra-op thread and
its own fixed per-rank batch (weak scaling), DistributedDataParallel with
its default buckets (25 MB) overlapping the all-reduce with backward.

Each process: warm-up steps, then `steps` timed steps (zero_grad, forward,
loss, backward with DDP's all-reduce, AdamW step, loss.item()), the time
taken between two barriers. Rank 0 prints one line:

    torch_ddp world=N samples_per_s=X ms_per_step=Y

Usage: /usr/bin/python3 dp_torch.py mlp|gpt WORLD [STEPS [WARMUP [PORT]]]
"""
import os
import sys
import time

# One BLAS thread per process: OpenBLAS's own pool would oversubscribe the
# cores beside the other rank (51.5 vs 31.0 ms, measured when this script
# was written, 2026-11-23).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, VOCAB  # noqa: E402

MLP_BATCH = 256
GPT_BATCH, GPT_L, GPT_C, GPT_T, GPT_NH = 16, 4, 256, 128, 4


def worker(rank, world, model_name, steps, warmup, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    torch.manual_seed(42)
    if model_name == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(784, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 10))
        batch = MLP_BATCH
        x = torch.randn(batch, 784)
        y = torch.randint(0, 10, (batch,))

        def loss_of(m):
            return F.cross_entropy(m(x), y)
    else:
        model = GPT(VOCAB, GPT_T, GPT_C, GPT_L, GPT_NH)
        batch = GPT_BATCH
        tokens = torch.randint(0, VOCAB, (batch, GPT_T))
        targets = torch.randint(0, VOCAB, (batch, GPT_T))

        def loss_of(m):
            return F.cross_entropy(m(tokens).view(batch * GPT_T, VOCAB),
                                   targets.view(batch * GPT_T))
    # The GPT's causal mask is a bool buffer, which gloo cannot broadcast;
    # it is the same constant on every rank anyway.
    DDP._set_params_and_buffers_to_ignore_for_model(
        model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ddp)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"torch_ddp world={world} samples_per_s={world * batch * steps / dt:.1f} "
              f"ms_per_step={1e3 * dt / steps:.2f}", flush=True)
    dist.destroy_process_group()


def main(argv):
    if len(argv) < 3 or argv[1] not in ("mlp", "gpt"):
        sys.exit("usage: dp_torch.py mlp|gpt WORLD [STEPS [WARMUP [PORT]]]")
    world = int(argv[2])
    steps = int(argv[3]) if len(argv) > 3 else 10
    warmup = int(argv[4]) if len(argv) > 4 else 3
    port = int(argv[5]) if len(argv) > 5 else 29533
    if not 1 <= world <= 16 or steps < 1 or warmup < 0:
        sys.exit("dp_torch.py: WORLD in [1, 16], STEPS >= 1, WARMUP >= 0")
    mp.spawn(worker, args=(world, argv[1], steps, warmup, port), nprocs=world, join=True)


if __name__ == "__main__":
    main(sys.argv)
