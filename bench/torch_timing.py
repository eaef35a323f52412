"""Timing shared by the PyTorch peers of the benchmarks (mlp_torch.py,
gpt_torch.py).

Two ways to run a peer:

- standalone: warm-up steps, then `reps` repetitions of `steps` timed
  steps; the figure is the median of the repetitions' mean ms/step
  (median_ms_per_step);
- served (environment PL_PEER_SERVE=1), which is how the benchmarks run
  it: the peer builds its model, prints "ready", and then does only what
  its standard input asks, one command per line, so that the benchmark
  can interleave repetitions of Pleiades and of the peer (A B A B ...)
  and the peer never runs while Pleiades is being timed:

      warm N     N untimed steps             -> "ok loss=L"
      rep N      N timed steps               -> "rep ms=X loss=L"  (mean ms/step)
      losses N   N steps, each step's loss   -> "losses L1 L2 ..."
      quit (or end of input)

  The thread configuration (torch threads, OPENBLAS_NUM_THREADS,
  OMP_WAIT_POLICY) is fixed when the process starts, so the benchmark
  starts one served peer per configuration it tries.
"""
import os
import statistics
import sys
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


def serving():
    """Whether the benchmark runs this peer as a server (see above)."""
    return os.environ.get("PL_PEER_SERVE") == "1"


def serve(step, name):
    """Answers the commands of the module docstring on stdin/stdout."""
    print(f"ready {name}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            n = int(words[1]) if len(words) > 1 else 1
        except ValueError:
            n = 0
        if n < 1:
            print(f"error bad count in {line.strip()!r}", flush=True)
            continue
        if words[0] == "warm":
            loss = None
            for _ in range(n):
                loss = step()
            print(f"ok loss={loss:.6f}", flush=True)
        elif words[0] == "rep":
            t0 = time.perf_counter()
            loss = None
            for _ in range(n):
                loss = step()
            ms = (time.perf_counter() - t0) * 1e3 / n
            print(f"rep ms={ms:.4f} loss={loss:.6f}", flush=True)
        elif words[0] == "losses":
            print("losses " + " ".join(f"{step():.8f}" for _ in range(n)), flush=True)
        else:
            print(f"error unknown command {words[0]!r}", flush=True)
