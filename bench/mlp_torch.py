#!/usr/bin/python3
"""PyTorch peer of bench_mlp: the same MLP training step, timed.

MLP 784-1024-1024-10 (Linear, ReLU, Linear, ReLU, Linear), CrossEntropyLoss,
AdamW(lr=1e-3, weight_decay=0.01), batch 256, fp32, fixed random inputs and
labels. Warm-up steps, then several repetitions of timed steps; each step is
zero_grad, forward, loss, backward, optimizer step and loss.item() (which
syncs). Prints one machine-readable line (the median over repetitions):

    torch ms_per_step=X samples_per_s=Y

Usage: /usr/bin/python3 mlp_torch.py [threads [steps [warmup [reps]]]]
       (defaults 2, 30, 5, 5): `steps` timed steps per repetition; the
       figure is the median of the repetitions' mean ms/step.
       With PL_PEER_SERVE=1 it serves timing commands on stdin instead
       (torch_timing.py), which is how bench_mlp runs it.
"""
import sys

import torch

from torch_timing import median_ms_per_step, serve, serving  # bench/


def main(argv):
    threads = int(argv[1]) if len(argv) > 1 else 2
    steps = int(argv[2]) if len(argv) > 2 else 30
    warmup = int(argv[3]) if len(argv) > 3 else 5
    reps = int(argv[4]) if len(argv) > 4 else 5
    if threads < 1 or steps < 1 or warmup < 0 or reps < 1:
        sys.exit("mlp_torch.py: threads, steps and reps must be >= 1, "
                 "warmup >= 0")
    batch = 256

    torch.set_num_threads(threads)
    torch.manual_seed(42)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.randn(batch, 784, dtype=torch.float32)
    y = torch.randint(0, 10, (batch,), dtype=torch.int64)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    if serving():  # the benchmark interleaves its repetitions with ours
        serve(step, f"mlp threads={threads}")
        return
    ms, _ = median_ms_per_step(step, steps, warmup, reps)
    print(f"torch ms_per_step={ms:.3f} samples_per_s={batch * 1e3 / ms:.1f}",
          flush=True)


if __name__ == "__main__":
    main(sys.argv)
