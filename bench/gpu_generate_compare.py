"""`hsring data generate --gpu` against the CPU path and transformers' `generate`.

Reads the shards `hsring data generate` wrote on the CPU (fp32) and on the GPU (bf16, many
prompts at a time, KV cache), counts the documents whose continuations agree token for
token (and, where they differ, how far they agree), then continues the same prompts with
transformers' greedy `generate` in bf16 on the same GPU, one prompt at a time and in
left-padded batches of 64, and prints tokens/s of each with hsring's ratio over them.

usage: gpu_generate_compare.py --target HF_DIR --cpu DIR --gpu DIR --new-tokens N
                               --gpu-log LOG [--out JSON]
"""
import argparse
import glob
import json
import re
import time

import torch
from transformers import AutoModelForCausalLM

from hsring.shards import read_shard


def documents(folder):
    """(prompt, continuation) per document, in shard order: the mask marks the continuation."""
    out = []
    for path in sorted(glob.glob(folder + "/*.hstok")):
        shard = read_shard(path)
        for d in range(len(shard.offsets) - 1):
            begin, end = int(shard.offsets[d]), int(shard.offsets[d + 1])
            tokens, mask = shard.tokens[begin:end].tolist(), shard.mask[begin:end].tolist()
            cut = mask.index(True) if True in mask else len(tokens)
            out.append((tokens[:cut], tokens[cut:]))
    return out


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--cpu", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--gpu-log", required=True, help="hsring data generate --gpu's output")
    ap.add_argument("--out")
    args = ap.parse_args()
    cpu, gpu = documents(args.cpu), documents(args.gpu)
    assert [p for p, _ in cpu] == [p for p, _ in gpu], "the two runs' prompts differ"
    same = sum(c == g for (_, c), (_, g) in zip(cpu, gpu))
    prefixes = [common_prefix(c, g) for (_, c), (_, g) in zip(cpu, gpu)]
    with open(args.gpu_log) as f:
        seconds = float(re.findall(r"generate: \d+/\d+ documents, ([0-9.]+) s", f.read())[-1])
    tokens = sum(len(g) for _, g in gpu)

    device = torch.device("cuda:0")
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).to(device)
    model.eval()
    prompts = [p for p, _ in gpu]

    def one_by_one():
        out = []
        for p in prompts:
            ids = torch.tensor([p], device=device)
            g = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False,
                               pad_token_id=0)
            out.append(g[0, len(p):].tolist())
        return out

    def batched(size=64):
        for start in range(0, len(prompts), size):
            chunk = prompts[start:start + size]
            longest = max(len(p) for p in chunk)
            ids = torch.tensor([[0] * (longest - len(p)) + p for p in chunk], device=device)
            mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in chunk],
                                device=device)
            model.generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                           do_sample=False, pad_token_id=0)

    timings = {}
    with torch.inference_mode():
        one_by_one()  # warm-up
        for name, fn in (("generate_one_by_one", one_by_one), ("generate_batched_64", batched)):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            timings[name] = time.perf_counter() - start
    result = {
        "documents": len(gpu),
        "documents_equal_to_cpu": same,
        "mean_common_prefix_with_cpu": sum(prefixes) / max(1, len(prefixes)),
        "hsring_gpu_tokens_per_s": tokens / seconds,
    }
    for name, t in timings.items():
        result[name + "_tokens_per_s"] = len(prompts) * args.new_tokens / t
        result["hsring_over_" + name] = (len(prompts) * args.new_tokens / t) and \
            (tokens / seconds) / (len(prompts) * args.new_tokens / t)
    for k, v in result.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
