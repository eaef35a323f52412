#!/usr/bin/python3
"""Writes clip_reference.txt: gradient clipping by global norm as PyTorch
(Debian's python3-torch) does it, torch.nn.utils.clip_grad_norm_(params,
max_norm, norm_type), for tests/test_clipping.c.

The model: x [B, 6] -> fc1 (Linear 6->12) -> ReLU -> fc2 (Linear 12->4)
-> mean cross-entropy against int labels; parameters named as Pleiades
names them (fc1.weight [12, 6], fc1.bias [12], fc2.weight, fc2.bias).

Cases (each from the same initial parameters):
  sgd_l2     max_norm 0.5,  norm 2:   one SGD step (lr 0.1) on the batch
  sgd_inf    max_norm 0.05, norm inf: one SGD step (lr 0.1)
  sgd_noclip max_norm 100,  norm 2:   one SGD step: the norm is below
             max_norm, so the coefficient is 1 (nothing changes)
  adamw_acc  max_norm 0.3,  norm 2:   3 AdamW steps (lr 1e-2, torch's
             defaults otherwise, weight_decay 0.01), each accumulating the
             two halves of the batch (loss / 2 each, as Colossal-AI's
             GradAccumOptimizer), clipped on the summed gradients
For each: "<case>.norm" (the pre-clip total norm of every step) and
"<case>.<param>" (the parameters after the steps).

Format: a first line "clip_reference 1", then "<name> <count> <values...>"
per line: "x" (B*6), "labels" (B), the initial "<param>"s, then the cases.

Usage: /usr/bin/python3 clip_reference.py > clip_reference.txt
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, IN, HID, K = 8, 6, 12, 4
torch.manual_seed(7)
lines = ["clip_reference 1"]


def emit(name, values):
    lines.append("%s %d %s" % (name, len(values), " ".join("%.9g" % v for v in values)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN, HID)
        self.fc2 = nn.Linear(HID, K)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))

    def named(self):
        return [("fc1.weight", self.fc1.weight), ("fc1.bias", self.fc1.bias),
                ("fc2.weight", self.fc2.weight), ("fc2.bias", self.fc2.bias)]


init = MLP()
x = torch.randn(B, IN)
labels = torch.randint(0, K, (B,))
emit("x", x.reshape(-1).tolist())
emit("labels", labels.tolist())
for name, p in init.named():
    emit(name, p.detach().reshape(-1).tolist())


def run(case, max_norm, norm_type, opt_kind, steps, halves):
    model = MLP()
    model.load_state_dict(init.state_dict())
    params = [p for _, p in model.named()]
    if opt_kind == "sgd":
        opt = torch.optim.SGD(params, lr=0.1)
    else:
        opt = torch.optim.AdamW(params, lr=1e-2)
    norms = []
    for _ in range(steps):
        opt.zero_grad()
        parts = [(x[:B // 2], labels[:B // 2]), (x[B // 2:], labels[B // 2:])] if halves \
            else [(x, labels)]
        for xs, ys in parts:
            loss = F.cross_entropy(model(xs), ys) / len(parts)
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        norms.append(norm.item())
        opt.step()
    emit(case + ".norm", norms)
    for name, p in model.named():
        emit(case + "." + name, p.detach().reshape(-1).tolist())


run("sgd_l2", 0.5, 2.0, "sgd", 1, False)
run("sgd_inf", 0.05, math.inf, "sgd", 1, False)
run("sgd_noclip", 100.0, 2.0, "sgd", 1, False)
run("adamw_acc", 0.3, 2.0, "adamw", 3, True)
print("\n".join(lines))
