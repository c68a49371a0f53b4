"""hsring's DFlash export against the reference implementation (docs/dflash-export.md,
"Checked against the reference").

hsring trains a small drafter on the built-in target and writes its export; transformers'
Qwen3ForCausalLM loads the target (fp32, CPU) and the `dflash` package's DFlashDraftModel
loads the export as it is. Checked:
  1. every weight of the export loads (no missing, unexpected or misshapen tensor);
  2. the reference's logits for the first block of the first held-out prompt equal
     `hsring eval --dump-block`'s within bf16-weight, fp32-compute tolerance, and the argmax
     tokens are the same;
  3. the reference's own speculative decoding (dflash.model.dflash_generate, greedy) gives,
     prompt by prompt, the tokens and the tokens per verifying forward of `hsring eval`, so the
     same acceptance length;
  4. the export as the other loaders read it (export_views.py): AutoModel with
     trust_remote_code drafts as the reference, and the mask token, layer ids and block size
     resolve to hsring's under SGLang's and vLLM's config rules.
The target is the built-in one with a byte-level tokenizer written beside it.
Exit 0 on success, 1 on a mismatch (with the numbers).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

import dflash
import dflash.model as dm
from dflash.model import DFlashDraftModel, extract_context_feature

from export_views import check_engine_views, check_remote_code, write_byte_tokenizer


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    start = time.time()
    out = subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, **kw).stdout
    print(f"  ({time.time() - start:.1f} s)", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hsring", required=True)
    ap.add_argument("--work", required=True)
    # The default job's length: its drafter gets most of a block accepted on the built-in
    # data (tau ~3), so the decoding comparison covers deep positions and the cut blocks at
    # the length limit, not only the first draft.
    ap.add_argument("--batches", type=int, default=200)
    # "" : the run's default layers, which never include the target's last decoder layer:
    # HF's hidden_states[L], which the reference reads for layer id L - 1, is after the final
    # norm, while hsring captures that layer's output before it (docs/dflash-export.md,
    # "Checked against the reference"; model/model_config.h, default_capture_layers).
    ap.add_argument("--layers", default="")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"dflash {getattr(dflash, '__version__', '0.1.0')}", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    builtin_dir = run([args.hsring, "model", "builtin"]).strip().splitlines()[-1]
    # The built-in target with a tokenizer, as an HF target has one: the export must then
    # name its mask token by text too (export_views.py).
    target_dir = os.path.join(work, "target")
    shutil.copytree(builtin_dir, target_dir)
    write_byte_tokenizer(target_dir)
    run_dir = os.path.join(work, "run")
    layers = ["--layers", args.layers] if args.layers else []
    run([args.hsring, "run", "--ring", f"hsring-ref-{os.getpid()}", "--run-dir", run_dir,
         "--model", target_dir, "--data", "builtin", "--batches", str(args.batches)] + layers)
    export = os.path.join(run_dir, "export")
    eval_json = os.path.join(work, "eval.json")
    block_json = os.path.join(work, "block.json")
    # 8 prompts: the reference decodes each of them again, in Python on the CPU.
    run([args.hsring, "eval", "--model", target_dir, "--drafter", export, "--json", eval_json,
         "--max-prompts", "8", "--dump-block", block_json])
    with open(eval_json) as f:
        report = json.load(f)
    with open(block_json) as f:
        block = json.load(f)

    failures = []

    # --- Loading: the target with transformers, the drafter with the reference class.
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    drafter, info = DFlashDraftModel.from_pretrained(export, dtype=torch.float32,
                                                     output_loading_info=True)
    drafter.eval()
    print(f"target {type(target).__name__}, drafter {type(drafter).__name__}: "
          f"layer ids {drafter.target_layer_ids}, block {drafter.block_size}, "
          f"mask {drafter.mask_token_id}; loading info {info}", flush=True)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            failures.append(f"loading the export: {key} {info[key]}")
    if list(drafter.target_layer_ids) != block["layer_ids"]:
        failures.append(f"layer ids {drafter.target_layer_ids} != hsring's {block['layer_ids']}")
    if drafter.mask_token_id != block["mask_token_id"] or drafter.block_size != block["block_size"]:
        failures.append("mask token or block size differ")

    # --- 1. One block, as the reference drafts it (no cache: the whole prompt is context).
    B = drafter.block_size
    prompt = torch.tensor([block["prompt"]], dtype=torch.long)
    with torch.inference_mode():
        out = target(prompt, output_hidden_states=True)
        anchor = int(out.logits[0, -1].argmax())
        ctx = extract_context_feature(out.hidden_states, drafter.target_layer_ids)
        s = prompt.shape[1]
        block_ids = torch.full((1, B), drafter.mask_token_id, dtype=torch.long)
        block_ids[0, 0] = anchor
        noise = dm._raw_input_embeddings(target, block_ids)
        hidden = drafter(target_hidden=ctx, noise_embedding=noise,
                         position_ids=torch.arange(s + B)[None])[:, 1:, :]
        logits = drafter.compute_logits(hidden, dm._output_head(target))[0].double()
    ours = torch.tensor(block["logits"], dtype=torch.float64)
    diff = (logits - ours).abs()
    scale = ours.abs().max().item()
    # Both sides compute in fp32 from the same bf16 weights; what differs is summation
    # order (BLAS, threads): ~1e-6 relative (measured 4e-6 on logits of ~7). A bf16 ulp is
    # 2^-8 = 0.4 %; the tolerance is a small fraction of that, and far below a wrong input
    # (the final-norm mix-up of the last layer moved them by 0.15).
    atol, rtol = 2e-4 * max(1.0, scale), 1e-4
    ok = torch.allclose(logits, ours, atol=atol, rtol=rtol)
    ref_drafts = logits.argmax(-1).tolist()
    print(f"block: context {s}, anchor {anchor} (hsring {block['anchor']}), logits max |diff| "
          f"{diff.max().item():.3g} (max |logit| {scale:.3g}, atol {atol:.3g}, rtol {rtol}), "
          f"argmax equal {ref_drafts == block['drafts']}", flush=True)
    if anchor != block["anchor"] or s != block["context_length"]:
        failures.append(f"anchor {anchor} / context {s} != hsring's {block['anchor']} / "
                        f"{block['context_length']}")
    if not ok:
        failures.append(f"block logits differ: max |diff| {diff.max().item():.3g}")
    if ref_drafts != block["drafts"]:
        failures.append(f"block argmax {ref_drafts} != hsring's {block['drafts']}")

    # --- 2. The reference's speculative decoding (greedy, its KV caches), prompt by prompt.
    # Its return_stats timing calls torch.cuda.synchronize; on the CPU time it plainly.
    dm._cuda_time = time.perf_counter
    produced_ref, produced_ours = [], []
    for i, p in enumerate(report["prompts"]):
        ids = torch.tensor([p["prompt"]], dtype=torch.long)
        max_new = len(p["output"])
        r = dm.dflash_generate(drafter, target, ids, max_new_tokens=max_new,
                               stop_token_ids=None, temperature=0.0, return_stats=True)
        tokens = r.output_ids[0, ids.shape[1]:].tolist()
        lengths = [int(x) for x in r.acceptance_lengths]
        produced_ref += lengths
        produced_ours += p["produced"]
        tau_ref = sum(lengths) / len(lengths) if lengths else 0.0
        same = tokens == p["output"] and lengths == p["produced"]
        print(f"prompt {i}: tau reference {tau_ref:.4f}, hsring {p['acceptance_length']:.4f}; "
              f"tokens equal {tokens == p['output']}, per-step lengths equal "
              f"{lengths == p['produced']}", flush=True)
        if not same:
            failures.append(f"prompt {i}: reference lengths {lengths} tokens {tokens}, hsring "
                            f"lengths {p['produced']} tokens {p['output']}")
    tau_ref = sum(produced_ref) / len(produced_ref)
    print(f"acceptance length: reference {tau_ref:.4f}, hsring {report['acceptance_length']:.4f}"
          f" over {len(report['prompts'])} prompts", flush=True)
    if abs(tau_ref - report["acceptance_length"]) > 1e-9:
        failures.append(f"acceptance length {tau_ref} != hsring's {report['acceptance_length']}")

    # --- 3. The other doors: trust_remote_code, and the engines' config parsing.
    failures += check_remote_code(export, target, drafter, block, report)
    failures += check_engine_views(export, target_dir, block)

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("dflash_reference: the reference loads hsring's export and drafts identically")
    return 0


if __name__ == "__main__":
    sys.exit(main())
