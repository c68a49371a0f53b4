"""What the transformers twins of forward_bench share (hybrid_forward_torch.py,
moe_forward_torch.py): their common flags, the versions and GPU they ran on, the model built
with transformers' own random init in bf16 on GPU 0, and the timing of one forward per
document (every hidden state and the full logits, as hsring's forward computes the captured
layers and the greedy labels) over forward_bench's document lengths, printed as key=value
lines, the median forward time over all documents last."""

import statistics
import time

import torch
import transformers


def add_arguments(ap, layers):
    """The flags every twin takes; `layers` is --layers' default."""
    ap.add_argument("--docs", required=True, help="document lengths, one a line")
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)


def read_lengths(path):
    """forward_bench's --docs-out file: one document length a line."""
    with open(path) as f:
        return [int(line) for line in f if line.strip()]


def print_versions():
    print(f"torch={torch.__version__}\ntransformers={transformers.__version__}")
    print(f"gpu={torch.cuda.get_device_name(0)}")


def build_model(cls, cfg, layers):
    """cls(cfg) in bf16 on GPU 0, in eval mode, its build time and size printed."""
    start = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = cls(cfg)
    model.eval()
    torch.cuda.synchronize()
    print(f"layers={layers}\nmodel_init_s={time.perf_counter() - start:.1f}")
    print(f"parameters={sum(p.numel() for p in model.parameters())}")
    return model


def time_documents(model, vocab_size, lengths, warmup, iterations):
    """One forward per document of random tokens (seeded), as transformers needs them; prints
    the median time of all of them over `iterations` runs after `warmup` ones."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    docs = [torch.randint(0, vocab_size, (1, n), device="cuda", generator=generator)
            for n in lengths]
    print(f"tokens={sum(lengths)}\ndocuments={len(lengths)}", flush=True)

    def forward():
        with torch.no_grad():
            for ids in docs:
                out = model(ids, use_cache=False, output_hidden_states=True)
                out.logits.argmax(-1)
                del out

    for _ in range(warmup):
        forward()
    times = []
    for _ in range(iterations):
        torch.cuda.synchronize()
        start = time.perf_counter()
        forward()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    print(f"torch_forward_ms={ms:.1f}")
    print(f"torch_forward_tokens_per_s={sum(lengths) / (ms * 1e-3):.0f}")
    print(f"torch_peak_memory_bytes={torch.cuda.max_memory_allocated()}")
