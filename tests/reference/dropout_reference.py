#!/usr/bin/python3
"""Writes dropout_reference.txt: pl_dropout's masks (ops/dropout_mask.h,
transcribed here in Python integers) and what PyTorch (Debian's
python3-torch) computes for torch.nn.Dropout given those masks, for
tests/test_dropout.c.

PyTorch draws its own masks, so the script first checks on this PyTorch
that its CPU dropout is x * (mask / (1 - p)) with mask its own kept
elements, forward and backward, bit for bit; it then computes exactly that
with the mask of pl_dropout's hash, with autograd for the gradient. The C
test compares its kernels' forward and gradient (and the masks themselves)
with these arrays: the 1/(1 - p) scaling, its float rounding and the
gradient's semantics are PyTorch's, and the hash is the documented one.

Format: a first line "dropout_reference 1", then one array per line:
"<case>.<name> <count> <values...>" (float32 values, %.9g, exact; masks as
0/1; the seed as two 32-bit halves, exact in the text's doubles).

Usage: /usr/bin/python3 dropout_reference.py > dropout_reference.txt
"""
import torch

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(z):
    """splitmix64's finaliser (ops/dropout_mask.h: pl_dropout_mix)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def f32(v):
    """v rounded to float32, as a Python float."""
    return torch.tensor(v, dtype=torch.float32).item()


def threshold(p):
    """floor((1 - p) * 2^32) in double (pl_dropout_threshold)."""
    return int((1.0 - p) * 4294967296.0)


def keep_mask(seed, offset, samples, numel, p):
    """[samples, numel] of 0/1: element j of global sample offset + s."""
    thr = threshold(p)
    rows = []
    for s in range(samples):
        state = mix(seed ^ mix((offset + s + GAMMA) & M64))
        rows.append([1.0 if (mix((state + (j + 1) * GAMMA) & M64) >> 32) < thr else 0.0
                     for j in range(numel)])
    return torch.tensor(rows, dtype=torch.float32)


def check_torch_dropout(p):
    """PyTorch's CPU dropout is x * (own mask / (1 - p)), both passes."""
    x = torch.randn(64, 50, dtype=torch.float32).requires_grad_(True)
    dy = torch.randn(64, 50, dtype=torch.float32)
    y = torch.nn.functional.dropout(x, p=p, training=True)
    y.backward(dy)
    noise = (y != 0).to(torch.float32).div_(1 - p)
    assert torch.equal(y.detach(), x.detach() * noise), "torch dropout forward"
    assert torch.equal(x.grad, dy * noise), "torch dropout backward"
    assert (y != 0).any() and (y == 0).any()


lines = ["dropout_reference 1"]


def emit(name, t):
    v = t.detach().to(torch.float32).reshape(-1).tolist()
    lines.append(f"{name} {len(v)} " + " ".join(f"{x:.9g}" for x in v))


def case(name, p, seed, offset, samples, shape):
    p = f32(p)  # the C attribute is a float
    check_torch_dropout(p)
    numel = 1
    for d in shape:
        numel *= d
    mask = keep_mask(seed, offset, samples, numel, p).reshape(samples, *shape)
    x = torch.randn(samples, *shape, dtype=torch.float32).requires_grad_(True)
    dout = torch.randn(samples, *shape, dtype=torch.float32)
    # torch.nn.Dropout's CPU computation with this mask (checked above).
    out = x * mask.div_(1 - p)
    out.backward(dout)
    lines.append(f"{name}.p 1 {p:.9g}")
    lines.append(f"{name}.seed 2 {seed >> 32} {seed & 0xFFFFFFFF}")
    lines.append(f"{name}.offset 1 {offset}")
    emit(f"{name}.mask", (mask != 0).to(torch.float32))
    emit(f"{name}.x", x)
    emit(f"{name}.dout", dout)
    emit(f"{name}.out", out)
    emit(f"{name}.dx", x.grad)


torch.manual_seed(2024)
# Shapes and sample counts as tests/test_dropout.c's REF_* constants.
case("a", 0.3, 0x0123456789ABCDEF, 0, 3, (4, 6))
case("b", 0.1, 0xFEDCBA9876543210, 5, 3, (4, 6))
case("c", 0.75, 42, 1000, 3, (4, 6))
print("\n".join(lines))
