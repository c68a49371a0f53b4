#!/usr/bin/env python3
"""bench/drafter_quality: does hsring train a DFlash drafter as good as the published recipe?

For each seed and step count, trains hsring's default drafter (`hsring run`, deterministic
when the binary has --deterministic) and the independent PyTorch recipe
(bench/dflash_recipe_torch.py) from the same seeds, evaluates every export with the same
`hsring eval` on the built-in corpus's held-out prompts, and prints per-run tau, mean +- sd
per implementation and step count, and the ratio hsring / torch. Writes everything as JSON
(--json). A benchmark, not a test: it never fails on the numbers. Run it through
bench/drafter_quality.sh, which finds the Python environment.
"""

import argparse
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def sh(cmd, log, **kw):
    """Runs `cmd`, its output appended to `log`; returns (seconds, stdout)."""
    start = time.time()
    with open(log, "a") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        out = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
        f.write(out.stdout)
    if out.returncode != 0:
        tail = "\n".join(out.stdout.splitlines()[-15:])
        raise RuntimeError(f"{cmd[0]} {cmd[1]} exited {out.returncode} (log {log}):\n{tail}")
    return time.time() - start, out.stdout


def run_flags(hsring):
    """The `hsring run` flags this binary has, read from its --help."""
    text = subprocess.run([hsring, "run", "--help"], text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", text))


def tau_stderr(report, rounds=2000, seed=0):
    """Bootstrap standard error of tau over prompts: how far another draw of held-out
    prompts of the same kind could move this drafter's tau."""
    produced = [p["produced"] for p in report["prompts"]]
    rng = random.Random(seed)
    taus = []
    for _ in range(rounds):
        pick = [produced[rng.randrange(len(produced))] for _ in produced]
        steps = sum(len(x) for x in pick)
        taus.append(sum(sum(x) for x in pick) / steps if steps else 0.0)
    return statistics.stdev(taus)


def cache_root():
    """data/default_corpus.cc default_cache_root()."""
    for var, tail in (("HSRING_CACHE_DIR", ""), ("XDG_CACHE_HOME", "hsring")):
        if os.environ.get(var):
            return os.path.join(os.environ[var], tail)
    if os.environ.get("HOME"):
        return os.path.join(os.environ["HOME"], ".cache", "hsring")
    return f"/tmp/hsring-{os.getuid()}"


def heldout_prompts(args):
    """A shard folder of held-out prompts: every 64-token window of the built-in corpus's
    held-out documents (every 16th paragraph, data/default_corpus.cc), each a document of its
    own, given to `hsring eval --prompts`: the 29 prompts the results in bench/RESULTS.md
    were measured on (hsring eval's own default now cuts the same documents into 32-token
    windows: 63 prompts), none of them ever trained on."""
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    sys.path.insert(0, HERE)
    from hsring.shards import write_shard
    from dflash_recipe_torch import read_corpus
    folder = os.path.join(args.work, "heldout-prompts")
    if os.path.isdir(folder):
        return folder
    # `hsring eval` packs the held-out part into the cache on first use.
    sh([args.hsring, "data", "builtin"], os.path.join(args.work, "setup.log"))
    found = sorted(glob.glob(os.path.join(cache_root(), "default-heldout-*")),
                   key=os.path.getmtime)
    if not found:
        subprocess.run([args.hsring, "eval", "--drafter", "/nonexistent"], capture_output=True)
        raise SystemExit("no default-heldout-* folder under " + cache_root() +
                         ": run `hsring eval` once with any export, then again")
    windows = []
    for shard in read_corpus(found[-1]):
        for d in range(len(shard.offsets) - 1):
            for b in range(int(shard.offsets[d]), int(shard.offsets[d + 1]) - args.prompt_tokens + 1,
                           args.prompt_tokens):
                windows.append(shard.tokens[b:b + args.prompt_tokens])
    os.makedirs(folder + ".tmp", exist_ok=True)
    write_shard(os.path.join(folder + ".tmp", "prompts-00000.hstok"), windows,
                vocab_size=shard.vocab)
    os.replace(folder + ".tmp", folder)
    return folder


def evaluate(args, export, name):
    out = os.path.join(args.work, name + ".eval.json")
    cmd = [args.hsring, "eval", "--drafter", export, "--max-prompts", str(args.prompts),
           "--prompt-tokens", str(args.prompt_tokens), "--max-new-tokens",
           str(args.max_new_tokens), "--json", out]
    if args.prompt_data:  # a prompt folder: each document (a window) is one prompt
        cmd += ["--prompts", args.prompt_data]
    if args.eval_threads:
        cmd += ["--threads", str(args.eval_threads)]
    seconds, _ = sh(cmd, os.path.join(args.work, name + ".log"))
    with open(out) as f:
        report = json.load(f)
    return {"tau": report["acceptance_length"], "tau_stderr": tau_stderr(report),
            "prompts": len(report["prompts"]), "matches_greedy": report.get("matches_greedy"),
            "eval_s": round(seconds, 1)}


def train_hsring(args, seed, steps, deterministic):
    name = f"hsring-s{seed}-n{steps}"
    run_dir = os.path.join(args.work, name)
    summary = os.path.join(args.work, name + ".summary.json")
    cmd = [args.hsring, "run", "--ring", f"hsq-{os.getpid()}-{seed}-{steps}", "--run-dir", run_dir,
           "--batches", str(steps), "--data-seed", str(seed), "--train-seed", str(seed),
           "--quiet", "--summary-json", summary] + (["--deterministic"] if deterministic else [])
    cmd += args.hsring_args.split()
    seconds, _ = sh(cmd, os.path.join(args.work, name + ".log"))
    result = {"impl": "hsring", "seed": seed, "steps": steps, "train_s": round(seconds, 1),
              "deterministic": deterministic}
    with open(summary) as f:
        s = json.load(f)
    result["run_tau_own_eval"] = s.get("acceptance_length")
    result.update(evaluate(args, os.path.join(run_dir, "export"), name))
    return result


def train_torch(args, seed, steps):
    name = f"torch-s{seed}-n{steps}"
    export = os.path.join(args.work, name)
    cmd = [sys.executable, os.path.join(HERE, "dflash_recipe_torch.py"), "--hsring", args.hsring,
           "--out", export, "--steps", str(steps), "--train-seed", str(seed), "--data-seed",
           str(seed), "--threads", str(args.torch_threads), "--cache",
           os.path.join(args.work, "cache"), "--log-every", "100"] + args.torch_args.split()
    seconds, out = sh(cmd, os.path.join(args.work, name + ".log"))
    summary = json.loads(out.split("summary ", 1)[1].splitlines()[0])
    result = {"impl": "torch", "seed": seed, "steps": steps, "train_s": round(seconds, 1),
              "torch_train_loop_s": summary["train_s"], "first_loss": summary["first_loss"]}
    result.update(evaluate(args, export, name))
    return result


def describe(values):
    if not values:
        return None
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"n": len(values), "mean": mean, "sd": sd}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hsring", default="build/bin/hsring")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", default="200,1000")
    ap.add_argument("--impls", default="hsring,torch")
    # Every held-out prompt (eval takes as many as there are, up to this).
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompt-set", choices=["windows", "eval-default"], default="windows",
                    help="windows: every 64-token window of the held-out documents (29); "
                         "eval-default: hsring eval's own (every --prompt-tokens window of "
                         "them, round-robin)")
    ap.add_argument("--eval-threads", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--torch-args", default="", help="extra flags for dflash_recipe_torch.py")
    ap.add_argument("--hsring-args", default="", help="extra flags for `hsring run`")
    ap.add_argument("--work", default="drafter-quality")
    ap.add_argument("--json", default="", help="results file (default: WORK/results.json)")
    args = ap.parse_args()
    args.hsring = os.path.abspath(args.hsring)
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    steps_list = [int(s) for s in args.steps.split(",")]
    impls = args.impls.split(",")

    args.prompt_data = heldout_prompts(args) if args.prompt_set == "windows" else ""
    deterministic = "--deterministic" in run_flags(args.hsring)
    if "hsring" in impls and not deterministic:
        print("note: this hsring has no `run --deterministic`: its runs pull ready slots in "
              "timing order, so the same seed need not give the same drafter", flush=True)

    runs = []
    for steps in steps_list:
        for seed in seeds:
            for impl in impls:
                r = train_hsring(args, seed, steps, deterministic) if impl == "hsring" \
                    else train_torch(args, seed, steps)
                runs.append(r)
                print(f"{impl:6s} seed {seed} steps {steps:5d}: tau {r['tau']:.3f} "
                      f"(+-{r['tau_stderr']:.3f} over {r['prompts']} prompts), train "
                      f"{r['train_s']:.0f} s, eval {r['eval_s']:.0f} s", flush=True)

    summary = []
    for steps in steps_list:
        row = {"steps": steps}
        for impl in impls:
            row[impl] = describe([r["tau"] for r in runs if r["impl"] == impl and r["steps"] == steps])
            row[impl + "_train_s"] = describe(
                [r["train_s"] for r in runs if r["impl"] == impl and r["steps"] == steps])
        if row.get("hsring") and row.get("torch"):
            row["ratio_hsring_over_torch"] = row["hsring"]["mean"] / row["torch"]["mean"]
        summary.append(row)

    print("\nsteps  " + "  ".join(f"{i + ' tau (mean +- sd, n)':>30s}" for i in impls) +
          "  hsring/torch")
    for row in summary:
        cells = []
        for impl in impls:
            d = row[impl]
            cells.append(f"{d['mean']:.3f} +- {d['sd']:.3f} (n {d['n']})".rjust(30))
        ratio = row.get("ratio_hsring_over_torch")
        print(f"{row['steps']:5d}  " + "  ".join(cells) +
              (f"  {ratio:.3f}" if ratio is not None else ""))
    se = [r["tau_stderr"] for r in runs]
    print(f"one drafter's tau, bootstrap s.e. over its prompts: median {statistics.median(se):.3f}"
          f" (max {max(se):.3f})")

    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "host": os.uname().nodename, "cpus": os.cpu_count(), "hsring": args.hsring,
               "deterministic": deterministic, "torch_args": args.torch_args,
               "hsring_args": args.hsring_args, "runs": runs, "summary": summary}
    path = args.json or os.path.join(args.work, "results.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print("results: " + path)


if __name__ == "__main__":
    main()
