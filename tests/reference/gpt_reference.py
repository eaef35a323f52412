#!/usr/bin/python3
"""Generates gpt_reference.bin: PyTorch reference values for a small GPT-2,
checked by tests/test_gpt_reference.c (in the spirit of llm.c's test_gpt2).

Run with Debian's python3-torch (the python3 on PATH may lack torch):

    /usr/bin/python3 tests/reference/gpt_reference.py [out.bin]

The default output is gpt_reference.bin next to this script. The .bin is
committed so that CTest never needs PyTorch.

The model is written here from the GPT-2 description, independently of the
C code (float32, torch.manual_seed(0) before building it):

    x = wte[tokens] + wpe[0:T]                                   [B, T, C]
    L times (pre-LayerNorm block):
        qkv = Linear(C, 3C)(LayerNorm(x))        (q | k | v along the last
                                                  dim; head h of each uses
                                                  columns h*HS .. (h+1)*HS)
        a   = softmax(q k^T / sqrt(HS), causal) v   per head, heads
                                                  concatenated -> [B, T, C]
        x   = x + Linear(C, C)(a)                                  (proj)
        x   = x + Linear(4C, C)(GELU_tanh(Linear(C, 4C)(LayerNorm(x))))
    logits = LayerNorm(x) wte^T           (LM head tied to wte, no bias)
    loss   = mean cross-entropy of logits [B*T, V] against targets [B*T]

LayerNorm: eps 1e-5, biased variance, with weight and bias. Config:
V=256, T=16, C=32, L=2, NH=4 (HS=8), B=2.

Initialisation (chosen to exercise every parameter, not GPT-2's own):
linear weights N(0, 0.02) except the qkv weights, N(0, 0.2), so that the
attention probabilities are far from uniform; linear biases N(0, 0.02);
wte, wpe N(0, 0.02); LayerNorm weights 1 + 0.1 N(0, 1), biases 0.1 N(0, 1).
tokens and targets are randint(0, V, (B, T)), drawn after the parameters.

The optimizer is torch.optim.AdamW(lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
weight_decay=0.01) over all parameters (biases, LayerNorm and embeddings
included; wte once, though it is used twice), run N_STEPS=5 times on the same
batch.

File layout (little-endian, no padding):

    int32   header[8] = {MAGIC=20261122, VERSION=1, V, T, C, L, NH, B}
    int32   n_params
    n_params parameter descriptors, in the order P below:
        int32 name_len; char name[name_len] (no NUL);
        int32 ndim; int32 shape[ndim]
    int32   tokens[B][T]
    int32   targets[B][T]
    float32 params   (initial values), order P
    float32 logits[B][T][V]          (forward with the initial params)
    float32 loss                     (mean cross-entropy, initial params)
    float32 grads    (of the loss w.r.t. the initial params), order P
    float32 step_losses[N_STEPS]     (loss BEFORE each AdamW step, so
                                      step_losses[0] == loss)
    float32 params   (after N_STEPS AdamW steps), order P

    P = Pleiades' parameter order (pl_graph_param(g, i), i.e. creation order
        in graph/model_gpt.c):
        embedding.wte [V, C], embedding.wpe [T, C],
        for l in 0..L-1:
          h{l}.ln1.weight [C], h{l}.ln1.bias [C],
          h{l}.attn.qkv.weight [3C, C], h{l}.attn.qkv.bias [3C],
          h{l}.attn.proj.weight [C, C], h{l}.attn.proj.bias [C],
          h{l}.ln2.weight [C], h{l}.ln2.bias [C],
          h{l}.mlp.fc.weight [4C, C], h{l}.mlp.fc.bias [4C],
          h{l}.mlp.proj.weight [C, 4C], h{l}.mlp.proj.bias [C],
        ln_f.weight [C], ln_f.bias [C]
        (linear weights are PyTorch's [out, in], row-major)
"""
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC = 20261122
VERSION = 1
V, T, C, L, NH, B = 256, 16, 32, 2, 4, 2
N_STEPS = 5


class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n))
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        self.register_buffer('mask', mask.view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        hs = c // NH
        q, k, v = self.qkv(x).split(c, dim=2)
        # [b, t, c] -> [b, NH, t, hs]: head h is columns h*hs .. (h+1)*hs
        q = q.view(b, t, NH, hs).transpose(1, 2)
        k = k.view(b, t, NH, hs).transpose(1, 2)
        v = v.view(b, t, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float('-inf'))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate='tanh'))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = LayerNorm(C)
        self.attn = CausalSelfAttention()
        self.ln2 = LayerNorm(C)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(V, C))
        self.wpe = nn.Parameter(torch.empty(T, C))
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = LayerNorm(C)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:t]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.t()  # tied LM head, no bias

    def named_params_in_order(self):
        """(Pleiades name, parameter) in Pleiades' parameter order."""
        out = [('embedding.wte', self.wte), ('embedding.wpe', self.wpe)]
        for l, blk in enumerate(self.h):
            p = 'h%d.' % l
            out += [(p + 'ln1.weight', blk.ln1.weight),
                    (p + 'ln1.bias', blk.ln1.bias),
                    (p + 'attn.qkv.weight', blk.attn.qkv.weight),
                    (p + 'attn.qkv.bias', blk.attn.qkv.bias),
                    (p + 'attn.proj.weight', blk.attn.proj.weight),
                    (p + 'attn.proj.bias', blk.attn.proj.bias),
                    (p + 'ln2.weight', blk.ln2.weight),
                    (p + 'ln2.bias', blk.ln2.bias),
                    (p + 'mlp.fc.weight', blk.mlp.fc.weight),
                    (p + 'mlp.fc.bias', blk.mlp.fc.bias),
                    (p + 'mlp.proj.weight', blk.mlp.proj.weight),
                    (p + 'mlp.proj.bias', blk.mlp.proj.bias)]
        out += [('ln_f.weight', self.ln_f.weight), ('ln_f.bias', self.ln_f.bias)]
        return out


def init_params(model):
    with torch.no_grad():
        for name, p in model.named_params_in_order():
            if name.startswith('embedding.'):
                p.normal_(0.0, 0.02)
            elif '.ln' in name or name.startswith('ln_f'):
                if name.endswith('.weight'):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.copy_(0.1 * torch.randn_like(p))
            elif name.endswith('attn.qkv.weight'):
                p.normal_(0.0, 0.2)
            else:  # other linear weights and all linear biases
                p.normal_(0.0, 0.02)


def f32(t):
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype='<f4').tobytes()


def i32(t):
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype='<i4').tobytes()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'gpt_reference.bin')
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    model = GPT()
    init_params(model)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    named = model.named_params_in_order()
    params = [p for _, p in named]
    assert len(set(id(p) for p in params)) == len(list(model.parameters()))

    def loss_of(logits):
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))  # mean

    buf = bytearray()
    buf += struct.pack('<8i', MAGIC, VERSION, V, T, C, L, NH, B)
    buf += struct.pack('<i', len(named))
    for name, p in named:
        nb = name.encode('ascii')
        buf += struct.pack('<i', len(nb)) + nb
        buf += struct.pack('<i', p.dim()) + struct.pack('<%di' % p.dim(), *p.shape)
    buf += i32(tokens)
    buf += i32(targets)
    for p in params:
        buf += f32(p)

    # Forward and backward with the initial parameters.
    model.zero_grad()
    logits = model(tokens)
    loss = loss_of(logits)
    loss.backward()
    buf += f32(logits)
    buf += struct.pack('<f', loss.item())
    for p in params:
        buf += f32(p.grad)

    # N_STEPS AdamW steps on the same batch, recording the loss before each.
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    step_losses = []
    for _ in range(N_STEPS):
        opt.zero_grad()
        loss = loss_of(model(tokens))
        loss.backward()
        step_losses.append(loss.item())
        opt.step()
    buf += struct.pack('<%df' % N_STEPS, *step_losses)
    for p in params:
        buf += f32(p)

    with open(out, 'wb') as f:
        f.write(buf)
    print('wrote %s (%d bytes, %d params); losses %s' % (
        out, len(buf), sum(p.numel() for p in params),
        ' '.join('%.6f' % l for l in step_losses)))


if __name__ == '__main__':
    main()
