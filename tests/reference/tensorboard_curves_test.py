"""The training curves of a real `hsring run`, read back by TensorBoard's own reader.

A short run of the tiny preset writes RUN_DIR/metrics.jsonl and RUN_DIR/tensorboard/
(curves/training_curves.h). TensorBoard's EventAccumulator (the reader behind
`tensorboard --logdir`) must find every scalar at every step metrics.jsonl holds, with the
same values (as float32, TensorBoard's simple_value), and the run's --summary-json must agree
on the step count and the first loss. A --resume of the run then appends: each step once,
in both files. Run by run_tensorboard_curves_test.sh in the reference venv.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

from tensorboard.backend.event_processing import event_accumulator, event_file_loader


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    start = time.time()
    out = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(f"  ({time.time() - start:.1f} s, exit {out.returncode})", flush=True)
    if out.returncode != 0:
        print(out.stdout)
        raise SystemExit(f"FAILED: {cmd[0]} {cmd[1]} exited {out.returncode}")
    return out.stdout


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def jsonl_records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def expected_scalars(records):
    """tag -> [(step, value)] as the writer maps a record's fields to tags."""
    out = {}
    for r in records:
        for key, value in r.items():
            if key in ("step", "wall_time"):
                continue
            if isinstance(value, list):
                for k, v in enumerate(value):
                    out.setdefault(f"{key}/{k + 1:02d}", []).append((r["step"], v))
            else:
                group = "pipeline" if key.endswith("_busy") else "train"
                out.setdefault(f"{group}/{key}", []).append((r["step"], value))
    return out


def check_curves(run_dir, steps, failures):
    records = jsonl_records(run_dir)
    got_steps = [r["step"] for r in records]
    if got_steps != list(range(1, steps + 1)):
        failures.append(f"metrics.jsonl steps {got_steps}, expected 1..{steps} once each")
    for key in ("loss", "acceptance_length", "lr", "grad_norm", "tokens_per_s", "target_busy",
                "drafter_busy", "position_acceptance"):
        missing = [r["step"] for r in records if key not in r]
        if missing:
            failures.append(f"metrics.jsonl: no {key} at steps {missing[:5]}")

    tb_dir = os.path.join(run_dir, "tensorboard")
    files = sorted(f for f in os.listdir(tb_dir) if "tfevents" in f)
    if not files:
        failures.append(f"no event file in {tb_dir}")
        return
    # The lowest level: each file's first event names its version, as TensorBoard's writers do.
    for name in files:
        first = next(iter(event_file_loader.EventFileLoader(os.path.join(tb_dir, name)).Load()))
        if first.file_version != "brain.Event:2":
            failures.append(f"{name}: first event {first}")

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    expected = expected_scalars(records)
    print(f"TensorBoard read {len(tags)} scalar tags from {files}: {sorted(tags)[:8]} ...")
    if tags != set(expected):
        failures.append(f"tags {sorted(tags)} != metrics.jsonl's {sorted(expected)}")
    for tag, points in expected.items():
        if tag not in tags:
            continue
        events = acc.Scalars(tag)
        read = [(e.step, e.value) for e in events]
        want = [(s, f32(v)) for s, v in points]
        if [s for s, _ in read] != [s for s, _ in want]:
            failures.append(f"{tag}: steps {[s for s, _ in read]} != {[s for s, _ in want]}")
        elif any(a != b and not (math.isnan(a) and math.isnan(b))
                 for (_, a), (_, b) in zip(read, want)):
            failures.append(f"{tag}: values {read[:3]}... != {want[:3]}...")
    return records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hsring", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run_dir = os.path.join(work, "run")
    summary_path = os.path.join(work, "summary.json")
    ring = f"hsring-tb-{os.getpid()}"
    failures = []

    # A small corpus of its own: with --data the run skips the end-of-run decoding of the
    # built-in prompts (a minute on two cores), and trains in seconds.
    text_dir, corpus = os.path.join(work, "text"), os.path.join(work, "corpus")
    os.makedirs(text_dir)
    words = "the ring moves hidden states from targets to drafters and keeps training".split()
    for d in range(40):
        with open(os.path.join(text_dir, f"doc{d}.txt"), "w") as f:
            f.write(" ".join(words[(d * 7 + i * i) % len(words)] for i in range(120)))
    run([args.hsring, "data", "pack", text_dir, "-o", corpus])
    common = ["--ring", ring, "--model", "tiny", "--data", corpus, "--quiet",
              "--summary-json", summary_path]
    run([args.hsring, "run", "--batches", "12", "--run-dir", run_dir] + common)
    with open(summary_path) as f:
        summary = json.load(f)
    steps = summary["steps"]
    if steps < 1:
        failures.append(f"the summary has {steps} steps")
    records = check_curves(run_dir, steps, failures) or []
    if records:
        if not math.isclose(records[0]["loss"], summary["initial_loss"], rel_tol=1e-5):
            failures.append(f"first loss {records[0]['loss']} != summary's initial_loss "
                            f"{summary['initial_loss']}")
        print(f"{len(records)} steps: loss {records[0]['loss']:.4f} -> {records[-1]['loss']:.4f}, "
              f"tau {records[-1]['acceptance_length']:.3f}")

    # --resume continues the run: its steps follow, none twice, in both files.
    run([args.hsring, "run", "--batches", "4", "--resume", os.path.join(run_dir, "checkpoints")]
        + common)
    with open(summary_path) as f:
        resumed = json.load(f)["steps"]
    if resumed <= steps:
        failures.append(f"the resumed run ended at step {resumed}, not past {steps}")
    check_curves(run_dir, resumed, failures)

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASSED: TensorBoard reads the run's curves as metrics.jsonl holds them")


if __name__ == "__main__":
    main()
