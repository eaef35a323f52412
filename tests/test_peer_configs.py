#!/usr/bin/python3
"""The benchmarks' PyTorch peers compute the same thing in every thread
configuration the benchmarks try (bench_compare in bench/common): the
losses of the first steps agree across torch threads x OPENBLAS_NUM_THREADS
x OMP_WAIT_POLICY, so picking the fastest configuration never picks a
different computation. Summation order may differ with the thread count,
so losses agree to a relative 1e-4, not bit for bit.

Exit 77 (CTest: skipped) when /usr/bin/python3 has no torch.

Usage: test_peer_configs.py BENCH-DIR
"""
import itertools
import os
import subprocess
import sys

STEPS = 4
# Small shapes keep the test fast; the step is the benchmark's own.
PEERS = {
    "mlp_torch.py": ["2", "1", "1"],                       # steps warmup reps
    "gpt_torch.py": ["2", "1", "1", "4", "2", "64", "32", "4"],  # + B L C T NH
}


def losses(script, threads, blas, policy):
    env = dict(os.environ, PL_PEER_SERVE="1", OPENBLAS_NUM_THREADS=str(blas),
               OMP_WAIT_POLICY=policy)
    out = subprocess.run([sys.executable, script, str(threads)] + PEERS[os.path.basename(script)],
                         input=f"losses {STEPS}\nquit\n", capture_output=True, text=True,
                         env=env, timeout=300)
    lines = [l for l in out.stdout.splitlines() if l.startswith("losses ")]
    if out.returncode != 0 or not lines:
        sys.exit(f"FAIL: {script} threads={threads} blas={blas} {policy}: "
                 f"status {out.returncode}\n{out.stdout}{out.stderr}")
    return [float(x) for x in lines[0].split()[1:]]


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: no torch for", sys.executable)
        return 77
    failures = 0
    for name in PEERS:
        script = os.path.join(argv[1], name)
        ref = None
        for threads, blas, policy in itertools.product((1, 2), (1, 2), ("PASSIVE", "ACTIVE")):
            got = losses(script, threads, blas, policy)
            if len(got) != STEPS:
                print(f"FAIL: {name}: {len(got)} losses, expected {STEPS}")
                failures += 1
                continue
            if ref is None:
                ref = got
                print(f"{name}: losses {got} (threads 1, blas 1, PASSIVE)")
                continue
            bad = [i for i, (a, b) in enumerate(zip(ref, got))
                   if abs(a - b) > 1e-4 * max(1.0, abs(a))]
            state = "FAIL" if bad else "ok"
            print(f"{state}: {name} threads {threads}, OPENBLAS_NUM_THREADS {blas}, "
                  f"OMP_WAIT_POLICY={policy}: {got}")
            failures += bool(bad)
    if failures:
        print(f"{failures} configuration(s) computed different losses")
        return 1
    print("peer configurations: the same losses in every configuration")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
