#include "model/cuda_target_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu/device.h"
#include "gpu/ops/argmax.h"
#include "gpu/ops/gather_rows.h"
#include "gpu/ops/rms_norm.h"
#include "gpu/ops/rope.h"
#include "gpu/ops/swiglu.h"
#include "model/cuda_blas.h"
#include "model/cuda_delta_net.h"
#include "model/cuda_kernels.h"
#include "model/cuda_moe.h"
#include "model/cuda_moe_mlp.h"
#include "model/cuda_scratch.h"
#include "model/cuda_weights.h"
#include "model/decoder_layer.h"
#include "model/forward_flops.h"
#include "model/hf_checkpoint.h"
#include "model/rope.h"

namespace hsring {

static_assert(kDeltaChunk == kDeltaRuleChunk,
              "forward_flops counts the delta rule in the kernels' chunks");

namespace {

// The target's forward computes its norms' scales and SiLU as the fp32 CPU reference does
// (correctly rounded division and square root, expf), so that the two agree as closely as
// fp32 allows; the training step takes the faster forms.
constexpr gpu::RmsNormScale kNormScale = gpu::RmsNormScale::kRounded;
constexpr gpu::SiluPrecision kSilu = gpu::SiluPrecision::kRounded;

// fp32 logits of the LM head computed at once when the caller does not want them all: about
// 1 GiB of scratch, and enough rows that the [V, H] x [H, rows] GEMM runs at full rate.
uint32_t head_chunk_rows(uint32_t vocab) {
  const uint64_t rows = (uint64_t(1) << 30) / (uint64_t(vocab) * 4);
  return uint32_t(std::clamp<uint64_t>(rows / 64 * 64, 64, 4096));
}

// Makes `gpu` current after checking it exists (a clear message instead of CUDA's).
void select_gpu(int gpu, const std::string& model) {
  const gpu::GpuInventory inventory = gpu::probe_gpus();
  if (gpu < 0 || gpu >= inventory.count)
    throw gpu::cuda_error(cudaErrorInvalidDevice,
                          "model '" + model + "': " + gpu::gpu_problem(gpu, inventory));
  HSRING_CUDA_CHECK(cudaSetDevice(gpu));
}

void check_config(const ModelConfig& config) {
  if (std::string why = validate_config(config); !why.empty())
    throw Error(Errc::kModelBadConfig, "model '" + config.name + "': " + why);
  if (std::string why = cuda_forward_refusal(config); !why.empty())
    throw Error(Errc::kModelBadConfig, why);
  if (!attention_supports(config.head_dim))
    throw Error(Errc::kModelBadConfig,
                fmt::format("model '{}': head_dim {} is not supported by the CUDA forward (32, 64, "
                            "128 or 256)",
                            config.name, config.head_dim));
  const DeltaNetShape& d = config.delta_net;
  if (config.hybrid() && !delta_net_supports(d.qk_head_dim, d.v_head_dim))
    throw Error(Errc::kModelBadConfig,
                fmt::format("model '{}': DeltaNet head dims {} / {} are not supported by the CUDA "
                            "forward (each a multiple of 8, at most 128)",
                            config.name, d.qk_head_dim, d.v_head_dim));
}

[[noreturn]] void bad_capture(const std::string& what) {
  throw Error(Errc::kModel, "bad device capture: " + what);
}

}  // namespace

struct CudaTargetModel::Impl {
  ModelConfig config;
  DecoderLayerShape layer_shape;  // the attention layers' one description, built once
  int gpu = 0;
  gpu::Stream stream;  // setup and the host forward()
  DeviceWeights weights;
  std::unique_ptr<Blas> blas;
  gpu::DeviceBuffer inv_freq;  // double [head_dim / 2], RoPE frequencies
  ForwardActivations activations;
  // Recorded after each forward_device: the scratch is free once it has completed. An event
  // of our own, since the caller's stream may be gone by the time we look.
  gpu::Event forward_done;
  bool forward_pending = false;
  InputStaging staging;
  std::vector<AttentionTile> tiles;
  std::vector<double> rope_bases;  // per token, dynamic NTK RoPE only (else empty)
  // The delta rule's spans and each token's document start: hybrid models only.
  std::vector<DeltaSpan> delta_chunks, delta_documents;
  std::vector<int32_t> doc_starts;
  // Query heads per attention block: all the heads of a KV group, so each K/V block is
  // read once per group. Same bits as one head per block; on an H200 the two are within
  // run-to-run noise of each other (bench/RESULTS.md, "forward_bench").
  uint32_t attention_pack = 1;
  gpu::DeviceBuffer head_chunk;  // fp32 [head_chunk_rows, V]
  // The host forward's device outputs.
  gpu::DeviceBuffer host_captured, host_greedy, host_logits;
  // The forward in flight continues these cached sequences (null: none).
  const CachedPrefix* prefix = nullptr;
  CachedLayout cached;

  Impl(ModelConfig c, int device) : config(std::move(c)), gpu(device) {
    check_config(config);
    layer_shape = decoder_layer_shape(config);
    select_gpu(gpu, config.name);
    stream = gpu::make_stream();
    forward_done = gpu::make_event(cudaEventDisableTiming);
    attention_pack = max_attention_pack(config.num_heads, config.num_kv_heads);
    weights = DeviceWeights::allocate(config, gpu);
    blas = std::make_unique<Blas>();
    const uint32_t half = config.rope_dim() / 2;
    const std::vector<double> freq =
        rope_inverse_frequencies(config.rope, config.rope_theta, config.rope_dim(), 0);
    inv_freq = gpu::DeviceBuffer::allocate(half * sizeof(double));
    HSRING_CUDA_CHECK(
        cudaMemcpy(inv_freq.data(), freq.data(), half * sizeof(double), cudaMemcpyHostToDevice));
  }

  // Waits until the last forward_device has finished with the scratch.
  void wait_idle() {
    if (forward_pending) HSRING_CUDA_CHECK(cudaEventSynchronize(forward_done.get()));
    forward_pending = false;
  }

  void grow(uint32_t tokens) {
    if (head_chunk.size() == 0)
      head_chunk = gpu::DeviceBuffer::allocate(uint64_t(head_chunk_rows(config.vocab_size)) *
                                               config.vocab_size * sizeof(float));
    if (tokens <= activations.capacity) return;
    wait_idle();  // the buffers being replaced may still be read by the previous forward
    activations.grow(config, tokens, gpu);
  }

  void run_layer(uint32_t index, uint32_t rows, const BatchInputs& layout, cudaStream_t s);
  // The token mixers: normed (bf16 [T, H]) in, added into the residual.
  void run_attention(uint32_t index, uint32_t rows, const BatchInputs& layout, cudaStream_t s);
  void run_delta_net(const DeviceLayerWeights& w, uint32_t rows, const BatchInputs& layout,
                     cudaStream_t s);
  void run_head(uint32_t rows, const DeviceCapture& out, bool greedy, cudaStream_t s);
};

void CudaTargetModel::Impl::run_layer(uint32_t index, uint32_t rows, const BatchInputs& layout,
                                      cudaStream_t s) {
  const ModelConfig& c = config;
  const DeviceLayerWeights& w = weights.layer(index);
  ForwardActivations& a = activations;
  const uint32_t h = c.hidden_size;
  const uint32_t inter = c.intermediate_size;
  const float eps = float(c.rms_norm_eps);
  auto* residual = a.residual.as<float>();
  auto* normed = a.normed.as<Bf16>();

  // Token mixer: x += Mixer(norm(x)).
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(residual, w.input_norm, rows, h, eps, nullptr, s,
                                                 normed, nullptr, kNormScale));
  if (c.kind(index) == LayerKind::kDeltaNet)
    run_delta_net(w, rows, layout, s);
  else
    run_attention(index, rows, layout, s);

  if (c.mlp_kind(index) == MlpKind::kExperts) {
    run_moe_mlp(*blas, c, w, a, rows, s);
    return;
  }
  // MLP block: x += (silu(m Wg^T) * m Wu^T) Wd^T, m = norm(x).
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(residual, w.post_norm, rows, h, eps, nullptr, s,
                                                 normed, nullptr, kNormScale));
  blas->linear(normed, rows, h, w.gate_up, 2 * inter, a.gate_up.data(), false, 2 * inter);
  HSRING_CUDA_CHECK(gpu::launch_swiglu_forward_fused(a.gate_up.as<Bf16>(), rows, inter, nullptr, s,
                                                     a.act.as<Bf16>(), kSilu));
  blas->linear(a.act.as<Bf16>(), rows, inter, w.down, h, residual, true, h, 1.0f);
}

void CudaTargetModel::Impl::run_attention(uint32_t index, uint32_t rows, const BatchInputs& layout,
                                          cudaStream_t s) {
  const ModelConfig& c = config;
  const DeviceLayerWeights& w = weights.layer(index);
  ForwardActivations& a = activations;
  const uint32_t h = c.hidden_size;
  const uint32_t qd = c.q_dim();
  // Qwen3.5's q_proj gives [q_h | gate_h] per head: twice the rows.
  const uint32_t qkv_width = (c.attention_gate ? 2 * qd : qd) + 2 * c.kv_dim();
  // Attention block: x += Attention(RoPE(QKnorm(norm(x) Wqkv^T))) Wo^T (output-gated).
  // bf16, as transformers' projections write it; the finishing kernel (and the output
  // gate) read it once, in fp32 from there on.
  blas->linear(a.normed.as<Bf16>(), rows, h, w.qkv, qkv_width, a.qkv.data(), false, qkv_width);
  HSRING_CUDA_CHECK(launch_qkv_finish(a.qkv.as<Bf16>(), rows, layer_shape, w.qkv_bias, w.q_norm,
                                      w.k_norm, a.rope_cos.as<float>(), a.rope_sin.as<float>(),
                                      a.q.as<Bf16>(), a.k.as<Bf16>(), a.v.as<Bf16>(), s));
  const auto* tiles = reinterpret_cast<const AttentionTile*>(a.inputs.data() + layout.tiles_at);
  if (prefix) {
    // Through the cache's rows: this forward's keys and values join the cached ones, and
    // its queries stand where the kernel looks for them (model/cuda_kv_cache.h).
    const CudaKvCache& cache = *prefix->cache;
    const int32_t* at = cache.row_index();
    const uint32_t kvd = c.kv_dim();
    HSRING_CUDA_CHECK(gpu::launch_scatter_rows(a.q.as<Bf16>(), at, rows, qd, cache.queries(), s));
    HSRING_CUDA_CHECK(
        gpu::launch_scatter_rows(a.k.as<Bf16>(), at, rows, kvd, cache.keys(index), s));
    HSRING_CUDA_CHECK(
        gpu::launch_scatter_rows(a.v.as<Bf16>(), at, rows, kvd, cache.values(index), s));
    HSRING_CUDA_CHECK(launch_attention(cache.queries(), cache.keys(index), cache.values(index),
                                       tiles, layout.tile_count, c.num_heads, c.num_kv_heads,
                                       c.head_dim, attention_pack, cache.outputs(), s));
    HSRING_CUDA_CHECK(
        gpu::launch_gather_rows(cache.outputs(), at, rows, qd, nullptr, s, a.attn.as<Bf16>()));
  } else {
    HSRING_CUDA_CHECK(launch_attention(a.q.as<Bf16>(), a.k.as<Bf16>(), a.v.as<Bf16>(), tiles,
                                       layout.tile_count, c.num_heads, c.num_kv_heads, c.head_dim,
                                       attention_pack, a.attn.as<Bf16>(), s));
  }
  if (c.attention_gate)
    HSRING_CUDA_CHECK(launch_output_gate(a.qkv.as<Bf16>(), qkv_width, rows, c.num_heads, c.head_dim,
                                         a.attn.as<Bf16>(), s));
  // beta = 1: cuBLAS adds the product into the fp32 residual (one rounding, no extra pass).
  blas->linear(a.attn.as<Bf16>(), rows, qd, w.o, h, a.residual.as<float>(), true, h, 1.0f);
}

void CudaTargetModel::Impl::run_delta_net(const DeviceLayerWeights& w, uint32_t rows,
                                          const BatchInputs& layout, cudaStream_t s) {
  const ModelConfig& c = config;
  ForwardActivations& a = activations;
  const DeltaNetShape& shape = c.delta_net;
  const uint32_t h = c.hidden_size;
  const uint32_t conv = shape.conv_dim();
  const uint32_t vd = shape.v_dim();
  const uint32_t vh = shape.v_heads;
  const uint32_t width = conv + vd + 2 * vh;  // qkv | z | b | a
  // bf16, as transformers' in_proj writes it: the convolution, the gates and the gated
  // norm read it once each, so its bytes are theirs too.
  auto* proj = a.delta_proj.as<Bf16>();
  const auto* inputs = a.inputs.data();
  blas->linear(a.normed.as<Bf16>(), rows, h, w.delta_in, width, proj, false, width);
  HSRING_CUDA_CHECK(launch_delta_conv(
      proj, width, rows, shape, w.delta_conv,
      reinterpret_cast<const int32_t*>(inputs + layout.doc_starts_at), a.delta_qkv.as<Bf16>(), s));
  HSRING_CUDA_CHECK(launch_delta_gates(proj + conv + vd + vh, proj + conv + vd, width, rows, vh,
                                       w.delta_a_log, w.delta_dt_bias, a.delta_g.as<float>(),
                                       a.delta_beta.as<float>(), s));
  HSRING_CUDA_CHECK(launch_delta_rule(
      a.delta_qkv.as<Bf16>(), a.delta_g.as<float>(), a.delta_beta.as<float>(), shape, rows,
      reinterpret_cast<const DeltaSpan*>(inputs + layout.delta_chunks_at), layout.delta_chunk_count,
      reinterpret_cast<const DeltaSpan*>(inputs + layout.delta_documents_at),
      layout.delta_document_count, a.delta_scratch.as<float>(), a.delta_out.as<Bf16>(), s));
  HSRING_CUDA_CHECK(launch_gated_rms_norm(a.delta_out.as<Bf16>(), proj + conv, width, rows, vh,
                                          shape.v_head_dim, w.delta_norm, float(c.rms_norm_eps),
                                          a.delta_normed.as<Bf16>(), s));
  blas->linear(a.delta_normed.as<Bf16>(), rows, vd, w.delta_out, h, a.residual.as<float>(), true, h,
               1.0f);
}

void CudaTargetModel::Impl::run_head(uint32_t rows, const DeviceCapture& out, bool greedy,
                                     cudaStream_t s) {
  const uint32_t h = config.hidden_size;
  const uint32_t vocab = config.vocab_size;
  auto* normed = activations.normed.as<Bf16>();
  HSRING_CUDA_CHECK(gpu::launch_rms_norm_forward(
      activations.residual.as<float>(), weights.final_norm(), rows, h, float(config.rms_norm_eps),
      nullptr, s, normed, nullptr, kNormScale));
  const uint32_t chunk = head_chunk_rows(vocab);
  // Chunks of rows also keep every GEMM's C under 2^31 elements.
  const bool all_rows = out.logits && out.logit_rows.empty();
  for (uint32_t r0 = 0; r0 < rows; r0 += chunk) {
    const uint32_t n = std::min(chunk, rows - r0);
    float* logits = all_rows ? out.logits + uint64_t(r0) * vocab : head_chunk.as<float>();
    blas->linear(normed + uint64_t(r0) * h, n, h, weights.lm_head(), vocab, logits, true, vocab);
    if (greedy) HSRING_CUDA_CHECK(gpu::launch_argmax(logits, n, vocab, out.greedy + r0, s));
    // The asked rows of this chunk, before the next chunk's product overwrites it.
    for (size_t i = 0; out.logits && i < out.logit_rows.size(); ++i) {
      const auto row = uint32_t(out.logit_rows[i]);
      if (row < r0 || row >= r0 + n) continue;
      HSRING_CUDA_CHECK(cudaMemcpyAsync(out.logits + i * vocab, logits + uint64_t(row - r0) * vocab,
                                        uint64_t(vocab) * sizeof(float), cudaMemcpyDeviceToDevice,
                                        s));
    }
  }
}

CudaTargetModel::CudaTargetModel(ModelConfig config, const ModelWeights& weights, int gpu)
    : impl_(std::make_unique<Impl>(std::move(config), gpu)) {
  if (std::string why = check_weights(impl_->config, weights); !why.empty())
    throw Error(Errc::kModelBadConfig,
                "weights do not fit model '" + impl_->config.name + "': " + why);
  impl_->weights.upload(impl_->config, weights, impl_->stream.get());
}

CudaTargetModel::CudaTargetModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<CudaTargetModel> CudaTargetModel::with_random_weights(ModelConfig config,
                                                                      uint64_t seed, int gpu) {
  auto impl = std::make_unique<Impl>(std::move(config), gpu);
  impl->weights.randomize(impl->config, seed, impl->stream.get());
  return std::unique_ptr<CudaTargetModel>(new CudaTargetModel(std::move(impl)));
}

CudaTargetModel::~CudaTargetModel() {
  // A forward enqueued on a caller's stream may still use the memory about to be freed.
  if (impl_ && impl_->forward_pending) (void)cudaEventSynchronize(impl_->forward_done.get());
}

const ModelConfig& CudaTargetModel::config() const { return impl_->config; }
int CudaTargetModel::gpu() const { return impl_->gpu; }
uint64_t CudaTargetModel::weight_bytes() const { return impl_->weights.bytes(); }

void CudaTargetModel::reserve(uint32_t max_tokens) {
  HSRING_CUDA_CHECK(cudaSetDevice(impl_->gpu));
  impl_->grow(max_tokens);
}

ModelWeights CudaTargetModel::download_weights() const {
  HSRING_CUDA_CHECK(cudaSetDevice(impl_->gpu));
  return impl_->weights.download(impl_->config);
}

void CudaTargetModel::forward_device(const PackedBatch& batch, const ForwardRequest& request,
                                     cudaStream_t stream, const DeviceCapture& out,
                                     const CachedPrefix* prefix) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  validate_batch(batch, c);
  validate_request(request, c);
  const size_t k_count = request.capture_layers.size();
  if (out.layers.size() != k_count)
    bad_capture(fmt::format("{} regions for {} captured layers", out.layers.size(), k_count));
  const uint32_t elem = dtype_size(out.dtype);
  if (elem == 0 && k_count > 0) bad_capture(fmt::format("unknown dtype {}", uint32_t(out.dtype)));
  for (size_t k = 0; k < k_count; ++k) {
    if (!out.layers[k].data) bad_capture(fmt::format("region {} is null", k));
    if (out.layers[k].row_pitch_bytes < uint64_t(c.hidden_size) * elem)
      bad_capture(fmt::format("region {} has a row pitch of {} bytes, under one row of {}", k,
                              out.layers[k].row_pitch_bytes, uint64_t(c.hidden_size) * elem));
  }
  if (request.greedy && !out.greedy) bad_capture("greedy labels requested without a buffer");
  if (request.logits && !out.logits) bad_capture("logits requested without a buffer");
  for (const int32_t row : out.logit_rows)
    if (row < 0 || uint64_t(row) >= batch.tokens.size())
      bad_capture(
          fmt::format("logit row {} outside the batch of {} rows", row, batch.tokens.size()));

  if (c.has_experts()) {
    // The grouped GEMM's grid has one row of blocks per possible tile (at most 65535).
    const uint64_t slots = uint64_t(batch.tokens.size()) * c.moe.experts_per_token;
    const uint64_t most = (65535 - uint64_t(c.moe.num_experts)) * kExpertRowTile;
    if (slots > most)
      throw Error(Errc::kModel,
                  fmt::format("a batch of {} tokens routes {} token-expert pairs, more than the "
                              "CUDA mixture-of-experts MLP's {}; split it",
                              batch.tokens.size(), slots, most));
  }
  HSRING_CUDA_CHECK(cudaSetDevice(m.gpu));
  const auto rows = uint32_t(batch.tokens.size());
  m.prefix = nullptr;
  if (prefix) {
    if (const std::string problem = cache_problem(c); !problem.empty())
      throw Error(Errc::kModelBadConfig,
                  "model '" + c.name + "' cannot decode with a KV cache: " + problem);
    const CudaKvCache& cache = *prefix->cache;
    m.cached = cached_layout(batch.doc_offsets, batch.positions, prefix->slot, prefix->cached,
                             cache.sequences(), cache.capacity(), m.attention_pack);
    m.tiles = m.cached.tiles;
  } else {
    m.tiles = attention_tiles(batch.doc_offsets.data(), batch.doc_offsets.size(), m.attention_pack);
  }
  const auto tile_count = uint32_t(m.tiles.size());
  m.grow(rows);
  if (prefix) {
    // A pageable copy: it has left m.cached.rows when the call returns.
    HSRING_CUDA_CHECK(cudaMemcpyAsync(prefix->cache->row_index(), m.cached.rows.data(),
                                      rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    m.prefix = prefix;
  }
  ForwardActivations& a = m.activations;
  // Dynamic NTK RoPE: each document's base, from its length (rope.h).
  m.rope_bases =
      dynamic_rope_bases(c.rope, c.rope_theta, c.rope_dim(), batch.positions, batch.doc_offsets);
  DeltaInputs delta;
  if (c.hybrid()) {
    const int32_t* offsets = batch.doc_offsets.data();
    const size_t count = batch.doc_offsets.size();
    m.delta_chunks = delta_chunks(offsets, count);
    m.delta_documents = delta_documents(offsets, count);
    m.doc_starts = delta_doc_starts(offsets, count);
    delta = {m.delta_chunks, m.delta_documents, m.doc_starts};
  }
  m.staging.upload(batch.tokens, batch.positions, m.tiles, m.rope_bases, delta, a.inputs.data(),
                   stream);
  const BatchInputs layout(rows, tile_count, !m.rope_bases.empty(), uint32_t(delta.chunks.size()),
                           uint32_t(delta.documents.size()));

  HSRING_CUDA_CHECK(gpu::launch_gather_rows(  // the embedding lookup, widened to fp32
      m.weights.embed(), reinterpret_cast<const int32_t*>(a.inputs.data() + layout.tokens_at), rows,
      c.hidden_size, a.residual.as<float>(), stream));
  // RoPE angles depend on positions (and dynamic NTK's document lengths) only: once per
  // forward, shared by every layer.
  HSRING_CUDA_CHECK(gpu::launch_rope_table(
      reinterpret_cast<const int32_t*>(a.inputs.data() + layout.positions_at), rows,
      m.inv_freq.as<double>(),
      m.rope_bases.empty()
          ? nullptr
          : reinterpret_cast<const double*>(a.inputs.data() + layout.rope_bases_at),
      c.rope.attention_factor, c.rope_dim() / 2, a.rope_cos.as<float>(), a.rope_sin.as<float>(),
      stream));
  m.blas->bind(stream);

  // The last layer any output needs: layers past it only matter for the LM head.
  const bool head = request.logits || request.greedy;
  uint32_t last = head ? c.num_layers : 0;
  for (int32_t id : request.capture_layers) last = std::max(last, uint32_t(id) + 1);
  for (uint32_t layer = 0; layer < last; ++layer) {
    m.run_layer(layer, rows, layout, stream);
    for (size_t k = 0; k < k_count; ++k)
      if (request.capture_layers[k] == int32_t(layer))
        HSRING_CUDA_CHECK(launch_capture(a.residual.as<float>(), rows, c.hidden_size, out.dtype,
                                         out.layers[k].data, out.layers[k].row_pitch_bytes,
                                         stream));
  }
  if (head) m.run_head(rows, out, request.greedy, stream);
  m.prefix = nullptr;
  HSRING_CUDA_CHECK(cudaEventRecord(m.forward_done.get(), stream));
  m.forward_pending = true;
}

void CudaTargetModel::forward(const PackedBatch& batch, const ForwardRequest& request,
                              ForwardOutput& out) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  validate_batch(batch, c);
  validate_request(request, c);
  HSRING_CUDA_CHECK(cudaSetDevice(m.gpu));
  const uint64_t rows = batch.tokens.size();
  const uint64_t h = c.hidden_size;
  const size_t k_count = request.capture_layers.size();
  auto fit = [](gpu::DeviceBuffer& buffer, uint64_t bytes) {
    if (buffer.size() < bytes) {
      buffer = gpu::DeviceBuffer();
      buffer = gpu::DeviceBuffer::allocate(bytes);
    }
  };
  // The previous forward ran on m.stream and was waited for: these may be replaced freely.
  fit(m.host_captured, k_count * rows * h * sizeof(float));
  if (request.greedy) fit(m.host_greedy, rows * sizeof(int32_t));
  if (request.logits) fit(m.host_logits, rows * c.vocab_size * sizeof(float));

  DeviceCapture capture;
  capture.dtype = DType::kFP32;
  for (size_t k = 0; k < k_count; ++k)
    capture.layers.push_back({m.host_captured.data() + k * rows * h * sizeof(float), h * 4});
  capture.greedy = request.greedy ? m.host_greedy.as<int32_t>() : nullptr;
  capture.logits = request.logits ? m.host_logits.as<float>() : nullptr;
  cudaStream_t stream = m.stream.get();
  forward_device(batch, request, stream, capture);

  out.token_count = uint32_t(rows);
  out.hidden_size = uint32_t(h);
  out.captured.resize(k_count);
  for (size_t k = 0; k < k_count; ++k) {
    out.captured[k].resize(rows * h);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(out.captured[k].data(), capture.layers[k].data,
                                      rows * h * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }
  out.greedy.clear();
  out.logits.clear();
  if (request.greedy) {
    out.greedy.resize(rows);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(out.greedy.data(), capture.greedy, rows * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream));
  }
  if (request.logits) {
    out.logits.resize(rows * c.vocab_size);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), capture.logits,
                                      out.logits.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream));
  }
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::unique_ptr<CudaTargetModel> open_cuda_model(const std::string& spec, uint64_t seed, int gpu) {
  ModelConfig config = model_config_of(spec);
  check_config(config);  // before reading a checkpoint the forward would refuse
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    const ModelWeights weights = load_hf_weights(spec, config);
    return std::make_unique<CudaTargetModel>(std::move(config), weights, gpu);
  }
  return CudaTargetModel::with_random_weights(std::move(config), seed, gpu);
}

}  // namespace hsring
