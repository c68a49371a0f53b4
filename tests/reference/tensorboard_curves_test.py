"""The training curves of a real `hsring run`, read back by TensorBoard's own reader.

A short run of the tiny preset writes RUN_DIR/metrics.jsonl and RUN_DIR/tensorboard/
(curves/training_curves.h). TensorBoard's EventAccumulator (the reader behind
`tensorboard --logdir`) must find every scalar at every step metrics.jsonl holds, with the
same values (as float32, TensorBoard's simple_value), and the run's --summary-json must agree
on the step count and the first loss. The run evaluates its held-out batches every 4 steps
(--eval-every): eval/ tags at exactly those steps. A --resume of the run then appends: each
step once, in both files. RUN_DIR/curves.png (curves/curves_plot.h) is decoded here, by
zlib and struct for its chunks and CRCs and by Pillow for its pixels, which must lie where
the records say. The runs end with the speculative evaluation on the held-out documents of
their --data, then on --eval-prompts. Run by run_tensorboard_curves_test.sh in the
reference venv.
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
import zlib

from PIL import Image
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
            elif key.startswith("eval_"):
                out.setdefault(f"eval/{key[5:]}", []).append((r["step"], value))
            else:
                group = "pipeline" if key.endswith("_busy") else "train"
                out.setdefault(f"{group}/{key}", []).append((r["step"], value))
    return out


# curves/curves_plot.h's layout and colours.
PLOT_SIZE = (800, 600)
LOSS_PANEL, TAU_PANEL = (70, 30, 779, 269), (70, 330, 779, 569)
TRAIN_COLOR, HELD_OUT_COLOR = (31, 119, 180), (255, 127, 14)


def png_chunks(path, failures):
    """The chunks of a PNG file, each CRC checked: [(type, data)]."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        failures.append(f"{path}: no PNG signature")
        return []
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if zlib.crc32(kind + body) != crc:
            failures.append(f"{path}: chunk {kind} CRC {crc:08x} != {zlib.crc32(kind + body):08x}")
        chunks.append((kind, body))
        at += 12 + length
    return chunks


def check_plot(run_dir, records, failures):
    path = os.path.join(run_dir, "curves.png")
    chunks = png_chunks(path, failures)
    kinds = [k for k, _ in chunks]
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        failures.append(f"{path}: chunks {kinds}")
        return
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    if (width, height, depth, colour) != (*PLOT_SIZE, 8, 2):
        failures.append(f"{path}: {width}x{height}, depth {depth}, colour type {colour}")
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    if len(raw) != height * (1 + width * 3):
        failures.append(f"{path}: {len(raw)} bytes of rows for {width}x{height} RGB")
    image = Image.open(path).convert("RGB")
    steps = [r["step"] for r in records]
    first, last = steps[0], steps[-1]
    wrong = []
    for key, area in (("loss", LOSS_PANEL), ("acceptance_length", TAU_PANEL)):
        left, top, right, bottom = area
        train = [(r["step"], r[key]) for r in records if math.isfinite(r.get(key, math.nan))]
        held = [(r["step"], r["eval_" + key]) for r in records if "eval_" + key in r]
        values = [v for _, v in train + held]
        lo, hi = min(values), max(values)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5

        def at(step, v):
            x = left if first == last else left + math.floor(
                (step - first) * (right - left) / (last - first) + 0.5)
            return x, bottom - math.floor((v - lo) * (bottom - top) / (hi - lo) + 0.5)

        for step, v in train:
            if image.getpixel(at(step, v)) not in (TRAIN_COLOR, HELD_OUT_COLOR):
                wrong.append(f"{key} step {step} at {at(step, v)}: {image.getpixel(at(step, v))}")
        for step, v in held:
            if image.getpixel(at(step, v)) != HELD_OUT_COLOR:
                wrong.append(f"eval {key} step {step} at {at(step, v)}: "
                             f"{image.getpixel(at(step, v))}")
        if not held:
            wrong.append(f"no held-out {key} point to check")
    if wrong:
        failures.append(f"{path}: points not where the records put them: {wrong[:4]}")
    print(f"curves.png: {width}x{height}, {len(chunks)} chunks, {len(records)} records drawn")


def check_end_of_run_eval(summary, prompts, source, failures):
    """The run ended with speculative decoding of `prompts` prompts from `source`."""
    if summary.get("eval_prompts") != prompts or source not in summary.get("eval_prompts_source", ""):
        failures.append(f"end-of-run eval: {summary.get('eval_prompts')} prompts from "
                        f"{summary.get('eval_prompts_source')!r}, expected {prompts} from {source}")
        return
    low, high = summary["acceptance_length_interval"]
    if not (low <= summary["acceptance_length"] <= high) or not summary["matches_greedy"]:
        failures.append(f"end-of-run eval: tau {summary['acceptance_length']} in [{low}, {high}], "
                        f"matches_greedy {summary['matches_greedy']}")
    print(f"end-of-run eval: tau {summary['acceptance_length']:.3f} [{low:.3f}, {high:.3f}] "
          f"over {prompts} prompts of {source}")


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
    # --eval-every 4: the held-out evaluation at every 4th step, at no other.
    for key in ("eval_loss", "eval_acceptance_length", "eval_agreement"):
        at = [r["step"] for r in records if key in r]
        if at != [s for s in got_steps if s % EVAL_EVERY == 0]:
            failures.append(f"metrics.jsonl: {key} at steps {at}, expected every {EVAL_EVERY}th")

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


EVAL_EVERY = 4


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

    # A small corpus of its own, 40 documents: the run trains in seconds on 38 of them and
    # ends by decoding the other 2 (data/held_out.h), not the built-in prompts.
    text_dir, corpus = os.path.join(work, "text"), os.path.join(work, "corpus")
    os.makedirs(text_dir)
    words = "the ring moves hidden states from targets to drafters and keeps training".split()
    for d in range(40):
        with open(os.path.join(text_dir, f"doc{d}.txt"), "w") as f:
            f.write(" ".join(words[(d * 7 + i * i) % len(words)] for i in range(120)))
    run([args.hsring, "data", "pack", text_dir, "-o", corpus])
    common = ["--ring", ring, "--model", "tiny", "--data", corpus, "--quiet",
              "--summary-json", summary_path, "--eval-every", str(EVAL_EVERY)]
    run([args.hsring, "run", "--batches", "12", "--run-dir", run_dir] + common)
    with open(summary_path) as f:
        summary = json.load(f)
    check_end_of_run_eval(summary, 2, f"held-out documents of {corpus}", failures)
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

    check_plot(run_dir, records, failures)

    # --resume continues the run: its steps follow, none twice, in both files. It ends by
    # decoding the user's own prompts: a folder of 3 documents.
    prompt_text, prompts = os.path.join(work, "prompt-text"), os.path.join(work, "prompts")
    os.makedirs(prompt_text)
    for d in range(3):
        with open(os.path.join(prompt_text, f"p{d}.txt"), "w") as f:
            f.write(" ".join(words[(d * 5 + i) % len(words)] for i in range(8 + d)))
    run([args.hsring, "data", "pack", prompt_text, "-o", prompts])
    run([args.hsring, "run", "--batches", "4", "--resume", os.path.join(run_dir, "checkpoints"),
         "--eval-prompts", prompts] + common)
    with open(summary_path) as f:
        summary = json.load(f)
    resumed = summary["steps"]
    if resumed <= steps:
        failures.append(f"the resumed run ended at step {resumed}, not past {steps}")
    check_end_of_run_eval(summary, 3, f"the prompt folder {prompts}", failures)
    records = check_curves(run_dir, resumed, failures) or []
    if records:
        check_plot(run_dir, records, failures)

    # JSONL chats go through `hsring data prepare --prompts-only`; a failure says so.
    chats = os.path.join(work, "chats.jsonl")
    with open(chats, "w") as f:
        f.write('{"messages": [{"role": "user", "content": "hi"}]}\n')
    out = subprocess.run([args.hsring, "eval", "--model", "tiny", "--drafter",
                          os.path.join(run_dir, "export"), "--prompts", chats],
                         text=True, capture_output=True)
    # Until `data prepare --prompts-only` exists, its failure is named; then the chat decodes.
    if out.returncode != 0 and "data prepare" not in out.stderr:
        failures.append(f"eval --prompts {chats}: exit {out.returncode}, {out.stderr[-300:]}")

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASSED: TensorBoard reads the run's curves as metrics.jsonl holds them")


if __name__ == "__main__":
    main()
