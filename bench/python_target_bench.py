#!/usr/bin/env python3
"""A PyTorch target's hand-off of its captured layers, three ways, on one GPU
(issue 14's benchmark; the lead runs it on the GPU machine, results in bench/RESULTS.md):

  hsring   job.write_layers(K CUDA tensors) + job.publish(): pitched device copies into the
           pinned slot on the current stream, published by the library's thread
  old      the old pipeline: torch.cat(layers, -1) + Gaussian noise + .cpu().pin_memory()
  raw      K copy_(non_blocking=True) into preallocated pinned host tensors

For each: the critical path (host time the target's thread spends, per batch) and the
copy's own device time (CUDA events around it on the stream), median over --iters. The
ratios printed: raw copy time / hsring copy time (aim >= 0.95) and the critical paths.

    python3 bench/python_target_bench.py [--tokens 16384 --hidden 4096 --layers 5]

It creates its own synthetic ring (`hsring run --create-only`, 4 slots: --tokens x
--layers x --hidden x 2 bytes each, 2.5 GiB of /dev/shm at the qwen3-8b shape) and
claims and releases its batches from a consumer process (a drafter is another process;
a consumer thread here would contend for the target's GIL and time the contention with
the hand-off). --device cpu runs the same code
on CPU tensors (a smoke test of the script; with a tiny shape, e.g. --tokens 16 --hidden
64 --iters 2000 --paths hsring, the critical path is the package's host overhead alone).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import hsring  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--noise-std", type=float, default=0.05)
    p.add_argument("--device", default="cuda")
    p.add_argument("--clock", choices=["wall", "thread"], default="wall",
                   help="critical paths in wall time, or in the target thread's CPU time "
                        "(time.thread_time: what the hand-off costs on a loaded machine, "
                        "without the time it is preempted)")
    p.add_argument("--drain", help=argparse.SUPPRESS)  # the consumer process of ring DRAIN
    p.add_argument("--paths", default="hsring,old,raw",
                   help="which of hsring,old,raw to run (e.g. hsring alone with --device cpu "
                        "and a tiny shape: the Python/ctypes host overhead of the hand-off)")
    p.add_argument("--hsring", default=os.path.join(os.environ.get("HSRING_BIN_DIR", ""), "hsring")
                   if os.environ.get("HSRING_BIN_DIR") else "hsring")
    return p.parse_args()


host_clock = time.perf_counter


class Timer:
    """Host time of a block, and with CUDA the device time between events on the stream."""

    def __init__(self, cuda):
        self.cuda = cuda

    def __enter__(self):
        if self.cuda:
            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        self.t0 = host_clock()
        return self

    def __exit__(self, *exc):
        self.host_s = host_clock() - self.t0
        if self.cuda:
            self.end.record()

    def device_s(self):
        if not self.cuda:
            return float("nan")
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1000.0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def drain(ring):
    """The consumer process (--drain RING): claims and releases until the ring stops or
    the parent ends it with SIGTERM."""
    consumer = hsring.Consumer(ring, 0)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: hsring._lib.lib().hs_request_stop())
    while True:
        try:
            batch = consumer.next_batch(timeout=0.2)
        except TimeoutError:
            continue
        if batch is None:
            break
        batch.release()
    consumer.close()


def main():
    a = parse_args()
    if a.drain:
        return drain(a.drain)
    global host_clock
    if a.clock == "thread":
        host_clock = time.thread_time
    cuda = a.device.startswith("cuda")
    dev = torch.device(a.device)
    T, H, K = a.tokens, a.hidden, a.layers
    ring = "hsring-bench-py-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    subprocess.run([a.hsring, "run", "--create-only", "--ring", ring, "--model", "synthetic",
                    "--targets", "cpu:1", "--drafters", "cpu:1", "--slots", "4",
                    "--max-tokens", str(T), "--hidden-size", str(H), "--num-layers", str(K),
                    "--dtype", "bf16", "--hs-min-ready", "1", "--batches", "0"],
                   check=True, capture_output=True)
    drainer = None
    try:
        producer = hsring.Producer(ring, 0, caller_tokens=True)  # full batches of T
        drainer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--drain", ring])
        gen = torch.Generator(device=dev).manual_seed(0)
        layers = [torch.randn(T, H, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(K)]
        if cuda:
            torch.cuda.synchronize()
        bytes_moved = T * H * K * 2
        import numpy as np
        ids = np.zeros(T, dtype=np.int32)
        results = {}
        paths = a.paths.split(",")

        # hsring: next_job (waiting for a free slot) is outside the critical path measured.
        crit, copy, wait = [], [], []
        for i in range(a.warmup + a.iters if "hsring" in paths else 0):
            t0 = time.perf_counter()
            job = producer.next_job()
            job.set_tokens(ids)  # one document of T tokens: a pure function of the batch id
            job.write_labels(ids)  # host labels, outside the timed write_layers + publish
            t1 = time.perf_counter()
            with Timer(cuda) as tm:
                job.write_layers(layers)
                job.publish()
            producer.flush()
            if i >= a.warmup:
                wait.append(t1 - t0)
                crit.append(tm.host_s)
                copy.append(tm.device_s())
        results["hsring"] = (median(crit), median(copy))
        print("hsring  write_layers+publish: critical path %.1f us, device copy %.2f ms "
              "(%.1f GB/s), next_job + set_tokens + labels %.1f us" % (1e6 * median(crit), 1e3 * median(copy),
                                                  bytes_moved / median(copy) / 1e9 if cuda else 0,
                                                  1e6 * median(wait)), flush=True)

        # The old pipeline: everything synchronous on the target's thread.
        crit = []
        for i in range(a.warmup + a.iters if "old" in paths else 0):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            cat = torch.cat(layers, dim=-1)
            cat = cat + a.noise_std * torch.randn(cat.shape, device=dev, dtype=cat.dtype, generator=gen)
            host = cat.cpu().pin_memory() if cuda else cat.cpu().clone()
            if cuda:
                torch.cuda.synchronize()
            if i >= a.warmup:
                crit.append(time.perf_counter() - t0)
            del host, cat
        results["old"] = (median(crit), median(crit))
        print("old     cat+noise+.cpu().pin_memory(): critical path %.2f ms" % (1e3 * median(crit)),
              flush=True)

        # Raw: K non_blocking copies into preallocated pinned memory.
        pinned = [torch.empty(T, H, dtype=torch.bfloat16, pin_memory=cuda) for _ in range(K)]
        crit, copy = [], []
        for i in range(a.warmup + a.iters if "raw" in paths else 0):
            with Timer(cuda) as tm:
                for dst, src in zip(pinned, layers):
                    dst.copy_(src, non_blocking=True)
            d = tm.device_s()
            if i >= a.warmup:
                crit.append(tm.host_s)
                copy.append(d)
        results["raw"] = (median(crit), median(copy))
        print("raw     copy_(non_blocking) x%d: critical path %.1f us, device copy %.2f ms (%.1f GB/s)"
              % (K, 1e6 * median(crit), 1e3 * median(copy),
                 bytes_moved / median(copy) / 1e9 if cuda else 0), flush=True)

        print("shape: %d tokens x %d layers x %d bf16 = %.0f MiB per batch" % (T, K, H, bytes_moved / 2**20))
        print("ratio raw copy / hsring copy: %.3f (aim >= 0.95)" % (results["raw"][1] / results["hsring"][1]))
        print("critical path: hsring %.1f us (aim < 100 us), raw %.1f us, old %.2f ms; old / hsring = %.0fx"
              % (1e6 * results["hsring"][0], 1e6 * results["raw"][0], 1e3 * results["old"][0],
                 results["old"][0] / results["hsring"][0]))
        producer.close()
    finally:
        if drainer is not None:
            drainer.terminate()
            drainer.wait(10)
        subprocess.run([a.hsring, "ring", "remove", "--force", ring], capture_output=True)


if __name__ == "__main__":
    main()
