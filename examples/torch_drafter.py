#!/usr/bin/env python3
"""A PyTorch DFlash drafter trained from hsring's ring.

The objective of hsring's built-in DFlash drafter (docs/drafter-training.md, "The DFlash
drafter"), written in PyTorch:

    ctx = RMSNorm_hidden(features fc^T)             features: the K captured layers [T, K*H]
    block at anchor a of document [s, e): the anchor token, then B - 1 mask tokens, at
        positions positions[a] + j, embedded by the target's frozen embedding
    per draft layer: q = RoPE(q_norm(h Wq)), k = RoPE(k_norm([ctx ; h] Wk)), v = [ctx ; h] Wv,
        the block's queries see the context rows [s, a) strictly before the anchor and
        their own block (bidirectionally), nothing else; then a SwiGLU MLP
    logits = RMSNorm_final(x) lm_head^T             the target's frozen LM head
    loss = sum_j w_j CE_j / sum_j w_j,  w_j = exp(-(j - 1) / gamma), j = 1 .. B - 1,
        position j scored against the token the target would put at a + j

Checkpoints (torch.save) go to --checkpoint-dir every --checkpoint-every steps and at the
end; a start resumes from the newest one there. Run it as the drafters of a model ring:

    hsring run --model builtin --targets cpu:2 --drafters cpu:1 --batches 200 \
        --drafter-cmd 'python3 examples/torch_drafter.py --checkpoint-dir ckpt'

The target's embedding and LM head are read from $HSRING_MODEL (an HF folder, or
`builtin`, whose folder `hsring model builtin` prints) or --target-model.
"""

import argparse
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(HERE, "..", "python", "hsring")):
    sys.path.insert(0, os.path.join(HERE, "..", "python"))  # a source checkout

import hsring  # noqa: E402

IGNORE = -100


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target-model", default=os.environ.get("HSRING_MODEL"),
                   help="HF folder of the target, or builtin (default: $HSRING_MODEL)")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cuda if visible)")
    p.add_argument("--checkpoint-dir", default="torch_drafter_checkpoints")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps (0: only at the end)")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--draft-layers", type=int, default=0,
                   help="0: 5, or 1 for a target narrower than 1024 (as hsring's)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--anchors", type=int, default=0, help="blocks per batch (0: T / 32, at least 1)")
    p.add_argument("--loss-gamma", type=float, default=7.0)
    p.add_argument("--mask-token-id", type=int, default=-1, help="-1: the vocabulary's last")
    p.add_argument("--labels", choices=["data", "target"], default="data")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--total-steps", type=int, default=0,
                   help="end of the cosine (0: the ring's batch limit, else no decay)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--noise-std", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--log-json", default=None, help="append one JSON line per step here")
    p.add_argument("--kill-at-step", type=int, default=0,
                   help="(tests) the first incarnation SIGKILLs itself after this step")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- the model

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x32).to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, positions, theta):
    """HF rotate_half RoPE. x: [N, heads, hd]; positions: [N]."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
    ang = positions.float()[:, None] * inv[None]
    emb = torch.cat((ang, ang), dim=-1)[:, None, :]
    return (x * emb.cos() + rotate_half(x) * emb.sin()).to(x.dtype)


class DraftLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.hd, self.theta = c["heads"], c["kv_heads"], hd, c["rope_theta"]
        self.input_layernorm = RMSNorm(d, c["eps"])
        self.q_proj = nn.Linear(d, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, c["eps"])
        self.k_norm = RMSNorm(hd, c["eps"])
        self.post_attention_layernorm = RMSNorm(d, c["eps"])
        self.gate_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], d, bias=False)

    def forward(self, x, ctx, block_pos, ctx_pos, mask):
        n, t = x.shape[0], ctx.shape[0]
        h = self.input_layernorm(x)
        q = rope(self.q_norm(self.q_proj(h).view(n, self.heads, self.hd)), block_pos, self.theta)
        kv_in = torch.cat([ctx, h])  # the context rows, not through input_layernorm
        k = self.k_norm(self.k_proj(kv_in).view(t + n, self.kv_heads, self.hd))
        k = rope(k, torch.cat([ctx_pos, block_pos]), self.theta)
        v = self.v_proj(kv_in).view(t + n, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads  # query head i reads KV head i // rep
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=mask[None])
        x = x + self.o_proj(o.transpose(0, 1).reshape(n, self.heads * self.hd))
        m = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class DflashDrafter(nn.Module):
    def __init__(self, c, embed, lm_head):
        super().__init__()
        self.config = c
        d = c["hidden_size"]
        self.fc = nn.Linear(c["num_layers_captured"] * c["target_hidden"], d, bias=False)
        self.hidden_norm = RMSNorm(d, c["eps"])
        self.layers = nn.ModuleList(DraftLayer(c) for _ in range(c["draft_layers"]))
        self.norm = RMSNorm(d, c["eps"])
        # The target's, frozen: buffers, so they are neither trained nor checkpointed.
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)

    def forward(self, features, positions, block_tokens, block_pos, mask):
        ctx = self.hidden_norm(self.fc(features))
        x = F.embedding(block_tokens, self.embed)
        for layer in self.layers:
            x = layer(x, ctx, block_pos, positions, mask)
        return self.norm(x) @ self.lm_head.t()


# ------------------------------------------------------------- blocks, labels and the loss

def step_labels(tokens, doc_offsets, slot_labels, mode):
    """labels[t]: the token the target would place at t + 1 (IGNORE where not counted).
    data: tokens[t + 1] where the slot's label is counted and t is not its document's
    last row; target: the slot's labels row as it is."""
    if mode == "target":
        return slot_labels.clone()
    labels = torch.full_like(tokens, IGNORE)
    labels[:-1] = tokens[1:]
    last = doc_offsets[1:] - 1
    labels[last[last >= 0]] = IGNORE
    labels[slot_labels < 0] = IGNORE
    return labels


def sample_anchors(doc_offsets, labels, B, count, generator):
    """The published rule (hsring's train/dflash_blocks.h): rows a of documents [s, e) with
    s < a < e whose own token and next token are both trained (labels[a - 1] and labels[a]
    counted); `count` distinct ones drawn uniformly (all when fewer), sorted, with their
    documents' [s, e). A block may run past its document's end."""
    candidates, docs = [], []
    counted = (labels >= 0).tolist()
    for d in range(len(doc_offsets) - 1):
        s, e = int(doc_offsets[d]), int(doc_offsets[d + 1])
        for a in range(s + 1, e):
            if counted[a - 1] and counted[a]:
                candidates.append(a)
                docs.append((s, e))
    if len(candidates) > count:
        pick = torch.randperm(len(candidates), generator=generator)[:count].sort().values.tolist()
        candidates = [candidates[i] for i in pick]
        docs = [docs[i] for i in pick]
    return candidates, docs


def build_blocks(tokens, positions, labels, anchors, starts, B, mask_id, T):
    nb = len(anchors)
    a = torch.tensor(anchors, dtype=torch.long)
    j = torch.arange(B)
    block_tokens = torch.full((nb, B), mask_id, dtype=torch.long)
    block_tokens[:, 0] = tokens[a]
    block_pos = positions[a][:, None] + j[None]
    # Position j against labels[a + j - 1]; ignored past the document's end.
    s = torch.tensor([start for start, _ in starts], dtype=torch.long)
    e = torch.tensor([end for _, end in starts], dtype=torch.long)
    label_rows = a[:, None] + j[None, 1:] - 1
    inside = label_rows < e[:, None]
    targets = torch.full((nb, B), IGNORE, dtype=torch.long)
    targets[:, 1:] = torch.where(inside, labels[label_rows.clamp(max=T - 1)],
                                 torch.full_like(label_rows, IGNORE))
    # Attention: block b sees context rows [s, a) and its own B rows.
    rows = torch.arange(T)
    ctx_mask = (rows[None] >= s[:, None]) & (rows[None] < a[:, None])          # [nb, T]
    own = torch.eye(nb, dtype=torch.bool)
    block_mask = own[:, None, :, None].expand(nb, B, nb, B).reshape(nb * B, nb * B)
    mask = torch.cat([ctx_mask.repeat_interleave(B, 0), block_mask], dim=1)   # [nb*B, T+nb*B]
    return block_tokens.reshape(-1), block_pos.reshape(-1), targets.reshape(-1), mask


def dflash_loss(logits, targets, B, gamma):
    logits32 = logits if logits.dtype == torch.float64 else logits.float()
    j = torch.arange(B, device=logits.device).repeat(logits.shape[0] // B)
    w = torch.exp(-(j - 1).to(logits32.dtype) / gamma)
    counted = (targets >= 0) & (j >= 1)  # the anchor (j = 0) is never scored
    w = w * counted
    ce = F.cross_entropy(logits32, targets.clamp(min=0), reduction="none")
    denom = w.sum()
    loss = (w * ce).sum() / denom.clamp(min=1e-12)
    hit = (logits.argmax(-1) == targets) & counted
    # teacher-forced acceptance: leading hits of each block from position 1
    h = hit.view(-1, B)[:, 1:].int()
    accepted = torch.cumprod(h, dim=1).sum(1).float()
    return loss, denom, 1.0 + accepted.mean()


# ------------------------------------------------------------------------- checkpoints

def checkpoints(folder):
    found = []
    for path in glob.glob(os.path.join(folder, "step-*.pt")):
        m = re.match(r"step-(\d+)\.pt$", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def save_checkpoint(folder, keep, step, model, optimizer, scheduler, config):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "step-%08d.pt" % step)
    tmp = path + ".tmp"
    torch.save({"step": step, "config": config, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a crash leaves the previous checkpoint or this one, never half
    for _, old in checkpoints(folder)[:-keep]:
        os.remove(old)
    return path


# ------------------------------------------------------------------------------ setup

def target_folder(name):
    if name == "builtin":
        binary = os.path.join(os.environ.get("HSRING_BIN_DIR", ""), "hsring")
        if not os.path.exists(binary):
            binary = "hsring"
        out = subprocess.run([binary, "model", "builtin"], check=True, capture_output=True, text=True)
        return out.stdout.strip().splitlines()[-1]
    if name and os.path.isdir(name):
        return name
    sys.exit("torch_drafter.py: the target's embedding and LM head come from an HF folder or "
             "builtin; %r is neither (a preset has no folder): pass --target-model" % (name,))


def target_weights(folder):
    from safetensors import safe_open
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    tensors = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, "pt") as f:
            for key in f.keys():
                if key.endswith("embed_tokens.weight") or key == "lm_head.weight":
                    tensors[key] = f.get_tensor(key).float()
    embed = next(v for k, v in tensors.items() if k.endswith("embed_tokens.weight"))
    head = tensors.get("lm_head.weight", embed)  # tied embeddings
    return cfg, embed, head


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available()
                                          and os.environ.get("CUDA_VISIBLE_DEVICES") else "cpu"))
    consumer = hsring.Consumer.from_env(device=None, seed=args.seed)
    shape = consumer.shape
    if shape.content != "model":
        sys.exit("torch_drafter.py: ring %s carries synthetic batches" % consumer.ring)
    tcfg, embed, head = target_weights(target_folder(args.target_model))
    H = shape.hidden_size
    if tcfg["hidden_size"] != H:
        sys.exit("torch_drafter.py: the target's hidden size %d is not the ring's %d"
                 % (tcfg["hidden_size"], H))
    vocab = embed.shape[0]
    config = {
        "hidden_size": H, "target_hidden": H, "num_layers_captured": shape.num_layers,
        "heads": tcfg["num_attention_heads"], "kv_heads": tcfg.get("num_key_value_heads")
        or tcfg["num_attention_heads"],
        "head_dim": tcfg.get("head_dim") or H // tcfg["num_attention_heads"],
        "intermediate_size": tcfg["intermediate_size"], "eps": tcfg.get("rms_norm_eps", 1e-6),
        "rope_theta": tcfg.get("rope_theta") or (tcfg.get("rope_parameters") or {}).get("rope_theta", 10000.0),
        "draft_layers": args.draft_layers or (1 if H < 1024 else 5),
        "block_size": args.block_size, "loss_gamma": args.loss_gamma,
        "mask_token_id": args.mask_token_id if args.mask_token_id >= 0 else vocab - 1,
        "vocab_size": vocab, "target_layer_ids": list(shape.layer_ids),
    }
    torch.manual_seed(args.seed)
    model = DflashDrafter(config, embed, head).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    total = args.total_steps or shape.batch_limit
    warmup = min(args.warmup_steps, total) if total else args.warmup_steps

    def rate(step):  # hsring's schedule, as a factor of the peak
        if warmup and step < warmup:
            return (step + 1) / warmup
        if not total:
            return 1.0
        if step >= total:
            return args.min_lr / args.lr
        c = 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
        return (args.min_lr + (args.lr - args.min_lr) * c) / args.lr

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    step = 0
    found = checkpoints(args.checkpoint_dir)
    if found:
        state = torch.load(found[-1][1], map_location=device, weights_only=False)
        if state["config"] != config:
            sys.exit("torch_drafter.py: %s is a checkpoint of another drafter" % found[-1][1])
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = state["step"]
        print("torch_drafter %d epoch %d: resumed from %s (step %d)"
              % (consumer.index, consumer.epoch, found[-1][1], step), flush=True)
    else:
        print("torch_drafter %d epoch %d: new drafter, %d parameters, layers %s"
              % (consumer.index, consumer.epoch, sum(p.numel() for p in model.parameters()),
                 list(shape.layer_ids)), flush=True)
    log = open(args.log_json, "a") if args.log_json else None
    B, gamma, mask_id = config["block_size"], config["loss_gamma"], config["mask_token_id"]
    for batch in consumer:
        t0 = time.monotonic()
        # Copy what the step needs out of the slot and release it, so targets refill it.
        features = batch.hidden.float().clone()
        tokens = torch.from_numpy(batch.input_ids.astype("int64"))
        positions = torch.from_numpy(batch.positions.astype("int64"))
        offsets = torch.from_numpy(batch.doc_offsets.astype("int64"))
        slot_labels = torch.from_numpy(batch.labels.astype("int64"))
        batch_id, T = batch.batch_id, batch.token_count
        batch.release()
        labels = step_labels(tokens, offsets, slot_labels, args.labels)
        count = args.anchors or max(1, T // 32)
        gen = torch.Generator().manual_seed(args.seed * 1000003 + step)
        anchors, starts = sample_anchors(offsets, labels, B, count, gen)
        if not anchors:
            continue
        block_tokens, block_pos, targets, mask = build_blocks(tokens, positions, labels, anchors,
                                                              starts, B, mask_id, T)
        if args.noise_std:
            features = features + args.noise_std * torch.randn(features.shape, generator=gen)
        model.train()
        logits = model(features.to(device), positions.to(device), block_tokens.to(device),
                       block_pos.to(device), mask.to(device))
        loss, weight, tau = dflash_loss(logits, targets.to(device), B, gamma)
        if not torch.isfinite(loss):
            sys.exit("torch_drafter.py: loss %s at step %d (batch %d)" % (loss.item(), step, batch_id))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm
                                                   if args.max_grad_norm > 0 else float("inf"))
        optimizer.step()
        scheduler.step()
        step += 1
        record = {"step": step, "batch_id": batch_id, "loss": loss.item(), "tau": tau.item(),
                  "grad_norm": float(grad_norm), "lr": optimizer.param_groups[0]["lr"],
                  "blocks": len(anchors), "step_ms": 1000 * (time.monotonic() - t0),
                  "epoch": consumer.epoch}
        if log:
            log.write(json.dumps(record) + "\n")
            log.flush()
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            save_checkpoint(args.checkpoint_dir, args.keep_checkpoints, step, model, optimizer,
                            scheduler, config)
        if args.kill_at_step and step == args.kill_at_step and consumer.epoch == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    if step and (not checkpoints(args.checkpoint_dir) or checkpoints(args.checkpoint_dir)[-1][0] != step):
        save_checkpoint(args.checkpoint_dir, args.keep_checkpoints, step, model, optimizer,
                        scheduler, config)
    print("torch_drafter %d: stopped at step %d" % (consumer.index, step), flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
