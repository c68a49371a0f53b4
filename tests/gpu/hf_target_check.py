#!/usr/bin/env python3
"""examples/hf_target.py on a GPU with a small random-weight Qwen3 built by transformers
(bf16), through `hsring run --target-cmd`, in three runs:

  check    a checking consumer (this script with --consume, as the drafter command)
           recomputes every batch with the same HF model on the same device and compares
           each captured layer of the slot with hidden_states[i + 1], bit for bit in bf16,
           and the labels with the greedy argmax of the logits
  cpp      hsring's C++ drafter (the GPU drafter with --device cuda:N, the CPU one with cpu)
  torch    examples/torch_drafter.py

Each run must end with 0 torn, 0 lost and 0 duplicated batches; the training runs with a
finite loss. Without a CUDA device it prints why and exits 0 (skipped); --device cpu runs
the same on the CPU (what CI machines can check):

    python3 tests/gpu/hf_target_check.py --bin BIN_DIR --out OUT_DIR [--device cuda:0]

Exit status: 0 passed or skipped, 1 a check failed. OUT_DIR keeps the logs and summaries.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, os.path.join(ROOT, "python"))

# hsring's layer id i is HF's hidden_states[i + 1]; the last layer (3 of 4) is left out, as
# hsring captures it before the final norm and HF after (test_examples.py covers that).
LAYERS = (0, 1, 2)
BATCHES = 6


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.environ.get("HSRING_BIN_DIR", ""),
                   help="the folder of hsring and libhsring.so")
    p.add_argument("--out", default="/tmp/hsring-hf-target-check")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--runs", default="check,cpp,torch")
    p.add_argument("--batches", type=int, default=BATCHES)
    # The checking consumer (the drafter command of the first run).
    p.add_argument("--consume", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--report", help=argparse.SUPPRESS)
    return p.parse_args()


def build_qwen3(folder):
    """A 4-layer Qwen3 with random bf16 weights over the byte vocabulary of hsring's
    built-in corpus, in head and hidden sizes that hsring's CUDA kernels take."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=256, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=1024, tie_word_embeddings=False,
                         rms_norm_eps=1e-6, rope_theta=10000.0)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():  # larger weights than the 0.02 init, so the layers differ clearly
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    model.to(torch.bfloat16).save_pretrained(folder)


def consume(args):
    """The drafter command of the check run: every batch recomputed and compared."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    import hsring

    device = torch.device(args.device)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").to(device).eval()
    report = {"batches": 0, "documents": 0, "layer_rows": 0, "mismatches": [],
              "label_agreement": []}
    consumer = hsring.Consumer.from_env()
    if consumer.shape.dtype != "bf16" or consumer.shape.layer_ids != LAYERS:
        report["mismatches"].append("ring is %s with layers %s" % (consumer.shape.dtype,
                                                                  consumer.shape.layer_ids))
    for batch in consumer:
        offsets = batch.doc_offsets
        for d in range(batch.num_docs):
            s, e = int(offsets[d]), int(offsets[d + 1])
            where = "batch %d doc %d [%d, %d)" % (batch.batch_id, d, s, e)
            if list(batch.positions[s:e]) != list(range(e - s)):
                report["mismatches"].append(where + ": positions do not restart at 0")
            ids = torch.from_numpy(batch.input_ids[s:e].astype(np.int64)).to(device)[None]
            pos = torch.from_numpy(batch.positions[s:e].astype(np.int64)).to(device)[None]
            with torch.inference_mode():  # the document alone, as the target runs it
                out = model(input_ids=ids, position_ids=pos, output_hidden_states=True,
                            use_cache=False)
            for k, i in enumerate(LAYERS):
                expected = out.hidden_states[i + 1][0].to(torch.bfloat16)
                bits = expected.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
                got = np.ascontiguousarray(batch.layers[k][s:e])  # bf16 bits (uint16)
                if got.shape != bits.shape or not np.array_equal(got, bits):
                    differ = int((got != bits).sum()) if got.shape == bits.shape else -1
                    report["mismatches"].append("%s layer %d (hidden_states[%d]): %d of %d "
                                                "elements differ" % (where, i, i + 1, differ,
                                                                     bits.size))
                report["layer_rows"] += e - s
            greedy = out.logits[0].argmax(-1).cpu().numpy()
            report["label_agreement"].append(float((batch.labels[s:e] == greedy).mean()))
            report["documents"] += 1
        report["batches"] += 1
        batch.release()
        with open(args.report + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(args.report + ".tmp", args.report)
    consumer.close()


def hsring_run(args, name, model, drafters, target_cmd, drafter_cmd=None, extra=()):
    """One `hsring run`; returns (ok, why, summary)."""
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    summary = os.path.join(out, "summary.json")
    gpu = args.device.startswith("cuda")
    index = args.device.split(":")[1] if ":" in args.device else "0"
    argv = [os.path.join(args.bin, "hsring"), "run", "--ring",
            "hsring-hfcheck-%s-%d-%s" % (name, os.getpid(), uuid.uuid4().hex[:6]),
            "--model", model, "--quiet", "--targets", index if gpu else "cpu:1",
            "--drafters", drafters, "--layers", ",".join(map(str, LAYERS)), "--dtype", "bf16",
            "--max-tokens", "256", "--slots", "4", "--hs-min-ready", "1",
            "--batches", str(args.batches), "--run-dir", os.path.join(out, "run"),
            "--summary-json", summary, "--log-dir", os.path.join(out, "logs"),
            "--target-cmd", target_cmd] + list(extra)
    if drafter_cmd:
        argv += ["--drafter-cmd", drafter_cmd]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=540)
    with open(os.path.join(out, "hsring.log"), "w") as f:
        f.write(" ".join(argv) + "\n" + done.stdout + done.stderr)
    if not os.path.exists(summary):
        return False, "exit %d, no summary: %s" % (done.returncode, done.stderr[-2000:]), None
    result = json.load(open(summary))
    counts = {k: result.get(k) for k in ("batches_consumed", "batches_torn", "batches_lost",
                                         "batches_duplicated")}
    ok = (done.returncode == 0 and counts["batches_torn"] == 0 and counts["batches_lost"] == 0
          and counts["batches_duplicated"] == 0 and counts["batches_consumed"] >= args.batches)
    why = "exit %d, %s" % (done.returncode, counts)
    return ok, why, result


def main():
    args = parse_args()
    if args.consume:
        return consume(args)
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print("hf_target_check: SKIPPED: %s" % e)
        return 0
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("hf_target_check: SKIPPED: no CUDA device (torch.cuda.is_available() is False); "
              "--device cpu runs the CPU variant")
        return 0
    if not os.path.exists(os.path.join(args.bin, "hsring")):
        print("hf_target_check: no hsring in --bin %r" % args.bin)
        return 1
    os.environ.setdefault("HSRING_BIN_DIR", args.bin)
    os.environ.setdefault("HSRING_LIB", os.path.join(args.bin, "libhsring.so"))
    os.environ["PYTHONPATH"] = os.path.join(ROOT, "python") + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    # cuBLAS picks the same kernels in the target and in the checker: identical bits.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    model = os.path.join(args.out, "qwen3-random")
    build_qwen3(model)
    gpu = args.device.startswith("cuda")
    py = sys.executable
    # In the worker's view its GPU is cuda:0 (CUDA_VISIBLE_DEVICES names one).
    worker_device = "cuda:0" if gpu else "cpu"
    target = "exec %s %s --device %s --torch-dtype bfloat16%s" % (
        py, os.path.join(EXAMPLES, "hf_target.py"), worker_device, "" if gpu else " --threads 1")
    failures = []
    runs = args.runs.split(",")
    if "check" in runs:
        report = os.path.join(args.out, "check-report.json")
        checker = "exec %s %s --consume --model %s --device %s --report %s" % (
            py, os.path.abspath(__file__), model, worker_device, report)
        ok, why, _ = hsring_run(args, "check", model, args.device.split(":")[-1] if gpu else
                                "cpu:1", target, checker)
        rep = json.load(open(report)) if os.path.exists(report) else None
        if rep is None:
            ok, why = False, why + "; the checker wrote no report"
        else:
            if rep["mismatches"]:
                ok = False
                why += "; %d mismatch(es), first: %s" % (len(rep["mismatches"]),
                                                         rep["mismatches"][:3])
            # Every batch, and every layer row of every document, compared.
            if rep["batches"] < args.batches or rep["layer_rows"] == 0:
                ok = False
                why += "; only %d batches checked" % rep["batches"]
            agreement = min(rep["label_agreement"] or [0.0])
            if agreement < 0.99:  # bit-equal logits: the same argmax, ties aside
                ok = False
                why += "; labels agree with the greedy argmax on only %.3f" % agreement
            why += "; checked %d batches, %d documents, %d layer rows bit for bit" % (
                rep["batches"], rep["documents"], rep["layer_rows"])
        print("== check (hidden_states[i + 1] bit for bit, bf16, %s): %s: %s"
              % (args.device, "ok" if ok else "FAILED", why), flush=True)
        if not ok:
            failures.append("check")
    if "cpp" in runs:
        drafters = args.device.split(":")[-1] if gpu else "cpu:1"
        ok, why, result = hsring_run(args, "cpp", model, drafters, target,
                                     extra=("--objective", "dflash"))
        if result is not None and not (result.get("steps", 0) >= args.batches and
                                       result.get("final_loss") is not None):
            ok, why = False, why + "; steps %s, final loss %s" % (result.get("steps"),
                                                                 result.get("final_loss"))
        elif result is not None:
            why += "; %d steps, final loss %.4f" % (result["steps"], result["final_loss"])
        print("== cpp (hsring's %s DFlash drafter): %s: %s"
              % ("GPU" if gpu else "CPU", "ok" if ok else "FAILED", why), flush=True)
        if not ok:
            failures.append("cpp")
    if "torch" in runs:
        out = os.path.join(args.out, "torch")
        steps = os.path.join(out, "steps.jsonl")
        drafter = ("exec %s %s --device %s --checkpoint-dir %s --checkpoint-every 0 "
                   "--log-json %s --warmup-steps 2%s" % (
                       py, os.path.join(EXAMPLES, "torch_drafter.py"), worker_device,
                       os.path.join(out, "ckpt"), steps, "" if gpu else " --threads 1"))
        drafters = args.device.split(":")[-1] if gpu else "cpu:1"
        ok, why, _ = hsring_run(args, "torch", model, drafters, target, drafter)
        losses = []
        if os.path.exists(steps):
            losses = [json.loads(line)["loss"] for line in open(steps) if line.strip()]
        finite = bool(losses) and all(x == x and abs(x) != float("inf") for x in losses)
        if not finite:
            ok = False
        why += "; %d steps, losses finite: %s" % (len(losses), finite)
        print("== torch (examples/torch_drafter.py on %s): %s: %s"
              % (worker_device, "ok" if ok else "FAILED", why), flush=True)
        if not ok:
            failures.append("torch")
    print("hf_target_check: %s" % ("FAILED: " + ", ".join(failures) if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
