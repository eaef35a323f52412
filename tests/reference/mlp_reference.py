#!/usr/bin/python3
"""Generates mlp_reference.bin: PyTorch reference values for a small MLP,
checked by tests/test_mlp_reference.c (in the spirit of llm.c's test_gpt2).

Run with Debian's python3-torch (the python3 on PATH may lack torch):

    /usr/bin/python3 tests/reference/mlp_reference.py [out.bin]

The default output is mlp_reference.bin next to this script. The .bin is
committed so that CTest never needs PyTorch.

Model (float32, torch.manual_seed(0) before building it):

    x [B, IN] -> fc1 = Linear(IN, H1) -> ReLU
              -> fc2 = Linear(H1, H2) -> GELU(approximate='tanh')
              -> head = Linear(H2, K) -> logits [B, K]
    loss = mean CrossEntropyLoss(logits, labels)

with B=8, IN=20, H1=32, H2=32, K=10; x = randn(B, IN), labels = randint(0, K,
(B,)), both drawn after the model. The optimizer is torch.optim.AdamW(lr=1e-2,
betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01) over all six parameters
(biases included), run N_STEPS=5 times on the same batch.

File layout (little-endian, no padding):

    int32   header[8] = {MAGIC=20261121, VERSION=1, B, IN, H1, H2, K, N_STEPS}
    float32 x[B][IN]
    int32   labels[B]
    float32 params   (initial values), in the order P below
    float32 logits[B][K]             (forward with the initial params)
    float32 loss                     (mean cross-entropy, initial params)
    float32 grads    (of the loss w.r.t. the initial params), order P
    float32 step_losses[N_STEPS]     (loss BEFORE each AdamW step, so
                                      step_losses[0] == loss)
    float32 params   (after N_STEPS AdamW steps), order P

    P = fc1.weight [H1][IN], fc1.bias [H1], fc2.weight [H2][H1], fc2.bias [H2],
        head.weight [K][H2], head.bias [K]   (PyTorch's [out][in], row-major)
"""
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

MAGIC = 20261121
VERSION = 1
B, IN, H1, H2, K = 8, 20, 32, 32, 10
N_STEPS = 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN, H1)
        self.fc2 = nn.Linear(H1, H2)
        self.head = nn.Linear(H2, K)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = nn.functional.gelu(self.fc2(h), approximate='tanh')
        return self.head(h)


def params_in_order(model):
    return [model.fc1.weight, model.fc1.bias, model.fc2.weight,
            model.fc2.bias, model.head.weight, model.head.bias]


def f32(t):
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype='<f4').tobytes()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'mlp_reference.bin')
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(B, IN)
    labels = torch.randint(0, K, (B,))
    criterion = nn.CrossEntropyLoss()  # mean reduction

    buf = bytearray()
    buf += struct.pack('<8i', MAGIC, VERSION, B, IN, H1, H2, K, N_STEPS)
    buf += f32(x)
    buf += np.ascontiguousarray(labels.numpy(), dtype='<i4').tobytes()
    for p in params_in_order(model):
        buf += f32(p)

    # Forward and backward with the initial parameters.
    model.zero_grad()
    logits = model(x)
    loss = criterion(logits, labels)
    loss.backward()
    buf += f32(logits)
    buf += struct.pack('<f', loss.item())
    for p in params_in_order(model):
        buf += f32(p.grad)

    # N_STEPS AdamW steps on the same batch, recording the loss before each.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    step_losses = []
    for _ in range(N_STEPS):
        opt.zero_grad()
        loss = criterion(model(x), labels)
        loss.backward()
        step_losses.append(loss.item())
        opt.step()
    buf += struct.pack('<%df' % N_STEPS, *step_losses)
    for p in params_in_order(model):
        buf += f32(p)

    with open(out, 'wb') as f:
        f.write(buf)
    print('wrote %s (%d bytes); losses %s' % (
        out, len(buf), ' '.join('%.6f' % l for l in step_losses)))


if __name__ == '__main__':
    main()
