#!/usr/bin/env python3
"""bench_train.py - training tokens per second of a small Llama in PyTorch, for comparison
with tools/train.c on the same shape, batch and optimizer (see notes/bench.md).

    python3 tools/bench_train.py                  2 threads, 3 warm-up steps, 3 runs of 30 steps
    python3 tools/bench_train.py --threads 1

(Debian's python3-torch is in the system Python, /usr/bin/python3.)

The model is written here from the equations, in the layout src/train/trainer.c uses:

    D = 128 model width      L = 4 layers       H = 8 query heads   Hkv = 2 KV heads
    S = 16 head size         F = 352 FFN width  V = 512 vocabulary  T = 256 context
    B = 8 sequences per step

    h = emb[tokens]                                                   (B, T, D)
    per layer:
        a = rmsnorm(h) * attn_norm
        q = a Wq^T (B, T, H, S)   k = a Wk^T, v = a Wv^T (B, T, Hkv, S)
        rotate q and k: pair (2i, 2i+1) of each head by angle t * 10000^(-2i/S)
        query head j reads KV head j // (H / Hkv)                     grouped-query attention
        h = h + softmax(q k^T / sqrt(S), causal) v  Wo^T
        a = rmsnorm(h) * ffn_norm
        h = h + (silu(a Wgate^T) * (a Wup^T)) Wdown^T                  SwiGLU
    logits = (rmsnorm(h) * out_norm) emb^T                            tied classifier

No biases. One step is forward, mean cross-entropy over the B*T next-token
targets, backward, gradient clipping to norm 1.0 and one AdamW step (lr 1e-3,
betas 0.9/0.99, eps 1e-8, weight decay 0.1 on matrices and the embedding, none
on the norm weights, as tools/train.c does). Float32 throughout.

Tokens/s = B * T * steps / seconds, over the timed steps only: warm-up steps
(first allocations, kernel choices) are run and not counted. The token
batches are random: the speed of a step does not depend on which tokens it
sees. Everything random is seeded.

PyTorch's matrix products go to the BLAS it was built against (Debian's build
uses the system's OpenBLAS); OPENBLAS_NUM_THREADS is set to the thread count
before torch is imported, because torch.set_num_threads only sets the OpenMP
threads and a pthreads OpenBLAS would otherwise use every core.
"""
import argparse
import math
import os
import statistics
import sys
import time

D, L, H, HKV, S, F, V, T, B = 128, 4, 8, 2, 16, 352, 512, 256, 8
RMS_EPS, ROPE_BASE = 1e-5, 10000.0
EXPECTED_PARAMS = 771_200


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first, at least 1 (default 3)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (default 30)")
    p.add_argument("--runs", type=int, default=3, help="timed runs; the median is reported (default 3)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.threads < 1 or a.warmup < 1 or a.steps < 1 or a.runs < 1:
        p.error("--threads, --warmup, --steps and --runs must be at least 1")
    return a


args = parse_args()
# Before the import: the BLAS reads it when it is loaded.
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)

import torch  # noqa: E402  (after the environment is set)
import torch.nn.functional as fn  # noqa: E402


def rmsnorm(x, w):
    # x / sqrt(mean(x^2) + eps) * w, over the last dimension
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w


def rope_tables():
    """cos and sin of angle t * base^(-2i/S) for position t and pair i: (T, S/2) each."""
    i = torch.arange(0, S, 2, dtype=torch.float32)          # 2i
    inv_freq = ROPE_BASE ** (-i / S)                          # (S/2,)
    angle = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    return torch.cos(angle), torch.sin(angle)


def rope(x, cos, sin):
    """Rotate adjacent pairs (x[2i], x[2i+1]) of each head. x: (B, T, heads, S)."""
    b, t, nh, s = x.shape
    pairs = x.reshape(b, t, nh, s // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]                     # (B, T, heads, S/2)
    c = cos[:t].view(1, t, 1, s // 2)
    sn = sin[:t].view(1, t, 1, s // 2)
    out = torch.stack((x0 * c - x1 * sn, x0 * sn + x1 * c), dim=-1)
    return out.reshape(b, t, nh, s)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        def mat(n, k):  # a weight of n outputs and k inputs, used as x W^T
            return torch.nn.Parameter(torch.randn(n, k) * 0.02)
        self.attn_norm = torch.nn.Parameter(torch.ones(D))
        self.wq = mat(H * S, D)        # (H*S, D)
        self.wk = mat(HKV * S, D)      # (Hkv*S, D)
        self.wv = mat(HKV * S, D)      # (Hkv*S, D)
        self.wo = mat(D, H * S)        # (D, H*S)
        self.ffn_norm = torch.nn.Parameter(torch.ones(D))
        self.w_gate = mat(F, D)        # (F, D)
        self.w_up = mat(F, D)          # (F, D)
        self.w_down = mat(D, F)        # (D, F)

    def forward(self, h, cos, sin, mask):
        b, t, _ = h.shape
        a = rmsnorm(h, self.attn_norm)
        q = rope((a @ self.wq.t()).view(b, t, H, S), cos, sin).transpose(1, 2)     # (B, H, T, S)
        k = rope((a @ self.wk.t()).view(b, t, HKV, S), cos, sin).transpose(1, 2)   # (B, Hkv, T, S)
        v = (a @ self.wv.t()).view(b, t, HKV, S).transpose(1, 2)                  # (B, Hkv, T, S)
        # Query head j uses KV head j // (H / Hkv): repeat each KV head H / Hkv times in place.
        k = k.repeat_interleave(H // HKV, dim=1)                                   # (B, H, T, S)
        v = v.repeat_interleave(H // HKV, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(S)                          # (B, H, T, T)
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        att = torch.softmax(scores, dim=-1) @ v                                    # (B, H, T, S)
        h = h + att.transpose(1, 2).reshape(b, t, H * S) @ self.wo.t()
        a = rmsnorm(h, self.ffn_norm)
        g = fn.silu(a @ self.w_gate.t()) * (a @ self.w_up.t())                     # (B, T, F)
        return h + g @ self.w_down.t()


class Llama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(V, D) * 0.02)   # (V, D), also the classifier
        self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
        self.out_norm = torch.nn.Parameter(torch.ones(D))
        cos, sin = rope_tables()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        # True above the diagonal: position t may not look at a later position.
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                             persistent=False)

    def forward(self, tokens):                                    # (B, T) -> (B, T, V)
        h = self.emb[tokens]
        for blk in self.blocks:
            h = blk(h, self.cos, self.sin, self.mask)
        return rmsnorm(h, self.out_norm) @ self.emb.t()


def blas_core():
    """The kernel set of the OpenBLAS that torch's matrix products use, if it is OpenBLAS."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")   # the copy already loaded by torch, if any
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return "OpenBLAS " + lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "not OpenBLAS, or not found"


def main():
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = Llama()
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == EXPECTED_PARAMS, f"{n_params} parameters, expected {EXPECTED_PARAMS}"
    decay = [p for p in model.parameters() if p.dim() == 2]       # matrices and the embedding
    no_decay = [p for p in model.parameters() if p.dim() == 1]    # norm weights
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8)

    # Row b of a batch is T + 1 tokens: inputs are [0, T), targets [1, T + 1).
    n_batches = args.warmup + args.steps * args.runs
    gen = torch.Generator().manual_seed(args.seed)
    batches = torch.randint(0, V, (n_batches, B, T + 1), generator=gen)

    def step(i):
        x, y = batches[i, :, :-1], batches[i, :, 1:]
        logits = model(x)
        loss = fn.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    first_loss = step(0)
    for i in range(1, args.warmup):
        step(i)
    rates = []
    for r in range(args.runs):
        base = args.warmup + r * args.steps
        t0 = time.perf_counter()
        for i in range(args.steps):
            last_loss = step(base + i)
        rates.append(B * T * args.steps / (time.perf_counter() - t0))
    print(f"pytorch: {n_params:,} parameters (dim {D}, hidden {F}, {L} layers, {H} heads, "
          f"{HKV} KV heads, vocab {V}, ctx {T}, tied), batch {B} x {T}, "
          f"loss {first_loss:.3f} at the first step (ln {V} = {math.log(V):.3f}), "
          f"{last_loss:.3f} at the last; BLAS: {blas_core()}", file=sys.stderr)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    print(f"pytorch {torch.__version__}, {args.threads} threads: "
          f"{statistics.median(rates):,.0f} tokens/s "
          f"(median of {args.runs} runs of {args.steps} steps after {args.warmup} warm-up steps: "
          f"{runs})")


if __name__ == "__main__":
    main()
