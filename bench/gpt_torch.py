#!/usr/bin/python3
"""PyTorch peer of bench_gpt: the same GPT-2 training step, timed.

The model is Pleiades' pl_gpt_build written in PyTorch (float32):

    x = wte[tokens] + wpe[0:T]                                    [B, T, C]
    L pre-LayerNorm blocks:
        qkv = Linear(C, 3C)(LayerNorm(x))   (q | k | v along the last dim,
                                             head h = columns h*HS..(h+1)*HS)
        a   = softmax(q k^T / sqrt(HS), causal) v   per head, as explicit
              matmuls and a masked softmax (torch 1.13 has no
              F.scaled_dot_product_attention), heads concatenated
        x   = x + Linear(C, C)(a)                                   (proj)
        x   = x + Linear(4C, C)(GELU_tanh(Linear(C, 4C)(LayerNorm(x))))
    logits = LayerNorm(x) wte^T          (LM head tied to wte, no bias)
    loss   = CrossEntropy over all B*T positions

LayerNorm eps 1e-5. GPT-2 initialisation (linear weights N(0, 0.02), the
two projections N(0, 0.02/sqrt(2L)), biases 0, wte/wpe N(0, 0.02)), as in
Pleiades; AdamW(lr=1e-3, weight_decay=0.01, betas (0.9, 0.999), eps 1e-8)
over all parameters. Random tokens and targets, fixed for the run.

Defaults V=256, T=128, C=256, L=4, NH=4, batch 16. Warm-up steps, then
`reps` repetitions of `steps` timed steps; each step is
zero_grad(set_to_none=True), forward, loss, backward, optimizer step and
loss.item() (which syncs). Prints one machine-readable line (the median of
the repetitions' mean ms/step):

    torch ms_per_step=X tokens_per_s=Y

With PL_PEER_PRECISION=bf16 in the environment the forward pass and the
loss run under torch.autocast("cpu", torch.bfloat16) (parameters, their
gradients and AdamW stay fp32), as bench_gpt --precision bf16 asks.
With PL_PEER_DEVICE=cuda the model, its data and AdamW live on the first
GPU (bench_gpt --device cuda); each step's loss.item() waits for the GPU,
so the timings are whole steps. fp32 matmuls stay true fp32 (PyTorch's
default: torch.backends.cuda.matmul.allow_tf32 is False), as Pleiades'.

Usage: /usr/bin/python3 gpt_torch.py [threads [steps [warmup [reps
           [batch [layers [channels [context [heads [vocab]]]]]]]]]]
       (defaults 2, 10, 3, 5, 16, 4, 256, 128, 4, 256)
       With PL_PEER_SERVE=1 it serves timing commands on stdin instead
       (torch_timing.py), which is how bench_gpt runs it.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import median_ms_per_step, serve, serving  # bench/

VOCAB = 256


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH, T, proj_std):
        super().__init__()
        self.nh = NH
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        nn.init.normal_(self.qkv.weight, 0.0, 0.02)
        nn.init.zeros_(self.qkv.bias)
        nn.init.normal_(self.proj.weight, 0.0, proj_std)
        nn.init.zeros_(self.proj.bias)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        self.register_buffer('mask', mask.view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.nh
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.nh, hs).transpose(1, 2)   # [b, NH, t, hs]
        k = k.view(b, t, self.nh, hs).transpose(1, 2)
        v = v.view(b, t, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float('-inf'))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, C, NH, T, L):
        super().__init__()
        proj_std = 0.02 / math.sqrt(2 * L)
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, NH, T, proj_std)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)
        nn.init.normal_(self.fc.weight, 0.0, 0.02)
        nn.init.zeros_(self.fc.bias)
        nn.init.normal_(self.proj.weight, 0.0, proj_std)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate='tanh'))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, NH):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(V, C).normal_(0.0, 0.02))
        self.wpe = nn.Parameter(torch.empty(T, C).normal_(0.0, 0.02))
        self.h = nn.ModuleList([Block(C, NH, T, L) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:t]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.t()  # tied LM head, no bias


def main(argv):
    args = [int(a) for a in argv[1:]]
    defaults = [2, 10, 3, 5, 16, 4, 256, 128, 4, VOCAB]
    if len(args) > len(defaults):
        sys.exit("gpt_torch.py: too many arguments (see the docstring)")
    threads, steps, warmup, reps, B, L, C, T, NH, V = args + defaults[len(args):]
    if threads < 1 or steps < 1 or warmup < 0 or reps < 1 or min(B, L, C, T, NH, V) < 1:
        sys.exit("gpt_torch.py: threads, steps, reps and the model sizes must "
                 "be >= 1, warmup >= 0")
    if C % NH:
        sys.exit("gpt_torch.py: channels %d not divisible by heads %d" % (C, NH))

    device = os.environ.get("PL_PEER_DEVICE", "cpu")
    if device not in ("cpu", "cuda"):
        sys.exit("gpt_torch.py: PL_PEER_DEVICE %r: cpu or cuda" % device)
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpt_torch.py: PL_PEER_DEVICE=cuda but torch sees no GPU")
    torch.set_num_threads(threads)
    torch.manual_seed(42)
    model = GPT(V, T, C, L, NH).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    tokens = torch.randint(0, V, (B, T), dtype=torch.int64).to(device)
    targets = torch.randint(0, V, (B, T), dtype=torch.int64).to(device)

    bf16 = os.environ.get("PL_PEER_PRECISION") == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(tokens)
            loss = F.cross_entropy(logits.view(B * T, V), targets.view(B * T))
        loss.backward()
        opt.step()
        return loss.item()

    if serving():  # the benchmark interleaves its repetitions with ours
        serve(step, f"gpt threads={threads}")
        return
    ms, loss = median_ms_per_step(step, steps, warmup, reps)
    if not math.isfinite(loss):
        sys.exit("gpt_torch.py: loss is %r" % loss)
    print(f"torch ms_per_step={ms:.3f} tokens_per_s={B * T * 1e3 / ms:.1f} "
          f"loss={loss:.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
