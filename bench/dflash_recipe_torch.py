#!/usr/bin/env python3
"""An independent PyTorch implementation of the published DFlash training recipe, for
bench/drafter_quality.sh: it trains the reference `dflash.model.DFlashDraftModel` (PyPI
dflash 0.1.0) on the same target, data and batches as `hsring run`, and writes the result as
a DFlash export folder that `hsring eval --drafter DIR` measures.

What is the same as hsring's default job, so the comparison isolates the implementation:
  - the target: a Hugging Face folder (`hsring model builtin`), run with transformers in
    fp32; its hidden states at hsring's default layer ids (layer id i = HF
    hidden_states[i + 1]), rounded to bf16 as the ring carries them (--dtype bf16);
  - the data: hsring's token shards (`hsring data builtin`) and its batch plan, ported from
    data/batch_index.cc: documents cut into pieces of at most --max-tokens, one seeded
    shuffle, best-fit-decreasing packing, a seeded order per epoch. Step i trains on batch
    id i, a packed batch of documents whose attention stays inside each document, as the
    targets publish it (the order `hsring run --deterministic` is expected to consume);
  - the initial weights: hsring's init (train/drafter_params.cc: SplitMix64 per tensor name,
    uniform +-1/sqrt(fan_in), norms 1) from --train-seed, bit for bit;
  - the optimizer: hsring's AdamW values and schedule (--optimizer hsring, the default), or
    SpecForge's defaults (--optimizer specforge);
  - the shape: hsring's defaults (block 16, gamma 7, mask token = last vocabulary row, draft
    layers 5 or 1 below width 1024, T/32 anchors per batch).

What is the published recipe's (SpecForge specforge/algorithms/common/dflash_family_model.py,
OnlineDFlashModel; written from its description, no code copied):
  - anchors drawn uniformly among rows p whose token and next token are both trained
    (loss mask), the next one in the same document; a block may run past its document's
    end, where its labels are masked;
  - the block is the anchor token then mask tokens, embedded with the target's frozen
    embedding; it attends to its document's context strictly before the anchor and to its
    own B rows bidirectionally; block position k sits at position anchor + k;
  - position k (1..B-1) is scored against the data token at anchor + k, weighted by
    exp(-(k-1)/gamma) times the loss mask there; loss = weighted CE sum / weight sum;
    logits through the target's frozen LM head.
--anchor-rule hsring swaps in hsring's rule of today (train/dflash_blocks.h, anchor_fits)
for an ablation.

Prints one JSON line per --log-every steps and a final summary line starting with
"summary " (JSON), for the benchmark to parse.
"""

import argparse
import bisect
import glob
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
IGNORE = -100


# --------------------------------------------------------------------------------------
# hsring's generators (common/random.h), so the batch plan and the init match bit for bit.
# --------------------------------------------------------------------------------------

def splitmix64_next(state):
    """SplitMix64: returns (new_state, value)."""
    state = (state + GOLDEN) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def mix64(value):
    return splitmix64_next(value & MASK64)[1]


def splitmix64_stream(state, count):
    """The next `count` SplitMix64 outputs from `state`, vectorised: the i-th call sees
    state + (i + 1) * GOLDEN, so numpy's wrapping uint64 arithmetic gives them all at once."""
    with np.errstate(over="ignore"):
        i = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(state) + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def fnv1a(text):
    h = 0xCBF29CE484222325
    for c in text.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return h


# --------------------------------------------------------------------------------------
# Token shards (docs/data-format.md) and the batch plan (data/batch_index.cc).
# --------------------------------------------------------------------------------------

class Shard:
    """One *.hstok file: tokens, document offsets and the loss mask (all ones without one)."""

    def __init__(self, path):
        raw = open(path, "rb").read()
        if raw[:8] != b"HSRTOKNS":
            raise ValueError(f"{path}: not a token shard")
        version, header, width, vocab, count, docs = struct.unpack_from("<IIIIQQ", raw, 8)
        flags = struct.unpack_from("<I", raw, 48)[0] if version == 2 else 0
        dtype = {1: "<u1", 2: "<u2", 4: "<u4"}[width]
        self.tokens = np.frombuffer(raw, dtype=dtype, count=count, offset=header).astype(np.int64)
        at = header + count * width
        self.offsets = np.frombuffer(raw, dtype="<u8", count=docs + 1, offset=at).astype(np.int64)
        at += (docs + 1) * 8
        if flags & 1:
            bits = np.frombuffer(raw, dtype=np.uint8, count=(count + 7) // 8, offset=at)
            self.mask = np.unpackbits(bits, bitorder="little")[:count].astype(bool)
        else:
            self.mask = np.ones(count, dtype=bool)
        self.vocab = vocab


def read_corpus(folder):
    paths = sorted(glob.glob(os.path.join(folder, "*.hstok")))  # file-name order is the plan's
    if not paths:
        raise SystemExit(f"{folder}: no *.hstok shard")
    return [Shard(p) for p in paths]


def permute_index(index, n, key):
    """data/permutation.h: a 4-round Feistel bijection of [0, n), cycle-walked into range."""
    if n <= 1:
        return 0
    bits = max(2, (n - 1).bit_length())
    bits += bits & 1
    half = bits // 2
    mask = (1 << half) - 1
    x = index
    while True:
        left, right = x >> half, x & mask
        for rnd in range(4):
            f = mix64(right ^ mix64(key + rnd)) & mask
            left, right = right, left ^ f
        x = (left << half) | right
        if x < n:
            return x


class BatchPlan:
    """Which pieces (shard, begin, length) make batch id X, as hsring's BatchIndex."""

    SHUFFLE_SALT = 0x5049454345530001
    EPOCH_SALT = 0x45504F4348000001

    def __init__(self, shards, max_tokens, seed, window=4096):
        self.seed = seed
        pieces = []
        for s, shard in enumerate(shards):
            off = shard.offsets
            for d in range(len(off) - 1):
                for b in range(int(off[d]), int(off[d + 1]), max_tokens):
                    pieces.append((s, b, min(max_tokens, int(off[d + 1]) - b)))
        rng = mix64(seed ^ self.SHUFFLE_SALT)
        for i in range(len(pieces) - 1, 0, -1):
            rng, z = splitmix64_next(rng)
            j = z % (i + 1)
            pieces[i], pieces[j] = pieces[j], pieces[i]
        self.batches = []
        for w in range(0, len(pieces), window):
            order = sorted(range(w, min(len(pieces), w + window)), key=lambda p: -pieces[p][2])
            # Best-fit decreasing. std::multimap<left, batch>: lower_bound finds the smallest
            # room >= length, the earliest inserted among equals; a sequence number keeps that.
            room, batches, seq = [], [], 0
            for p in order:
                length = pieces[p][2]
                k = bisect.bisect_left(room, (length, -1, -1))
                if k == len(room):
                    batch, left = len(batches), max_tokens - length
                    batches.append([])
                else:
                    fit_left, _, batch = room.pop(k)
                    left = fit_left - length
                batches[batch].append(p)
                if left > 0:
                    bisect.insort(room, (left, seq, batch))
                    seq += 1
            for batch in batches:
                self.batches.append([pieces[p] for p in sorted(batch)])

    def batch(self, batch_id):
        n = len(self.batches)
        epoch, position = divmod(batch_id, n)
        key = mix64(self.seed ^ mix64(epoch ^ self.EPOCH_SALT))
        return self.batches[permute_index(position, n, key)]


# --------------------------------------------------------------------------------------
# The target's hidden states, once per piece (the targets see only the piece).
# --------------------------------------------------------------------------------------

def default_capture_layers(num_layers, k):
    """model/model_config.cc default_capture_layers: never the last layer unless all."""
    below_last = num_layers - 2 if num_layers > 1 else 0
    if k == 1:
        return [min(num_layers // 2, below_last)]
    first, last = 1, num_layers - 3
    if last - first + 1 < k:
        first = 0
        last = below_last if k < num_layers else num_layers - 1
    span, steps = last - first, k - 1
    ids = []
    for i in range(k):
        q, rem2 = divmod(i * span, steps)
        rem2 *= 2
        if rem2 > steps or (rem2 == steps and ((first + q) & 1)):
            q += 1
        ids.append(first + q)
    return ids


def piece_features(target, shards, pieces, layer_ids, cache_path):
    """{(shard, begin, length): bf16 [length, K*H]} for every piece, cached on disk."""
    if cache_path and os.path.exists(cache_path):
        cached = torch.load(cache_path)
        if all(p in cached for p in pieces):
            return cached
    out = {}
    with torch.inference_mode():
        for p in pieces:
            s, b, n = p
            ids = torch.from_numpy(shards[s].tokens[b:b + n])[None]
            hs = target(ids, output_hidden_states=True).hidden_states
            # The ring carries bf16 hidden states by default: the drafter reads those.
            out[p] = torch.cat([hs[i + 1][0] for i in layer_ids], -1).to(torch.bfloat16)
    if cache_path:
        torch.save(out, cache_path + ".tmp")
        os.replace(cache_path + ".tmp", cache_path)
    return out


# --------------------------------------------------------------------------------------
# Anchors, blocks and the objective.
# --------------------------------------------------------------------------------------

def assemble(shards, pieces, features):
    """The packed batch: tokens, positions, doc_offsets, trained (the loss mask, never a
    document's first token), features [T, K*H] as float."""
    tokens, trained, offsets, feats = [], [], [0], []
    for s, b, n in pieces:
        tokens.append(shards[s].tokens[b:b + n])
        m = shards[s].mask[b:b + n].copy()
        m[0] = False  # nothing precedes a piece's first token (docs/data-format.md)
        trained.append(m)
        offsets.append(offsets[-1] + n)
        feats.append(features[(s, b, n)])
    positions = np.concatenate([np.arange(n) for _, _, n in pieces])
    return (np.concatenate(tokens), positions, offsets, np.concatenate(trained),
            torch.cat(feats).float())


def anchor_candidates(offsets, trained, block, rule):
    doc_end = np.empty(offsets[-1], dtype=np.int64)
    doc_start = np.empty(offsets[-1], dtype=np.int64)
    for d in range(len(offsets) - 1):
        doc_start[offsets[d]:offsets[d + 1]] = offsets[d]
        doc_end[offsets[d]:offsets[d + 1]] = offsets[d + 1]
    rows = np.arange(offsets[-1])
    if rule == "specforge":
        # The anchor and the token after it are trained, the latter in the same document.
        nxt = np.zeros_like(trained)
        nxt[:-1] = trained[1:]
        ok = trained & nxt & (rows + 1 < doc_end)
    else:
        # hsring today: a context row before, the whole block inside the document, and one
        # counted label among the block's scored positions (tokens a+1 .. a+B-1 trained).
        ok = (doc_start < rows) & (rows + block - 1 < doc_end)
        cum = np.concatenate([[0], np.cumsum(trained)])
        first, last = np.minimum(rows + 1, len(trained)), np.minimum(rows + block, len(trained))
        ok &= (cum[last] - cum[first]) > 0
    return rows[ok], doc_start, doc_end


def sample_anchors(candidates, count, seed):
    """train/dflash_blocks.cc sample_anchors: `count` of the ascending candidates by a partial
    Fisher-Yates on SplitMix64 (all of them when there are no more), ascending."""
    pool = [int(c) for c in candidates]
    if count >= len(pool):
        return np.asarray(pool, dtype=np.int64)
    state = mix64(seed ^ 0xA2C402A2C402)
    for i in range(count):
        state, z = splitmix64_next(state)
        j = i + z % (len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return np.sort(np.asarray(pool[:count], dtype=np.int64))


def build_blocks(tokens, positions, trained, anchors, doc_start, doc_end, block, mask_id, gamma):
    """Per block row: input token, position, label (IGNORE where unscored), weight; and the
    [rows, T + rows] attention mask (True = may attend)."""
    nb, T = len(anchors), len(tokens)
    j = np.arange(block)
    rows = anchors[:, None] + j[None, :]                       # the data row each position stands for
    in_doc = rows < doc_end[anchors][:, None]
    safe = np.minimum(rows, T - 1)
    scored = (j[None, :] >= 1) & in_doc & trained[safe]
    labels = np.where(scored, tokens[safe], IGNORE)
    weights = np.exp(-(np.maximum(j, 1) - 1) / gamma)[None, :] * scored
    inputs = np.full((nb, block), mask_id, dtype=np.int64)
    inputs[:, 0] = tokens[anchors]
    pos = positions[anchors][:, None] + j[None, :]
    # Context keys: the anchor's own document, strictly before the anchor.
    key = np.arange(T)[None, :]
    ctx = (key >= doc_start[anchors][:, None]) & (key < anchors[:, None])   # [nb, T]
    ctx = np.repeat(ctx, block, axis=0)
    own = np.kron(np.eye(nb, dtype=bool), np.ones((block, block), dtype=bool))
    attend = np.concatenate([ctx, own], axis=1)
    return (torch.from_numpy(inputs.reshape(-1)), torch.from_numpy(pos.reshape(-1)),
            torch.from_numpy(labels.reshape(-1)), torch.from_numpy(weights.reshape(-1)).float(),
            torch.from_numpy(attend))


def teacher_forced_tau(logits, labels, block):
    """1 + mean accepted prefix per block (stops at the first miss or unscored position)."""
    pred = logits.argmax(-1).view(-1, block)[:, 1:]
    lab = labels.view(-1, block)[:, 1:]
    ok = (pred == lab) & (lab >= 0)
    return 1.0 + ok.long().cumprod(1).sum(1).float().mean().item()


# --------------------------------------------------------------------------------------
# Model, init, optimizer, export.
# --------------------------------------------------------------------------------------

def export_config(target_cfg, layer_ids, draft_layers, block, mask_id):
    """config.json as hsring writes it (docs/dflash-export.md)."""
    head_dim = getattr(target_cfg, "head_dim", None) or \
        target_cfg.hidden_size // target_cfg.num_attention_heads
    theta = getattr(target_cfg, "rope_theta", None)
    if theta is None:
        theta = (getattr(target_cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target_cfg.hidden_size,
        "vocab_size": target_cfg.vocab_size,
        "num_hidden_layers": draft_layers,
        "num_target_layers": target_cfg.num_hidden_layers,
        "num_attention_heads": target_cfg.num_attention_heads,
        "num_key_value_heads": target_cfg.num_key_value_heads,
        "head_dim": head_dim,
        "intermediate_size": target_cfg.intermediate_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": target_cfg.rms_norm_eps,
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "max_position_embeddings": 40960,
        "block_size": block,
        "is_causal": False,
        "use_sliding_window": False,
        "layer_types": ["full_attention"] * draft_layers,
        "dflash_config": {"target_layer_ids": list(layer_ids), "mask_token_id": mask_id,
                          "block_size": block},
        "tie_word_embeddings": False,
        "use_cache": False,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }


def export_names(draft_layers):
    """The tensors of hsring's export, in its layout order (dflash_param_layout)."""
    names = ["fc.weight", "hidden_norm.weight"]
    for i in range(draft_layers):
        p = f"layers.{i}."
        names += [p + n for n in (
            "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
            "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
            "self_attn.k_norm.weight", "post_attention_layernorm.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")]
    return names + ["norm.weight"]


def hsring_init(model, names, seed):
    """train/drafter_params.cc init_param_tensor: norms 1; a [out, in] weight uniform in
    +-1/sqrt(in) from SplitMix64 seeded by mix64(seed ^ fnv1a(name)), 24-bit exact floats."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in names:
            p = params[name]
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            z = splitmix64_stream(mix64(seed ^ fnv1a(name)), p.numel())
            unit = ((z >> np.uint64(40)).astype(np.int64) - (1 << 23)).astype(np.float32) \
                / np.float32(1 << 23)
            bound = np.float32(1.0) / np.sqrt(np.float32(p.shape[1]))
            p.copy_(torch.from_numpy((bound * unit).astype(np.float32)).view_as(p))


def write_export(model, names, config, folder):
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    params = dict(model.named_parameters())
    tensors = {n: params[n].detach().to(torch.bfloat16).contiguous() for n in names}
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


OPTIMIZERS = {
    # hsring's defaults (train/optimizer.h, launcher/run_options.h): cosine from the peak to
    # min_lr at the last step, after a linear warmup of min(20, steps).
    "hsring": dict(lr=1e-3, min_lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01,
                   clip=1.0, warmup=lambda steps: min(20, steps)),
    # SpecForge's defaults (specforge/config/schema.py TrainingConfig, specforge/optimizer.py
    # BF16Optimizer, specforge/lr_scheduler.py): torch AdamW's betas and eps, no weight decay,
    # clip 0.5, warmup_ratio 0.015, cosine to 0.
    "specforge": dict(lr=1e-4, min_lr=0.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                      clip=0.5, warmup=lambda steps: int(0.015 * steps)),
    # What SpecForge's own DFlash recipes set over those defaults
    # (examples/configs/qwen3-8b-dflash-online.yaml: learning_rate 6e-4, max_grad_norm 1.0,
    # warmup_ratio 0.04).
    "specforge-example": dict(lr=6e-4, min_lr=0.0, betas=(0.9, 0.999), eps=1e-8,
                              weight_decay=0.0, clip=1.0, warmup=lambda steps: int(0.04 * steps)),
}


def lr_factor(step, peak, low, warmup, total):
    """hsring's LrSchedule::lr / peak (SpecForge's warmup + CosineAnnealingLR is the same
    formula with low = 0)."""
    if step < warmup:
        return (step + 1) / warmup
    if step >= total:
        return low / peak
    progress = (step - warmup) / (total - warmup)
    return (low + (peak - low) * 0.5 * (1 + math.cos(math.pi * progress))) / peak


def run(cmd):
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hsring", default="build/bin/hsring",
                    help="the binary that names the built-in target and data folders")
    ap.add_argument("--target", default="", help="HF target folder (default: hsring model builtin)")
    ap.add_argument("--data", default="", help="token shards (default: hsring data builtin)")
    ap.add_argument("--out", required=True, help="export folder to write")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--train-seed", type=int, default=0, help="init and anchors")
    ap.add_argument("--data-seed", type=int, default=0, help="batch plan (hsring --data-seed)")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--anchors", type=int, default=0, help="per batch; 0: 512 per 16384 tokens")
    ap.add_argument("--loss-gamma", type=float, default=0, help="0: 7 at B 16, in proportion")
    ap.add_argument("--draft-layers", type=int, default=0, help="0: 5, or 1 below width 1024")
    ap.add_argument("--layers", default="", help="target layer ids (default: hsring's rule)")
    ap.add_argument("--mask-token-id", type=int, default=-1, help="-1: the last vocabulary row")
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="hsring")
    ap.add_argument("--lr", type=float, default=0, help="override the optimizer's peak lr")
    ap.add_argument("--anchor-rule", choices=["specforge", "hsring"], default="specforge")
    ap.add_argument("--anchors-per-sequence", type=int, default=0,
                    help="SpecForge's count instead of --anchors: up to N in each document "
                         "(its num_anchors, 512, per batch row); 0: --anchors per batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default="", help="folder for the hidden-state cache")
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    started = time.time()
    from transformers import AutoModelForCausalLM
    from dflash.model import DFlashDraftModel
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Config

    target_dir = args.target or run([args.hsring, "model", "builtin"]).splitlines()[-1]
    data_dir = args.data or run([args.hsring, "data", "builtin"]).splitlines()[-1]
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tcfg = target.config

    shards = read_corpus(data_dir)
    plan = BatchPlan(shards, args.max_tokens, args.data_seed)
    L = tcfg.num_hidden_layers
    layer_ids = [int(x) for x in args.layers.split(",")] if args.layers else \
        default_capture_layers(L, min(5, max(L, 2) - 1))
    draft_layers = args.draft_layers or (5 if tcfg.hidden_size >= 1024 else 1)
    B = args.block_size
    gamma = args.loss_gamma or 7.0 * B / 16
    mask_id = args.mask_token_id if args.mask_token_id >= 0 else tcfg.vocab_size - 1

    # Hidden states of every piece the run will read, computed once (they depend on the
    # target and the data only) and cached across seeds.
    used = sorted({p for i in range(args.steps) for p in plan.batch(i)})
    cache_path = ""
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
        key = hashlib.sha1(json.dumps([os.path.realpath(target_dir), os.path.realpath(data_dir),
                                       layer_ids, args.max_tokens]).encode()).hexdigest()[:16]
        cache_path = os.path.join(args.cache, f"features-{key}.pt")
    t0 = time.time()
    features = piece_features(target, shards, used, layer_ids, cache_path)
    feature_s = time.time() - t0

    config = export_config(tcfg, layer_ids, draft_layers, B, mask_id)
    model = DFlashDraftModel(Qwen3Config(**config)).float().train()
    names = export_names(draft_layers)
    trainable = {n for n, _ in model.named_parameters()}
    if trainable != set(names):
        raise SystemExit(f"DFlashDraftModel's parameters {sorted(trainable)} are not the export's")
    hsring_init(model, names, args.train_seed)
    embed = target.get_input_embeddings().weight   # frozen, the target's own
    head = target.lm_head if getattr(target, "lm_head", None) is not None else \
        target.get_output_embeddings()

    o = OPTIMIZERS[args.optimizer]
    peak = args.lr or o["lr"]
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in names if params[n].dim() > 1],
               "weight_decay": o["weight_decay"]},
              {"params": [params[n] for n in names if params[n].dim() == 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=peak, betas=o["betas"], eps=o["eps"])
    warmup = o["warmup"](args.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, peak, min(o["min_lr"], peak), warmup, args.steps))

    log = {"loss": 0.0, "tau": 0.0, "n": 0}
    t_train = time.time()
    first_loss = None
    for step in range(args.steps):
        tokens, positions, offsets, trained, feats = assemble(shards, plan.batch(step), features)
        T = len(tokens)
        count = args.anchors or max(1, T * 512 // 16384)
        cands, doc_start, doc_end = anchor_candidates(offsets, trained, B, args.anchor_rule)
        if len(cands) == 0:
            continue
        # Uniform without replacement, drawn as hsring draws (so --anchor-rule hsring gives
        # hsring's very blocks), a pure function of (train seed, step).
        seed = mix64(args.train_seed ^ mix64(step + 0x5DF1A5))
        if args.anchors_per_sequence:
            # SpecForge's count: up to N anchors in each sequence (a batch row there).
            doc = np.searchsorted(offsets, cands, side="right") - 1
            anchors = np.concatenate([
                sample_anchors(cands[doc == d], args.anchors_per_sequence, mix64(seed ^ d))
                for d in range(len(offsets) - 1)])
        else:
            anchors = sample_anchors(cands, count, seed)
        inputs, pos, labels, weights, attend = build_blocks(
            tokens, positions, trained, anchors, doc_start, doc_end, B, mask_id, gamma)
        position_ids = torch.cat([torch.from_numpy(positions), pos])[None]
        hidden = model(position_ids=position_ids, attention_mask=attend[None, None],
                       noise_embedding=F.embedding(inputs, embed)[None],
                       target_hidden=feats[None])[0]
        logits = model.compute_logits(hidden, head)
        ce = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
        loss = (ce * weights).sum() / weights.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
        opt.step()
        sched.step()
        first_loss = loss.item() if first_loss is None else first_loss
        log["loss"] += loss.item()
        log["tau"] += teacher_forced_tau(logits.detach(), labels, B)
        log["n"] += 1
        if args.log_every and ((step + 1) % args.log_every == 0 or step + 1 == args.steps):
            print(json.dumps({"step": step + 1, "loss": round(log["loss"] / log["n"], 4),
                              "tau_teacher_forced": round(log["tau"] / log["n"], 3),
                              "lr": opt.param_groups[0]["lr"],
                              "s": round(time.time() - t_train, 1)}), flush=True)
            log = {"loss": 0.0, "tau": 0.0, "n": 0}
    train_s = time.time() - t_train

    write_export(model, names, config, args.out)
    summary = {"steps": args.steps, "train_seed": args.train_seed, "data_seed": args.data_seed,
               "optimizer": args.optimizer, "anchor_rule": args.anchor_rule,
               "layer_ids": layer_ids, "draft_layers": draft_layers, "block_size": B,
               "gamma": gamma, "mask_token_id": mask_id, "batches_per_epoch": len(plan.batches),
               "first_loss": first_loss, "feature_s": round(feature_s, 2),
               "train_s": round(train_s, 2), "total_s": round(time.time() - started, 2),
               "threads": args.threads, "export": os.path.abspath(args.out)}
    print("summary " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
