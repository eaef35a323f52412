#!/usr/bin/python3
"""Writes ops_reference.txt: built-in ops of include/pleiades/ops.h (mul,
sub, scale, SiLU, RMSNorm, softmax, MSE loss, batched matmul) as PyTorch
(Debian's python3-torch) computes them, for tests/test_ops.c, which checks
the lines of the op table (tests/op_table.c) whose `reference` names these
arrays: fixed inputs, the forward output and the gradient of every input
(and of RMSNorm's weight) for a fixed output gradient.

Inputs are drawn in float32 (the values the C kernels see); PyTorch then
computes in float64, so the reference is exact to far below the test's
1e-5 tolerance and the test measures the C kernels' own rounding.
RMSNorm is written out as torch.nn.RMSNorm(C, eps=1e-6) computes it
(that module is PyTorch >= 2.4; Debian's is 1.13): x * rsqrt(mean(x^2) +
eps) * weight. Shapes are per sample, with the batch of 2 first; the op
table holds the same shapes and constants, and the C test checks every
array's length.

Format: a first line "ops_reference 1", then one array per line:
"<op>.<name> <count> <values...>" (float32 values, %.9g, exact).

Usage: /usr/bin/python3 ops_reference.py > ops_reference.txt
"""
import torch

SAMPLES = 2
SCALE_FACTOR = -1.5
RMS_EPS = 1e-6

torch.manual_seed(1234)
lines = ["ops_reference 1"]


def emit(name, t):
    v = t.detach().to(torch.float32).reshape(-1).tolist()
    lines.append(f"{name} {len(v)} " + " ".join(f"{x:.9g}" for x in v))


def rand(*shape, scale=1.0):
    """float32 values, returned as a float64 leaf that requires grad."""
    x = (torch.randn(SAMPLES, *shape) * scale).to(torch.float32)
    return x.to(torch.float64).requires_grad_(True)


def run(prefix, inputs, names, fn, extra=()):
    """Forward on the inputs (and extra leaves), backward with a random dout;
    writes inputs, dout, out and every gradient."""
    for n, x in zip(names, inputs):
        emit(f"{prefix}.{n}", x)
    out = fn(*inputs)
    dout = rand(*out.shape[1:]).detach()
    emit(f"{prefix}.dout", dout)
    emit(f"{prefix}.out", out)
    out.backward(dout)
    for n, x in list(zip(names, inputs)) + list(extra):
        emit(f"{prefix}.d{n}", x.grad)


# Elementwise, [3, 5] per sample.
a, b = rand(3, 5), rand(3, 5)
run("mul", [a, b], ["a", "b"], lambda a, b: a * b)
a, b = rand(3, 5), rand(3, 5)
run("sub", [a, b], ["a", "b"], lambda a, b: a - b)
x = rand(3, 5)
run("scale", [x], ["x"], lambda x: SCALE_FACTOR * x)

# SiLU on [4, 6], with extremes: saturation at both ends, and 0.
x = rand(4, 6, scale=4.0)
with torch.no_grad():
    x[0, 0, :4] = torch.tensor([-100.0, -30.0, 30.0, 0.0], dtype=torch.float64)
run("silu", [x], ["x"], torch.nn.functional.silu)

# RMSNorm on [3, 8]; one row of tiny values, where eps matters (mean square
# 1e-8 + eps 1e-6), and a weight away from its initial ones.
x = rand(3, 8)
with torch.no_grad():
    x[0, 1] = (x[0, 1] * 1e-4).to(torch.float32).to(torch.float64)
weight = (1.0 + 0.3 * torch.randn(8)).to(torch.float32).to(torch.float64)
weight.requires_grad_(True)
emit("rmsnorm.weight", weight)
run("rmsnorm", [x], ["x"],
    lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight,
    extra=[("weight", weight)])

# Softmax on [3, 7]; a row shifted by 100 (overflows without the max
# subtraction) and a sharply peaked row.
x = rand(3, 7)
with torch.no_grad():
    x[0, 1] += 100.0
    x[1, 2] *= 20.0
    x.copy_(x.to(torch.float32).to(torch.float64))
run("softmax", [x], ["x"], lambda x: torch.softmax(x, dim=-1))

# MSE loss, mean over all 2·3·4 elements: a scalar, so no dout; the
# gradients are of the loss itself.
pred, target = rand(3, 4), rand(3, 4)
emit("mse.pred", pred)
emit("mse.target", target)
loss = torch.nn.functional.mse_loss(pred, target)
lines.append(f"mse.loss 1 {loss.item():.17g}")
loss.backward()
emit("mse.dpred", pred.grad)
emit("mse.dtarget", target.grad)

# Batched matmul, torch.matmul(a.mT if ta else a, b.mT if tb else b), with
# a leading dim of 2 per sample and M, K, N = 3, 4, 5 (distinct, so a
# transposition mixed up in the C kernels changes the output's length or
# its values): "matmul_<ta><tb>" for the four combinations. Drawn after
# every other op so that their arrays keep their values.
M, K, N = 3, 4, 5
for ta in (False, True):
    for tb in (False, True):
        a = rand(2, K, M) if ta else rand(2, M, K)
        b = rand(2, N, K) if tb else rand(2, K, N)
        run(f"matmul_{'t' if ta else 'f'}{'t' if tb else 'f'}", [a, b], ["a", "b"],
            lambda a, b, ta=ta, tb=tb: torch.matmul(a.transpose(-2, -1) if ta else a,
                                                    b.transpose(-2, -1) if tb else b))

print("\n".join(lines))
