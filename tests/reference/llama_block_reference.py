#!/usr/bin/python3
"""Writes llama_block_reference.txt: the PyTorch twin of examples/llama_block.c
(a LLaMA-style decoder built from Pleiades' ops), for the CTest llama_block,
which runs `llama_block --reference llama_block_reference.txt`.

The model, in Pleiades' parameter order (linear weights [out, in]):
    embedding.wte [V, C], embedding.wpe [T, C]   tokens -> wte[t] + wpe[pos]
    for l in 0..L-1 (pre-norm residual blocks):
      h{l}.attn_norm.weight [C]                   RMSNorm, eps 1e-6
      h{l}.attn.qkv.weight [3C, C], .bias [3C]    causal attention, NH heads
      h{l}.attn.proj.weight [C, C], .bias [C]
      h{l}.mlp_norm.weight [C]                    RMSNorm
      h{l}.mlp.gate.weight [F, C], .bias [F]      SwiGLU:
      h{l}.mlp.up.weight [F, C], .bias [F]          down(silu(gate(h)) * up(h))
      h{l}.mlp.down.weight [C, F], .bias [C]
    norm.weight [C]                               final RMSNorm
    head.weight [V, C], head.bias [V]             untied LM head
    loss: mean cross-entropy over all B*T tokens.
It differs from LLaMA where Pleiades has no op yet: learned positions
instead of rotary embeddings, and linear layers with biases. RMSNorm is
written out as torch.nn.RMSNorm(C, eps=1e-6) computes it (that module is
PyTorch >= 2.4; Debian's is 1.13).

Training: torch.optim.AdamW(lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
weight_decay=0.01) for N_STEPS steps on one batch; the loss before each
step is recorded.

Format: a first line "llama_block_reference 1", then one array per line,
"<name> <count> <values...>": "config" (V T C L NH F B N_STEPS), "tokens"
and "targets" (B*T ints), every parameter by its Pleiades name (float32,
%.9g, exact), and "losses" (N_STEPS).

Usage: /usr/bin/python3 llama_block_reference.py > llama_block_reference.txt
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, C, L, NH, FF, B = 64, 8, 32, 2, 4, 64, 4
N_STEPS = 5
EPS = 1e-6


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.register_buffer('mask', torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        hs = c // NH
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, NH, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = F.softmax(att.masked_fill(~self.mask[:t, :t], float('-inf')), dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(C, FF)
        self.up = nn.Linear(C, FF)
        self.down = nn.Linear(FF, C)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(), Attention()
        self.mlp_norm, self.mlp = RMSNorm(), SwiGLU()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(V, C))
        self.wpe = nn.Parameter(torch.empty(T, C))
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.norm = RMSNorm()
        self.head = nn.Linear(C, V)

    def forward(self, tokens):
        x = self.wte[tokens] + self.wpe[:tokens.shape[1]]
        for blk in self.h:
            x = blk(x)
        return self.head(self.norm(x))

    def named_params_in_order(self):
        out = [('embedding.wte', self.wte), ('embedding.wpe', self.wpe)]
        for l, blk in enumerate(self.h):
            p = 'h%d.' % l
            out += [(p + 'attn_norm.weight', blk.attn_norm.weight),
                    (p + 'attn.qkv.weight', blk.attn.qkv.weight),
                    (p + 'attn.qkv.bias', blk.attn.qkv.bias),
                    (p + 'attn.proj.weight', blk.attn.proj.weight),
                    (p + 'attn.proj.bias', blk.attn.proj.bias),
                    (p + 'mlp_norm.weight', blk.mlp_norm.weight),
                    (p + 'mlp.gate.weight', blk.mlp.gate.weight),
                    (p + 'mlp.gate.bias', blk.mlp.gate.bias),
                    (p + 'mlp.up.weight', blk.mlp.up.weight),
                    (p + 'mlp.up.bias', blk.mlp.up.bias),
                    (p + 'mlp.down.weight', blk.mlp.down.weight),
                    (p + 'mlp.down.bias', blk.mlp.down.bias)]
        out += [('norm.weight', self.norm.weight),
                ('head.weight', self.head.weight), ('head.bias', self.head.bias)]
        return out


def main():
    torch.manual_seed(0)
    model = Model()
    named = model.named_params_in_order()
    assert len(named) == len(list(model.parameters()))
    with torch.no_grad():
        for name, p in named:
            if name.endswith('norm.weight'):  # away from ones: a real test
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith('qkv.weight'):  # peaked attention
                p.normal_(0.0, 0.2)
            else:
                p.normal_(0.0, 0.05)
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))

    lines = ['llama_block_reference 1']

    def emit(name, values, fmt):
        lines.append('%s %d %s' % (name, len(values), ' '.join(fmt % v for v in values)))

    emit('config', [V, T, C, L, NH, FF, B, N_STEPS], '%d')
    emit('tokens', tokens.reshape(-1).tolist(), '%d')
    emit('targets', targets.reshape(-1).tolist(), '%d')
    for name, p in named:
        emit(name, p.detach().reshape(-1).tolist(), '%.9g')

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(tokens).view(-1, V), targets.view(-1))
        loss.backward()
        losses.append(loss.item())
        opt.step()
    emit('losses', losses, '%.9g')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
