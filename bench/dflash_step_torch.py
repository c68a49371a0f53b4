#!/usr/bin/env python3
"""The DFlash drafter's training step in PyTorch: the baseline of drafter_step_bench.

The same model and shapes as train/cuda_dflash_trainer.h (qwen3-8b by default): K captured
layers -> fc -> hidden_norm as the context, draft layers whose queries are the block's rows
and whose keys and values are [context ; block], QK-norm before RoPE, SwiGLU, final norm,
the target's frozen LM head, cross-entropy weighted by exp(-(j - 1) / gamma). fp32 master
weights, bf16 autocast, flex_attention with a block mask (each block sees its document's
context before its anchor and its own B rows), the gradient's global norm clipped to 1.0
and fused AdamW, as hsring's step (AdamWOptions::max_grad_norm) and a PyTorch user's
training loop do. The documents and anchors are drafter_step_bench's (--batch FILE from its
--batch-out). Prints key=value lines.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, d, heads, kv, hd, inter):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, hd
        self.input_norm = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, heads * hd, bias=False)
        self.k = torch.nn.Linear(d, kv * hd, bias=False)
        self.v = torch.nn.Linear(d, kv * hd, bias=False)
        self.o = torch.nn.Linear(heads * hd, d, bias=False)
        self.q_norm = torch.nn.Parameter(torch.ones(hd))
        self.k_norm = torch.nn.Parameter(torch.ones(hd))
        self.post_norm = torch.nn.Parameter(torch.ones(d))
        self.gate = torch.nn.Linear(d, inter, bias=False)
        self.up = torch.nn.Linear(d, inter, bias=False)
        self.down = torch.nn.Linear(inter, d, bias=False)

    def forward(self, x, ctx, rope, attend, eps):
        (bcos, bsin), (ccos, csin) = rope
        rows, t = x.shape[0], ctx.shape[0]
        h = rms_norm(x, self.input_norm, eps)
        q = rms_norm(self.q(h).view(rows, self.heads, self.hd), self.q_norm, eps)
        q = rotate(q, bcos, bsin)
        bk = rotate(rms_norm(self.k(h).view(rows, self.kv, self.hd), self.k_norm, eps), bcos, bsin)
        ck = rotate(rms_norm(self.k(ctx).view(t, self.kv, self.hd), self.k_norm, eps), ccos, csin)
        bv = self.v(h).view(rows, self.kv, self.hd)
        cv = self.v(ctx).view(t, self.kv, self.hd)
        bf16 = torch.bfloat16  # RoPE's fp32 tables promote q and k
        k = torch.cat((ck, bk)).to(bf16).transpose(0, 1).unsqueeze(0)
        v = torch.cat((cv, bv)).to(bf16).transpose(0, 1).unsqueeze(0)
        a = attend(q.to(bf16).transpose(0, 1).unsqueeze(0), k, v)  # [1, heads, rows, hd]
        x = x + self.o(a.squeeze(0).transpose(0, 1).reshape(rows, -1))
        m = rms_norm(x, self.post_norm, eps)
        return x + self.down(F.silu(self.gate(m)) * self.up(m))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", required=True)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--captured", type=int, default=5)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--inter", type=int, default=12288)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--theta", type=float, default=1e6)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="0: no clipping")
    a = p.parse_args()
    dev = torch.device("cuda")
    fields = {}
    for line in open(a.batch):
        key, *values = line.split()
        fields[key] = torch.tensor([int(v) for v in values], dtype=torch.int64)
    offsets, anchors = fields["doc_offsets"], fields["anchors"]
    t, nb, bs, d = int(offsets[-1]), len(anchors), a.block, a.hidden
    rows, eps = nb * bs, 1e-6
    print(f"torch={torch.__version__}")
    print(f"torch_tokens={t}")
    print(f"torch_blocks={nb}")

    g = torch.Generator(device=dev).manual_seed(0)
    positions = torch.cat([torch.arange(int(offsets[i + 1] - offsets[i])) for i in range(len(offsets) - 1)]).to(dev)
    doc = torch.searchsorted(offsets[1:], anchors, right=True)
    ctx_begin = offsets[doc].to(dev)
    anchors = anchors.to(dev)
    tokens = torch.randint(0, a.vocab, (t,), device=dev, generator=g)
    labels = torch.randint(0, a.vocab, (t,), device=dev, generator=g)
    features = (torch.randn(t, a.captured * d, device=dev, generator=g) * 0.01).to(torch.bfloat16)
    j = torch.arange(bs, device=dev)
    block_tokens = torch.where(j == 0, tokens[anchors][:, None], a.vocab - 1).reshape(-1)
    block_pos = (positions[anchors][:, None] + j).reshape(-1)
    label_rows = (anchors[:, None] + j[1:] - 1)  # [nb, bs - 1]
    row_labels = labels[label_rows].reshape(-1)
    weights = torch.exp(-(j[1:] - 1).double() / (7.0 * bs / 16)).float().repeat(nb)
    scored = (torch.arange(nb, device=dev)[:, None] * bs + j[1:]).reshape(-1)

    inv_freq = 1.0 / (a.theta ** (torch.arange(0, a.head_dim, 2, device=dev, dtype=torch.float64) / a.head_dim))

    def table(pos):
        ang = pos.double()[:, None] * inv_freq
        return ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]

    rope = (table(block_pos), table(positions))

    # The target's frozen weights, bf16 as a PyTorch user keeps them.
    embed = (torch.randn(a.vocab, d, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    head = (torch.randn(a.vocab, d, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    fc = torch.nn.Linear(a.captured * d, d, bias=False).to(dev)
    hidden_norm = torch.nn.Parameter(torch.ones(d, device=dev))
    final_norm = torch.nn.Parameter(torch.ones(d, device=dev))
    layers = torch.nn.ModuleList(Layer(d, a.heads, a.kv_heads, a.head_dim, a.inter) for _ in range(a.layers)).to(dev)
    params = list(fc.parameters()) + [hidden_norm, final_norm] + list(layers.parameters())
    print(f"torch_parameters={sum(x.numel() for x in params)}")
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)

    kv_len = t + rows
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def mask_mod(b, h, q_idx, kv_idx):
            blk = q_idx // bs
            in_ctx = (kv_idx < t) & (kv_idx >= ctx_begin[blk]) & (kv_idx < anchors[blk])
            in_block = (kv_idx >= t) & ((kv_idx - t) // bs == blk)
            return in_ctx | in_block

        mask = create_block_mask(mask_mod, 1, 1, rows, kv_len, device=dev)
        flex = torch.compile(flex_attention, dynamic=False)
        attend = lambda q, k, v: flex(q, k, v, block_mask=mask, enable_gqa=True)
        print("torch_attention=flex_attention")
    except Exception as e:  # pragma: no cover - old torch
        print(f"torch_attention=sdpa ({e})")
        kv = torch.arange(kv_len, device=dev)
        blk = torch.arange(rows, device=dev) // bs
        dense = ((kv[None] < t) & (kv[None] >= ctx_begin[blk][:, None]) & (kv[None] < anchors[blk][:, None])) | (
            (kv[None] >= t) & ((kv[None] - t) // bs == blk[:, None]))
        attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=True)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ctx = rms_norm(fc(features), hidden_norm, eps)
            x = embed[block_tokens].float()
            for layer in layers:
                x = layer(x, ctx, rope, attend, eps)
            f = rms_norm(x, final_norm, eps)[scored]
            logits = f.to(torch.bfloat16) @ head.t()
        ce = F.cross_entropy(logits.float(), row_labels, reduction="none")
        loss = (ce * weights).sum() / weights.sum()
        loss.backward()
        if a.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.iterations):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    print(f"torch_loss={loss.item():.3f}")
    print(f"torch_step_ms={ms:.1f}")
    print(f"torch_step_tokens_per_s={t / (ms * 1e-3):.0f}")
    print(f"torch_gpu_memory_peak_bytes={torch.cuda.max_memory_allocated()}")


if __name__ == "__main__":
    main()
