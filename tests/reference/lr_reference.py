#!/usr/bin/python3
"""Writes lr_reference.txt: 100 steps of every learning-rate schedule of
pleiades/lr_scheduler.h as PyTorch (Debian's python3-torch) computes them,
for tests/test_lr_scheduler.c. Colossal-AI's schedulers wrap PyTorch's;
where they add their own formula (LinearWarmupLR, the warm-up of
WarmupScheduler, PolynomialLR) it is applied here as a LambdaLR on top of
PyTorch's stepping, and the rest is PyTorch's own schedulers.

Each line: "<case> <step> <lr> <momentum>" (momentum: beta1 for one cycle,
"-" otherwise), for optimizer steps 0..99 (the LR a step uses).

Usage: /usr/bin/python3 lr_reference.py > lr_reference.txt
"""
import math

import torch

BASE, TOTAL, WARM, STEPS = 0.1, 100, 10, 100


def optimizer(lr=BASE):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def run(name, sched_fn, momentum=False):
    opt = optimizer()
    sched = sched_fn(opt)
    for k in range(STEPS):
        group = opt.param_groups[0]
        m = f"{group['betas'][0]:.17g}" if momentum else "-"
        print(f"{name} {k} {group['lr']:.17g} {m}")
        opt.step()
        sched.step()


def warmup_then(after_fn, warm):
    """Colossal-AI's WarmupScheduler: (k+1)/warm * base for k < warm, then
    PyTorch's `after` scheduler stepped from 0 (on its own optimizer)."""
    after_opt = optimizer()
    after = after_fn(after_opt)
    lrs = []
    for k in range(STEPS + 1):  # run() steps the scheduler once more
        if k < warm:
            lrs.append((k + 1) / warm * BASE)
        else:
            lrs.append(after_opt.param_groups[0]["lr"])
            after_opt.step()
            after.step()
    return lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lrs[k] / BASE)


S = torch.optim.lr_scheduler
run("constant", lambda o: S.LambdaLR(o, lambda k: 1.0))
# LinearWarmupLR(total 100, warmup 10)
run("linear", lambda o: S.LambdaLR(
    o, lambda k: (k + 1) / (WARM + 1) if k < WARM else (TOTAL - k) / (TOTAL - WARM)))
run("cosine_nowarmup", lambda o: S.CosineAnnealingLR(o, T_max=TOTAL, eta_min=0.001))
run("cosine", warmup_then(lambda o: S.CosineAnnealingLR(o, T_max=TOTAL - WARM,
                                                         eta_min=0.001), WARM))
run("step", lambda o: S.StepLR(o, step_size=7, gamma=0.5))
run("multistep", lambda o: S.MultiStepLR(o, milestones=[20, 50, 80], gamma=0.3))


def poly(o):  # Colossal-AI's PolynomialLR(total - warm, end_lr 1e-3, power 2)
    n = TOTAL - WARM
    return S.LambdaLR(o, lambda j: ((BASE - 1e-3) * (1 - min(j, n) / n) ** 2 + 1e-3) / BASE)


run("poly", warmup_then(poly, WARM))
run("onecycle", lambda o: S.OneCycleLR(o, max_lr=BASE, total_steps=TOTAL), momentum=True)
run("onecycle_linear", lambda o: S.OneCycleLR(o, max_lr=BASE, total_steps=TOTAL,
                                               anneal_strategy="linear", pct_start=0.25),
    momentum=True)
