"""Timing shared by the PyTorch peers of the benchmarks (mlp_torch.py,
gpt_torch.py): warm-up steps, then `reps` repetitions of `steps` timed
steps; the figure is the median of the repetitions' mean ms/step.
"""
import statistics
import time


def median_ms_per_step(step, steps, warmup, reps):
    """Runs step() warmup + reps * steps times; returns (median ms/step over
    the repetitions, what the last step() returned)."""
    for _ in range(warmup):
        step()
    per_rep_ms = []
    last = None
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            last = step()
        per_rep_ms.append((time.perf_counter() - t0) * 1e3 / steps)
    return statistics.median(per_rep_ms), last
