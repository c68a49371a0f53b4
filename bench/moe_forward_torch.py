"""The transformers twin of forward_bench for the mixture-of-experts presets: qwen3-30b-a3b
(Qwen3MoeForCausalLM) or qwen3.6-35b-a3b (Qwen3_5MoeForCausalLM, the hybrid's text model),
their first --layers layers, transformers' own random init in bf16 on GPU 0, run over the
documents forward_bench packed (--docs: their lengths, one a line, from its --docs-out), one
document per forward as transformers needs them, with every hidden state and the full
logits, as hsring's forward computes the captured layers and the greedy labels. The experts
run through transformers' "grouped_mm" implementation (torch's grouped GEMM) unless
--experts says otherwise. Prints key=value lines, the median forward time over all
documents last.
"""

import argparse
import importlib.util

from transformers import (Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

import torch_forward_timing as timing


def config(model, layers):
    if model == "qwen3-30b-a3b":  # Qwen/Qwen3-30B-A3B's config.json
        return Qwen3MoeForCausalLM, Qwen3MoeConfig(
            hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936,
            rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    kinds = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
    return Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig(  # Qwen/Qwen3.6-35B-A3B's text model
        hidden_size=2048, moe_intermediate_size=512, shared_expert_intermediate_size=512,
        num_experts=256, num_experts_per_tok=8, num_hidden_layers=layers, num_attention_heads=16,
        num_key_value_heads=2, head_dim=256, vocab_size=248320, rms_norm_eps=1e-6,
        max_position_embeddings=262144, linear_num_key_heads=16, linear_num_value_heads=32,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=kinds, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                         "mrope_interleaved": True})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3.6-35b-a3b",
                    choices=["qwen3-30b-a3b", "qwen3.6-35b-a3b"])
    timing.add_arguments(ap, layers=8)
    ap.add_argument("--experts", default="grouped_mm", help="transformers experts implementation")
    args = ap.parse_args()
    lengths = timing.read_lengths(args.docs)
    timing.print_versions()
    if args.model != "qwen3-30b-a3b":
        fla = importlib.util.find_spec("fla") is not None
        print(f"delta_rule_path={'fla' if fla else 'torch_chunk_gated_delta_rule (fallback)'}")
    cls, cfg = config(args.model, args.layers)
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = args.experts
    print(f"model={args.model}\nattention=sdpa\nexperts={args.experts}")
    model = timing.build_model(cls, cfg, args.layers)
    timing.time_documents(model, cfg.vocab_size, lengths, args.warmup, args.iterations)


if __name__ == "__main__":
    main()
