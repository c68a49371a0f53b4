"""flash-linear-attention's chunked gated delta rule on the documents forward_bench packed
(--docs: their lengths, one a line, from its --docs-out), at the qwen3.6-27b DeltaNet shape:
16 q/k heads and 48 value heads (fla's grouped-value path, no repeat), head dims 128, bf16
inputs as serving engines and transformers give them, one packed batch through cu_seqlens.
The inputs are drawn as forward_bench draws hsring's: unit-scale q and k rows, mild decays,
beta near 0.5. Prints key=value lines: the median time of one call (one layer's delta rule)
and the rate by the same FLOP count forward_bench uses, so the two compare line for line.
"""

import argparse
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", required=True, help="document lengths, one a line")
    ap.add_argument("--qk-heads", type=int, default=16)
    ap.add_argument("--v-heads", type=int, default=48)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="also print each of fla's kernels' GPU time for one call")
    args = ap.parse_args()
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    lengths = [int(line) for line in open(args.docs) if line.strip()]
    t, hk, hv, d = sum(lengths), args.qk_heads, args.v_heads, args.head_dim
    print(f"fla={fla.__version__}\ntorch={torch.__version__}")
    print(f"gpu={torch.cuda.get_device_name(0)}\ntokens={t}\ndocuments={len(lengths)}")
    gen = torch.Generator(device="cuda").manual_seed(5)
    scale = (3.0 / d) ** 0.5

    def uniform(shape, width, low):
        return torch.rand(shape, device="cuda", generator=gen) * width + low

    q = uniform((1, t, hk, d), 2 * scale, -scale).bfloat16()
    k = uniform((1, t, hk, d), 2 * scale, -scale).bfloat16()
    v = uniform((1, t, hv, d), 2 * scale, -scale).bfloat16()
    g = uniform((1, t, hv), 0.05, -0.05).float()
    beta = uniform((1, t, hv), 0.4, 0.5).bfloat16()
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    cu = torch.tensor(offsets, device="cuda", dtype=torch.long)

    def call():
        with torch.no_grad():
            return chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)

    for _ in range(args.warmup):
        call()
    times = []
    for _ in range(args.iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    # forward_bench's count: the chunked algorithm's FLOPs per token and value head.
    c = 64
    flops = float(t) * hv * (2 * c * d + (c - 1) * 2 * d + 6.0 * d * d + 2 * c * d)
    print(f"fla_delta_rule_ms_per_layer={ms:.3f}")
    print(f"fla_delta_rule_tflops={flops / (ms * 1e-3) / 1e12:.2f}")
    if args.profile:
        # Where fla's time goes, kernel by kernel: to set each of hsring's passes beside the
        # kernels that do the same work.
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        for event in prof.key_averages():
            if event.device_time_total > 0:
                print(f"fla_kernel_us {event.device_time_total:9.1f} {event.key[:90]}")


if __name__ == "__main__":
    main()
