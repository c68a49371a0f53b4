"""The transformers twin of forward_bench for the Qwen3.5 / 3.6 hybrid: the qwen3.6-27b shape
(or its first --layers layers) with transformers' own random init in bf16 on GPU 0, run over
the documents forward_bench packed (--docs: their lengths, one a line, from its --docs-out),
one document per forward as transformers needs them (it has no packed-document DeltaNet
path without the fla kernels), with every hidden state and the full logits, as hsring's
forward computes the captured layers and the greedy labels. Prints key=value lines: which
delta-rule and convolution implementations ran (fla / causal_conv1d when installed, else
transformers' torch fallback), and the median forward time over all documents.
"""

import argparse
import importlib.util

from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

import torch_forward_timing as timing


def config(layers):
    kinds = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
    return Qwen3_5TextConfig(
        hidden_size=5120, intermediate_size=17408, num_hidden_layers=layers,
        num_attention_heads=24, num_key_value_heads=4, head_dim=256, vocab_size=248320,
        rms_norm_eps=1e-6, max_position_embeddings=262144, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, layer_types=kinds, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                         "mrope_interleaved": True})


def main():
    ap = argparse.ArgumentParser()
    timing.add_arguments(ap, layers=64)
    args = ap.parse_args()
    lengths = timing.read_lengths(args.docs)
    timing.print_versions()
    fla = importlib.util.find_spec("fla") is not None
    conv = importlib.util.find_spec("causal_conv1d") is not None
    print(f"delta_rule_path={'fla chunk_gated_delta_rule' if fla else 'torch_chunk_gated_delta_rule (torch fallback)'}")
    print(f"conv_path={'causal_conv1d' if conv else 'torch conv1d (fallback)'}")
    print("attention=sdpa")
    cfg = config(args.layers)
    cfg._attn_implementation = "sdpa"
    model = timing.build_model(Qwen3_5ForCausalLM, cfg, args.layers)
    timing.time_documents(model, cfg.vocab_size, lengths, args.warmup, args.iterations)


if __name__ == "__main__":
    main()
