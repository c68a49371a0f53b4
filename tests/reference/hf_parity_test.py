"""hsring's fp32 CPU target forward against transformers' own (docs/target-model.md,
"Checked against transformers").

For each architecture hsring loads (the Qwen3.5 hybrid in its multimodal wrapper and
text-only), transformers builds a small random model (norm weights
and biases perturbed away from their initial values so a skipped one shows), writes it with
save_pretrained (transformers 5: rope_parameters and dtype in config.json), and runs it
document by document, fp32, eager attention. hf_forward_dump runs hsring's CPU forward on
the saved folder over the same documents packed into one batch. Compared:
  * every captured layer: hsring's layer id i against HF hidden_states[i + 1] (the last
    layer after the model's final norm, as HF returns it);
  * the logits;
  * the greedy labels (near-ties, a top-2 gap under 1e-4, are not counted).
Pass: the relative error ||a - b|| / ||b|| of each tensor under 1e-4 and at least 99% of
the labels equal. With --cuda, hsring's CUDA forward (bf16 weights and GEMM inputs) is
compared instead, within 1e-2, or twice the bf16 rounding error where that is more: the
larger of what rounding the weights to bf16 alone does to hsring's fp32 CPU forward and
what transformers' own bf16 forward (weights and activations) differs from its fp32 one,
per document and tensor (the Qwen3.5 cases, whose gated RMSNorm over a DeltaNet output
near zero magnifies any bf16 rounding, and short documents, whose few values make the
relative error noisy, need it). Labels equal unless within 4 x
the RMS logit difference of transformers' best (a near-tie bf16 may break). The Qwen3.5 cases also run a 150-token
document, so the DeltaNet state crosses the CUDA forward's 64-token chunks. The
mixture-of-experts cases (qwen3_moe, qwen3_5_moe) run on the CUDA forward too, under the
same bounds, except where a token's router has its k-th and (k+1)-th expert within 2e-2
(transformers' fp32 logits; bf16 rounding may pick either, transformers' own bf16 forward
included): a document that misses its bound then is compared on the tokens before that
token (causal: they cannot depend on it), and labels after it may differ. With --hsring their
folders also run through a short `hsring run` (on GPU 0 with --cuda), whose export must
load in the DFlash reference package and draft a block from the target's hidden states. Exit 0 on success, 1 on a mismatch (with the numbers);
"[  SKIPPED ]" and 0 with --cuda on a machine without a GPU.
"""

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys

# The reference runs on the CPU. Where flash-linear-attention is installed (with Triton, as on
# a GPU machine), transformers' Qwen3.5 layers call its Triton kernels, which take only CUDA
# tensors: hidden here, they take transformers' torch path, the one the bounds were set on.
sys.modules["fla"] = None

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config,
                          Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration,
                          Qwen3_5TextConfig, Qwen3MoeConfig)

TOLERANCE = 1e-4  # fp32 CPU; set to 1e-2 for --cuda (bf16)
HYBRID = ("qwen3_5", "qwen3_5-text", "qwen3_5_moe")
WRAPPERS = (Qwen3_5Config, Qwen3_5MoeConfig)
MOE = ("qwen3_moe", "qwen3_5_moe")
ZERO_CENTRED = (Qwen3_5Config, Qwen3_5TextConfig, Qwen3_5MoeConfig)
# head_dim 32: a size the CUDA attention kernel is built for (32, 64, 128, 256).
SHAPE = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, vocab_size=301, rms_norm_eps=1e-6)


def cases():
    """(name, config) of every architecture and RoPE rule hsring claims to load."""
    yield "qwen3", Qwen3Config(**SHAPE, tie_word_embeddings=True, max_position_embeddings=256,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    yield "qwen2-biases", Qwen2Config(**SHAPE, tie_word_embeddings=False,
                                      max_position_embeddings=256,
                                      rope_parameters={"rope_type": "default",
                                                       "rope_theta": 1e6})
    llama3 = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    yield "llama-llama3", LlamaConfig(**SHAPE, max_position_embeddings=512,
                                      rope_parameters=llama3)
    yield "llama-linear", LlamaConfig(**SHAPE, max_position_embeddings=256,
                                      rope_parameters={"rope_type": "linear",
                                                       "rope_theta": 1e4, "factor": 2.0})
    # Context 24: the 30-token document runs past it, so the base grows there only.
    yield "llama-dynamic", LlamaConfig(**SHAPE, max_position_embeddings=24,
                                       rope_parameters={"rope_type": "dynamic",
                                                        "rope_theta": 1e4, "factor": 2.0})
    yield "qwen3_5", Qwen3_5Config(
        text_config=QWEN35_TEXT,
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                           out_hidden_size=64))
    yield "qwen3_5-text", Qwen3_5TextConfig(**QWEN35_TEXT)
    # Mixtures: 8 experts of 48, 2 per token. Qwen3-MoE with its default norm_topk_prob
    # (false: the top-k probabilities kept as they are) and one dense layer
    # (mlp_only_layers); Qwen3.5-MoE (renormalised, a gated shared expert) in its wrapper.
    yield "qwen3_moe", Qwen3MoeConfig(**SHAPE, tie_word_embeddings=False,
                                      max_position_embeddings=256, moe_intermediate_size=48,
                                      num_experts=8, num_experts_per_tok=2, mlp_only_layers=[1],
                                      rope_parameters={"rope_type": "default",
                                                       "rope_theta": 1e6})
    yield "qwen3_5_moe", Qwen3_5MoeConfig(
        text_config=dict({k: v for k, v in QWEN35_TEXT.items() if k != "intermediate_size"},
                         moe_intermediate_size=48, shared_expert_intermediate_size=80,
                         num_experts=8, num_experts_per_tok=2),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                           out_hidden_size=64))
    yield "llama-yarn", LlamaConfig(**SHAPE, max_position_embeddings=128,
                                    rope_parameters={"rope_type": "yarn", "rope_theta": 1e4,
                                                     "factor": 4.0,
                                                     "original_max_position_embeddings": 32})


# Qwen3.5's hybrid text model: three Gated DeltaNet layers, then gated full attention with
# RoPE on a quarter of each head; 2 q/k and 4 v DeltaNet heads (grouped), kernel 4.
QWEN35_TEXT = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=301,
                   rms_norm_eps=1e-6, max_position_embeddings=256, linear_num_key_heads=2,
                   linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
                   linear_conv_kernel_dim=4,
                   rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                    "partial_rotary_factor": 0.25,
                                    "mrope_section": [2, 1, 1], "mrope_interleaved": True})


def randomize(model, generator, zero_centred):
    """Weights of a sane scale, norms and biases visibly away from their initial values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5, generator=generator)
            elif "norm" in name and zero_centred and "linear_attn.norm" not in name:
                p.uniform_(-0.3, 0.3, generator=generator)  # applied as 1 + w
            elif "norm" in name:
                p.uniform_(0.7, 1.3, generator=generator)
            elif "embed_tokens" in name or "lm_head" in name:
                p.normal_(0.0, 1.0, generator=generator)
            elif p.dim() == 1:  # DeltaNet's A_log
                p.uniform_(-1.0, 1.0, generator=generator)
            else:  # Linear [out, in], conv [C, 1, K], fused experts [E, out, in]
                bound = (3.0 / p.shape[-1]) ** 0.5  # variance 1 / fan-in
                p.uniform_(-bound, bound, generator=generator)


def reset_rope(language):
    """A fresh dynamic-RoPE state, as for a model that runs this one document."""
    rotary = language.rotary_emb
    if hasattr(rotary, "original_inv_freq"):
        rotary.inv_freq = rotary.original_inv_freq.clone()
        rotary.max_seq_len_cached = rotary.original_max_seq_len


def relative(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


CUDA = []  # ["--cuda"] to run hsring's CUDA forward


class NoGpu(Exception):
    pass


def hsring_forward(dump, folder, docs, out_path):
    """(layers [L, T, H], logits [T, V], greedy [T]) of hsring's forward, or the error."""
    offsets = np.cumsum([0] + [len(d) for d in docs]).tolist()
    tokens = [t for d in docs for t in d]
    proc = subprocess.run([dump, folder, ",".join(map(str, offsets)), ",".join(map(str, tokens)),
                           out_path] + CUDA, text=True, capture_output=True)
    if proc.returncode == 3:
        raise NoGpu(proc.stderr.strip())
    if proc.returncode != 0:
        return proc.stderr.strip()
    raw = open(out_path, "rb").read()
    T, H, V, L = np.frombuffer(raw[:16], dtype=np.int32)
    floats = np.frombuffer(raw[16:16 + 4 * (L * T * H + T * V)], dtype=np.float32)
    layers = floats[:L * T * H].reshape(L, T, H)
    logits = floats[L * T * H:].reshape(T, V)
    greedy = np.frombuffer(raw[16 + 4 * (L * T * H + T * V):], dtype=np.int32)
    return layers, logits, greedy


def control_differs(dump, folder, work, docs, logits):
    """The same folder with plain RoPE must give other logits: the scaled rule is exercised
    by these positions, so a forward that ignored it would fail the comparison."""
    plain = folder + "-plain"
    shutil.copytree(folder, plain)
    path = os.path.join(plain, "config.json")
    saved = json.load(open(path))
    saved["rope_parameters"] = {"rope_type": "default",
                                "rope_theta": saved["rope_parameters"]["rope_theta"]}
    json.dump(saved, open(path, "w"))
    result = hsring_forward(dump, plain, docs, plain + ".bin")
    # 1e-2: far above the CPU's rounding (5e-7) and the CUDA forward's own (bf16, 5e-3).
    return not isinstance(result, str) and relative(result[1], logits) > 1e-2


def bf16_floor(dump, model, folder, docs):
    """Per document, the relative error of each layer and of the logits that rounding the
    weight matrices to bf16 (as the GPU holds them) causes in hsring's fp32 CPU forward."""
    rounded = folder + "-bf16"
    with torch.no_grad():
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(p.to(torch.bfloat16).float())
        model.save_pretrained(rounded)
        model.load_state_dict(saved)
    cuda = CUDA[:]
    CUDA.clear()
    try:
        plain = hsring_forward(dump, folder, docs, rounded + ".plain.bin")
        bf16 = hsring_forward(dump, rounded, docs, rounded + ".bin")
    finally:
        CUDA.extend(cuda)
    if isinstance(plain, str) or isinstance(bf16, str):
        raise RuntimeError(f"hf_forward_dump (CPU) failed: {plain if isinstance(plain, str) else bf16}")
    offsets = np.cumsum([0] + [len(d) for d in docs]).tolist()
    layers, logits = [], []
    for d in range(len(docs)):
        b, e = offsets[d], offsets[d + 1]
        layers.append([relative(bf16[0][i, b:e], plain[0][i, b:e]) for i in range(len(plain[0]))])
        logits.append(relative(bf16[1][b:e], plain[1][b:e]))
    return layers, logits


def language_of(model):
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def hf_bf16_floor(model, docs, refs):
    """Per document, the relative error of each layer and of the logits of transformers' own
    forward in bf16 (weights and activations, on the GPU when there is one) against its fp32
    forward `refs`: how far bf16 rounding alone moves the reference implementation."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    half = copy.deepcopy(model).to(device=device, dtype=torch.bfloat16)
    layers, logits = [], []
    for doc, ref in zip(docs, refs):
        reset_rope(language_of(half))
        with torch.no_grad():
            out = half(torch.tensor([doc], device=device), output_hidden_states=True)
        layers.append([relative(out.hidden_states[i + 1][0].float().cpu().numpy(),
                                ref.hidden_states[i + 1][0].numpy())
                       for i in range(len(ref.hidden_states) - 1)])
        logits.append(relative(out.logits[0].float().cpu().numpy(), ref.logits[0].numpy()))
    del half
    return layers, logits


# A mixture's k-th and (k+1)-th router logits closer than this (transformers' fp32 forward)
# are a near-tie: bf16 rounding moves logits by ~3e-3, enough to swap the two experts.
TIE_GAP = 2e-2


def first_near_tie(routers, top_k):
    """The first token of a document at which some mixture layer's router has a near-tie
    between its k-th and (k+1)-th expert (routers: each layer's [T, E] logits), else None."""
    first = None
    for logits in routers:
        ranked = torch.sort(logits, dim=-1, descending=True).values
        near = torch.nonzero(ranked[:, top_k - 1] - ranked[:, top_k] < TIE_GAP)
        if len(near):
            first = int(near[0, 0]) if first is None else min(first, int(near[0, 0]))
    return first


def before_tie(name, what, ours, want, err, bound, tie):
    """err, or, when it misses the bound in a document with a near-tied expert choice at
    token `tie` (--cuda: a mixture), the error over the tokens before that one: under causal
    attention and DeltaNet they cannot depend on the choice, which bf16 may make either way
    (transformers' own bf16 forward does too)."""
    if not CUDA or err <= bound or tie is None:
        return err
    if tie == 0:
        print(f"{name}: {what}: relative error {err:.3g} from a near-tied expert choice at its "
              f"first token: not compared")
        return 0.0
    head = relative(ours[:tie], want[:tie])
    print(f"{name}: {what}: relative error {err:.3g} above {bound:.3g}, near-tied expert "
          f"choice at token {tie}: the {tie} tokens before it {head:.3g}")
    return head


def check(name, config, dump, work, docs):
    folder = os.path.join(work, name)
    generator = torch.Generator().manual_seed(1234)
    config._attn_implementation = "eager"
    if isinstance(config, WRAPPERS):
        config.text_config._attn_implementation = "eager"
        wrapper = (Qwen3_5ForConditionalGeneration if isinstance(config, Qwen3_5Config)
                   else Qwen3_5MoeForConditionalGeneration)
        model = wrapper(config).float()
    elif isinstance(config, Qwen3_5TextConfig):
        model = Qwen3_5ForCausalLM(config).float()
    else:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    language = language_of(model)
    randomize(model, generator, zero_centred=isinstance(config, ZERO_CENTRED))
    model.eval()
    model.save_pretrained(folder)
    saved = json.load(open(os.path.join(folder, "config.json")))
    text_saved = saved.get("text_config", saved)
    assert "rope_parameters" in text_saved and "dtype" in saved, sorted(saved)

    offsets = np.cumsum([0] + [len(d) for d in docs]).tolist()
    floor_layers = floor_logits = None
    if CUDA:
        floor_layers, floor_logits = bf16_floor(dump, model, folder, docs)
    result = hsring_forward(dump, folder, docs, os.path.join(work, name + ".bin"))
    if isinstance(result, str):
        print(f"{name}: hf_forward_dump failed: {result}")
        return False
    layers, logits, greedy = result
    L = layers.shape[0]

    refs, ties = [], []
    for doc in docs:
        reset_rope(language)
        routers = []
        hooks = [m.register_forward_hook(lambda mod, inp, out: routers.append(out[0].float()))
                 for m in model.modules() if type(m).__name__.endswith("TopKRouter")]
        with torch.no_grad():
            refs.append(model(torch.tensor([doc]), output_hidden_states=True))
        for hook in hooks:
            hook.remove()
        ties.append(first_near_tie(routers, getattr(language.config, "num_experts_per_tok", 0)))
    if CUDA:
        hf_layers, hf_logits = hf_bf16_floor(model, docs, refs)
        floor_layers = [[max(a, b) for a, b in zip(w, h)]
                        for w, h in zip(floor_layers, hf_layers)]
        floor_logits = [max(a, b) for a, b in zip(floor_logits, hf_logits)]

    worst_layer, worst_logits, agree, counted = 0.0, 0.0, 0, 0
    ok = True
    for d, ref in enumerate(refs):
        begin, end = offsets[d], offsets[d + 1]
        with torch.no_grad():
            last = language.norm(torch.from_numpy(layers[L - 1, begin:end].copy())[None])
        for i in range(L):
            ours = last[0].numpy() if i == L - 1 else layers[i, begin:end]
            want = ref.hidden_states[i + 1][0].numpy()
            err = relative(ours, want)
            bound = max(TOLERANCE, 2 * floor_layers[d][i]) if CUDA else TOLERANCE
            err = before_tie(name, f"document {d} layer {i}", ours, want, err, bound, ties[d])
            worst_layer = max(worst_layer, err)
            if err > bound:
                print(f"{name}: document {d} layer {i}: relative error {err:.3g} (bound {bound:.3g})")
                ok = False
        ref_logits = ref.logits[0].numpy()
        err = relative(logits[begin:end], ref_logits)
        bound = max(TOLERANCE, 2 * floor_logits[d]) if CUDA else TOLERANCE
        err = before_tie(name, f"document {d} logits", logits[begin:end], ref_logits, err, bound,
                         ties[d])
        worst_logits = max(worst_logits, err)
        if err > bound:
            print(f"{name}: document {d} logits: relative error {err:.3g} (bound {bound:.3g})")
            ok = False
        top2 = np.sort(ref_logits, axis=1)[:, -2:]
        margin = 4 * float(np.sqrt(np.mean((logits[begin:end] - ref_logits) ** 2)))
        for t in range(end - begin):
            if top2[t, 1] - top2[t, 0] < 1e-4:
                continue
            ours = int(greedy[begin + t])
            if CUDA and ties[d] is not None and t >= ties[d] and ours != int(ref_logits[t].argmax()):
                continue  # after a near-tied expert choice (before_tie)
            counted += 1
            agree += int(ours == int(ref_logits[t].argmax()) or
                         (CUDA and ref_logits[t, ours] >= top2[t, 1] - margin))
    if text_saved["rope_parameters"]["rope_type"] != "default" and not control_differs(
            dump, folder, work, docs, logits):
        print(f"{name}: plain RoPE gives the same logits: the scaling is not exercised")
        ok = False
    share = agree / max(counted, 1)
    if share < 0.99:
        print(f"{name}: greedy labels agree on {share:.2%} of {counted} positions")
        ok = False
    print(f"{name}{' (CUDA)' if CUDA else ''}: {len(docs)} documents, {sum(map(len, docs))} tokens: layers max rel "
          f"{worst_layer:.2e}, logits max rel {worst_logits:.2e}"
          + (f" (bf16 rounding, weights alone or transformers in bf16: layers "
             f"{max(map(max, floor_layers)):.2e}, logits {max(floor_logits):.2e})"
             if CUDA else "") + f", greedy {agree}/{counted} "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


def hsring_run(hsring, folder, work, name):
    """A short `hsring run` on the saved folder: hsring's own target feeding a DFlash drafter
    over the built-in corpus (bytes: inside the 301-token vocabulary), both on the CPU, or
    both on GPU 0 with --cuda (the workers' -gpu programs beside `hsring`)."""
    run = os.path.join(work, name + "-run")
    summary = os.path.join(run, "summary.json")
    where = "0" if CUDA else "cpu:1"
    argv = [hsring, "run", "--ring", "hsring-parity-%s-%d" % (name, os.getpid()),
            "--model", folder, "--quiet", "--targets", where, "--drafters", where,
            "--max-tokens", "128", "--slots", "4", "--hs-min-ready", "1", "--batches", "4",
            "--objective", "dflash", "--run-dir", os.path.join(run, "out"),
            "--summary-json", summary, "--log-dir", os.path.join(run, "logs")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        print(f"{name}: hsring run failed ({done.returncode}): {done.stderr.strip()}")
        return False
    result = json.load(open(summary))
    ok = (result["batches_consumed"] >= 4 and result["batches_torn"] == 0
          and result["batches_lost"] == 0 and np.isfinite(result["final_loss"]))
    print(f"{name}: hsring run ({'GPU 0' if CUDA else 'CPU'}): {result['batches_consumed']} "
          f"batches, {result['steps']} steps, final loss {result['final_loss']:.3f} "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok and export_drafts(folder, os.path.join(run, "out", "export"), name)


def export_drafts(folder, export, name):
    """The run's export loads in the DFlash reference package (where it is installed: the
    reference venv) with every weight used, and drafts one block from the mixture target's
    own hidden states, as the reference's decoding does."""
    try:
        import dflash.model as dm
    except ImportError:
        print(f"{name}: export not loaded: the dflash package is not installed here")
        return True
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    drafter, info = dm.DFlashDraftModel.from_pretrained(export, dtype=torch.float32,
                                                        output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    prompt = torch.arange(5, 37)[None]
    with torch.inference_mode():
        out = target(prompt, output_hidden_states=True)
        context = dm.extract_context_feature(out.hidden_states, drafter.target_layer_ids)
        block = torch.full((1, drafter.block_size), drafter.mask_token_id, dtype=torch.long)
        block[0, 0] = int(out.logits[0, -1].argmax())
        hidden = drafter(target_hidden=context,
                         noise_embedding=dm._raw_input_embeddings(target, block),
                         position_ids=torch.arange(prompt.shape[1] + drafter.block_size)[None])
        logits = drafter.compute_logits(hidden[:, 1:, :], dm._output_head(target))
    ok = not problems and bool(torch.isfinite(logits).all())
    print(f"{name}: export in the DFlash reference: layer ids {list(drafter.target_layer_ids)}, "
          f"a block of {drafter.block_size} drafted{'' if not problems else ', ' + str(problems)} "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="the hf_forward_dump binary")
    ap.add_argument("--work", required=True)
    ap.add_argument("--cuda", action="store_true", help="hsring's CUDA forward on GPU 0")
    ap.add_argument("--hsring", help="the hsring binary: run the mixture-of-experts folders "
                                     "through `hsring run` as well (on GPU 0 with --cuda)")
    args = ap.parse_args()
    global TOLERANCE
    if args.cuda:
        CUDA.append("--cuda")
        TOLERANCE = 1e-2
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rng = np.random.default_rng(5)
    # Packed documents of different lengths; one runs past the dynamic case's context.
    docs = [rng.integers(0, SHAPE["vocab_size"], n).tolist() for n in (7, 19, 1, 30)]
    # Qwen3.5: a document longer than two of the delta rule's chunks (64 tokens) as well.
    hybrid_docs = docs + [rng.integers(0, SHAPE["vocab_size"], 150).tolist()]
    results = []
    try:
        for name, config in cases():
            results.append(check(name, config, args.dump, work,
                                 hybrid_docs if name in HYBRID else docs))
            if args.hsring and name in MOE:
                results.append(hsring_run(args.hsring, os.path.join(work, name), work, name))
    except NoGpu as e:
        print(f"[  SKIPPED ] hf_parity --cuda: {e}")
        return 0
    if not all(results):
        print("hf_parity: MISMATCH")
        return 1
    print("hf_parity: every architecture matches transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
