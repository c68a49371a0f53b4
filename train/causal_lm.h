// A Qwen3 / Llama causal language model trained on the CPU: forward, next-token loss and a
// hand-written backward over a packed batch of documents, with every parameter (Hugging
// Face names) and gradient in one flat buffer. Its forward is the one of
// model/cpu_target_model.h (docs/target-model.md), so trained weights load as a target.
//
//   x = embed_tokens[token]
//   per layer:  a = RMSNorm(x);  q, k, v = a Wq^T, a Wk^T, a Wv^T
//               q, k = RoPE(RMSNorm_head(q), RMSNorm_head(k))   (QK-norm only)
//               x += Attention(q, k, v) Wo^T                     (causal, within a document)
//               x += (silu(m Wg^T) * m Wu^T) Wd^T,  m = RMSNorm(x)
//   logits = RMSNorm(x) W_head^T (W_head = embed_tokens when tied); loss = mean CE
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/ignore_label.h"
#include "model/decoder_layer.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "train/loss_stats.h"
#include "train/param_layout.h"
#include "train/param_store.h"

namespace hsring::train {

// One packed batch of documents; views, not owned.
struct CausalLmBatch {
  std::span<const int32_t> tokens;       // [T] input tokens, each in [0, vocab)
  std::span<const int32_t> positions;    // [T] RoPE positions, >= 0
  std::span<const int32_t> doc_offsets;  // [D + 1]: 0 = o_0 < ... < o_D = T
  std::span<const int32_t> labels;       // [T] next token; < 0: not counted

  size_t rows() const { return tokens.size(); }
};

// Throws Error(kModel) naming the first problem (lengths, offsets, negative
// positions, a token or label outside the vocabulary).
void validate_causal_lm_batch(const CausalLmBatch& batch, const ModelConfig& config);

// The flat layout of `config`, in HF checkpoint order: model.embed_tokens.weight, then per
// layer i model.layers.i.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm
// (QK-norm only), post_attention_layernorm, mlp.{gate,up,down}_proj}.weight, then
// model.norm.weight and, when not tied, lm_head.weight.
// REQUIRES: validate_config(config).empty().
ParamLayout causal_lm_layout(const ModelConfig& config);

// The parameters as the target's weights (what open_cpu_model would load).
// REQUIRES: params.size() == causal_lm_layout(config).total.
ModelWeights causal_lm_weights(const ModelConfig& config, const ParamLayout& layout,
                               std::span<const float> params);

// Real is float for training and double for gradient checks.
// Thread safety: one forward or backward at a time (the model owns its scratch); inside
// one, up to `threads` threads work on disjoint rows or columns, with results that do not
// depend on the thread count.
template <class Real>
class BasicCausalLm : public ParamStore<Real> {
 public:
  // Initialises from `seed`: norms 1, Linear weights uniform in +-1/sqrt(fan_in), the
  // embedding (and a separate head) uniform with standard deviation 0.02, so the first
  // logits are nearly uniform. Throws Error(kModelBadConfig) for an invalid config.
  BasicCausalLm(ModelConfig config, uint64_t seed, uint32_t threads = 1);

  const ModelConfig& config() const { return config_; }

  // Loss and agreement over the batch's counted labels. Throws Error(kModel).
  LossStats forward(const CausalLmBatch& batch);
  // The same, and adds d(mean loss)/d(params) to grads().
  LossStats forward_backward(const CausalLmBatch& batch);

  // Of the last forward: the output of decoder layer `layer` ([T, H], the residual stream
  // after its MLP: what the target captures as layer id `layer`), and the argmax of each
  // row's logits (the first on ties: the target's greedy token).
  // REQUIRES: layer < num_layers; a forward ran.
  std::span<const Real> layer_output(size_t layer) const;
  std::span<const int32_t> greedy() const { return greedy_; }

 private:
  // One layer's tensors in the flat buffer, and what its backward needs from its forward.
  struct LayerOffsets {
    size_t input_norm = 0, q = 0, k = 0, v = 0, o = 0, q_norm = 0, k_norm = 0, post_norm = 0,
           gate = 0, up = 0, down = 0;
  };
  struct LayerActivations {
    AttentionBlockActivations<Real> attention;
    std::vector<Real> mid;  // the attention block's output, the MLP block's input
    MlpBlockActivations<Real> mlp;
  };
  template <class P>
  AttentionBlockParams<P> attention_params(P base, const LayerOffsets& o) const;
  template <class P>
  MlpBlockParams<P> mlp_params(P base, const LayerOffsets& o) const;

  LossStats run(const CausalLmBatch& batch, bool backward);
  void run_layer(size_t index, const CausalLmBatch& batch);
  LossStats run_head(const CausalLmBatch& batch, bool backward);
  void run_backward(const CausalLmBatch& batch);
  void layer_backward(size_t index, const CausalLmBatch& batch);

  using ParamStore<Real>::layout_;
  using ParamStore<Real>::threads_;
  using ParamStore<Real>::params_;
  using ParamStore<Real>::grads_;

  ModelConfig config_;
  DecoderLayerShape shape_;
  size_t embed_ = 0, norm_ = 0, head_ = 0;
  std::vector<LayerOffsets> at_;
  // residual_[l]: the input of layer l ([T, H]); residual_[L] the last layer's output.
  std::vector<std::vector<Real>> residual_;
  std::vector<LayerActivations> acts_;
  std::vector<Real> final_, logits_, cos_, sin_;
  std::vector<int32_t> greedy_;
  size_t rows_ = 0;
  std::vector<Real> d_final_, d_res_;
  BlockGradScratch<Real> scratch_;
};

extern template class BasicCausalLm<float>;
extern template class BasicCausalLm<double>;

using CausalLm = BasicCausalLm<float>;

}  // namespace hsring::train
