"""`hsring eval --gpu` against what a user would run instead, on the same GPU and prompts.

Reads the JSON report of `hsring eval --gpu ... --json` (its prompts, outputs and
acceptance per step), then decodes the same prompts
  1. with the reference DFlash package's `dflash_generate` (the export loaded by its own
     DFlashDraftModel, the target by transformers, both in bf16, KV caches, one prompt at a
     time as the reference does), and
  2. with transformers' greedy `generate` (the plain decoding a user compares against),
and prints tokens/s of each with their ratios to hsring's, and how many prompts give the
same tokens and the same accepted lengths as hsring.

With --dtype float32 (target and drafter in fp32 on the GPU) the report to compare with is
the CPU path's (`hsring eval --json` without --gpu, fp32 throughout): the tokens and accepted
lengths must then agree prompt for prompt, the numerics no longer differing by bf16 rounding.

usage: gpu_eval_compare.py --target HF_DIR --export EXPORT_DIR --report JSON
                           [--dtype bfloat16|float32] [--out JSON]
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

from dflash.model import DFlashDraftModel, dflash_generate


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--report", required=True, help="hsring eval --gpu --json output")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--out", help="write the comparison as JSON here")
    args = ap.parse_args()
    with open(args.report) as f:
        report = json.load(f)
    prompts = [p["prompt"] for p in report["prompts"]]
    new_tokens = len(report["prompts"][0]["output"])
    device = torch.device("cuda:0")
    dtype = getattr(torch, args.dtype)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(device).eval()
    drafter = DFlashDraftModel.from_pretrained(args.export, dtype=dtype).to(device).eval()

    def reference():
        out = []
        for p in prompts:
            ids = torch.tensor([p], dtype=torch.long, device=device)
            r = dflash_generate(drafter, target, ids, new_tokens, None, return_stats=True)
            out.append((r.output_ids[0, len(p):].tolist(), list(r.acceptance_lengths)))
        return out

    def generate():
        out = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([p], dtype=torch.long, device=device)
                g = target.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                    do_sample=False, eos_token_id=None, pad_token_id=0)
                out.append(g[0, len(p):].tolist())
        return out

    reference()  # warm-up: kernels, allocator
    ref, ref_s = timed(reference)
    gen, gen_s = timed(generate)
    ours = report["prompts"]
    tokens = sum(len(p["output"]) for p in ours)
    same_tokens = sum(r[0] == p["output"] for r, p in zip(ref, ours))
    same_steps = sum(r[1] == p["produced"] for r, p in zip(ref, ours))
    same_greedy = sum(g == p["greedy"] for g, p in zip(gen, ours))
    ref_tau = sum(sum(r[1]) for r in ref) / max(1, sum(len(r[1]) for r in ref))
    result = {
        "dtype": args.dtype,
        "prompts": len(prompts),
        "new_tokens": new_tokens,
        "reference_dflash_tokens_per_s": tokens / ref_s,
        "transformers_generate_tokens_per_s": tokens / gen_s,
        "hsring_tau": report["acceptance_length"],
        "reference_tau": ref_tau,
        "prompts_with_reference_tokens": same_tokens,
        "prompts_with_reference_steps": same_steps,
        "prompts_whose_greedy_is_generate": same_greedy,
    }
    if "speculative_tokens_per_s" in report:  # hsring eval --gpu's timings
        hsring_s = tokens / report["speculative_tokens_per_s"]
        result.update({
            "hsring_speculative_tokens_per_s": report["speculative_tokens_per_s"],
            "hsring_greedy_tokens_per_s": report["greedy_tokens_per_s"],
            "hsring_over_reference": ref_s / hsring_s,
            "hsring_over_generate": gen_s / hsring_s,
        })
    for k, v in result.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
