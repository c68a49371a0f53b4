// hf_forward_dump MODEL_DIR OFFSETS TOKENS OUT [--cuda]: runs hsring's fp32 CPU forward (or,
// with --cuda in a CUDA build, the CUDA forward on GPU 0) on a Hugging Face folder over one
// packed batch and writes every decoder layer's output, the logits and the greedy labels,
// for hf_parity_test.py to compare with transformers. OFFSETS and TOKENS are
// comma-separated (cu_seqlens, token ids); positions restart at 0 in each document.
// OUT: int32 T, H, V, L; fp32 [L, T, H] layers; fp32 [T, V] logits; int32 [T] labels.
// Exit 1 with the message on a model or CUDA error, 3 when --cuda finds no GPU (a skip).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/cpu_target_model.h"
#ifdef HSRING_HAVE_CUDA
#include "gpu/cuda_check.h"
#include "gpu/device.h"
#include "model/cuda_target_model.h"
#endif

namespace {

std::vector<int32_t> parse_list(const std::string& text) {
  std::vector<int32_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoi(item));
  return values;
}

template <class T>
void write(std::ofstream& out, const T* data, size_t count) {
  out.write(reinterpret_cast<const char*>(data), std::streamsize(count * sizeof(T)));
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc == 6 && std::string(argv[5]) == "--cuda";
  if (argc != 5 && !cuda) {
    std::cerr << "usage: hf_forward_dump MODEL_DIR OFFSETS TOKENS OUT [--cuda]\n";
    return 2;
  }
  try {
    std::unique_ptr<hsring::TargetModel> model;
    if (cuda) {
#ifdef HSRING_HAVE_CUDA
      if (const auto gpus = hsring::gpu::probe_gpus(); gpus.count == 0) {
        std::cerr << "no GPU: " << gpus.why_none << "\n";
        return 3;
      }
      model = hsring::open_cuda_model(argv[1], 0, 0);
#else
      std::cerr << "--cuda: this build has no CUDA\n";
      return 3;
#endif
    } else {
      model = hsring::open_cpu_model(argv[1], 0, {1});
    }
    const hsring::ModelConfig& c = model->config();
    const std::vector<int32_t> offsets = parse_list(argv[2]);
    const std::vector<int32_t> tokens = parse_list(argv[3]);
    std::vector<int32_t> positions(tokens.size());
    for (size_t d = 0; d + 1 < offsets.size(); ++d)
      for (int32_t t = offsets[d]; t < offsets[d + 1]; ++t) positions[size_t(t)] = t - offsets[d];
    hsring::ForwardRequest request;
    request.capture_layers.resize(c.num_layers);
    std::iota(request.capture_layers.begin(), request.capture_layers.end(), 0);
    request.logits = true;
    request.greedy = true;
    hsring::ForwardOutput result;
    model->forward({tokens, positions, offsets}, request, result);

    std::ofstream out(argv[4], std::ios::binary);
    const int32_t header[4] = {int32_t(tokens.size()), int32_t(c.hidden_size),
                               int32_t(c.vocab_size), int32_t(c.num_layers)};
    write(out, header, 4);
    for (const std::vector<float>& layer : result.captured) write(out, layer.data(), layer.size());
    write(out, result.logits.data(), result.logits.size());
    write(out, result.greedy.data(), result.greedy.size());
    if (!out) {
      std::cerr << "cannot write " << argv[4] << "\n";
      return 1;
    }
  } catch (const std::exception& e) {  // Error: model or CUDA
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
