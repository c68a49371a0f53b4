#include "checkpoint/dflash_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/dflash_modeling.h"
#include "checkpoint/safetensors_export.h"
#include "common/error.h"
#include "model/float_convert.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "tests/common/planted_files.h"
#include "tests/common/special_files.h"
#include "train/dflash_params.h"

namespace hsring::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Drafter {
  train::DflashConfig config;
  train::ParamLayout layout;
  std::vector<float> params;
  std::vector<int32_t> layer_ids = {1, 4};
};

Drafter small_drafter() {
  Drafter d;
  d.config = train::default_dflash_config(named_model_config("tiny"), 2, 2);
  d.layout = train::dflash_param_layout(d.config);
  d.params.resize(d.layout.total);
  train::init_dflash_params<float>(d.layout, 5, d.params);
  // Norm weights away from 1, so a swapped tensor shows.
  for (const auto& p : d.layout.tensors)
    if (p.shape.size() == 1)
      for (size_t i = 0; i < p.size; ++i) d.params[p.offset + i] = 0.5f + 0.01f * float(i % 7);
  return d;
}

class DflashExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hsring-dflash-export-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const Drafter& d) {
    write_dflash_export(dir_.string(), d.config, d.layer_ids, d.layout, d.params,
                        {.num_target_layers = 6});
  }
  json config() const {
    std::ifstream in(dir_ / "config.json");
    return json::parse(in);
  }
  void set_config(const json& j) const {
    std::ofstream out(dir_ / "config.json", std::ios::trunc);
    out << j.dump(2);
  }
  // Rewrites model.safetensors as `edit` changes its tensors.
  void edit_tensors(const std::function<void(std::vector<Tensor>&)>& edit) const {
    const DflashExport e = read_dflash_export(dir_.string());
    std::vector<Tensor> tensors;
    for (const auto& p : e.layout.tensors)
      tensors.push_back({p.name, p.shape,
                         std::vector<float>(e.params.begin() + std::ptrdiff_t(p.offset),
                                            e.params.begin() + std::ptrdiff_t(p.offset + p.size))});
    edit(tensors);
    ExportOptions o;
    o.dtype = ExportDtype::kBF16;
    export_safetensors((dir_ / "model.safetensors").string(), tensors, o);
  }
  // read_dflash_export must throw `code` with a message holding `what` and the file's name.
  void expect_refused(Errc code, const std::string& what, const std::string& file) const {
    try {
      read_dflash_export(dir_.string());
      FAIL() << "accepted; expected: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(DflashExportTest, RoundTripIsBitwiseAfterBf16Rounding) {
  const Drafter d = small_drafter();
  write(d);
  const DflashExport e = read_dflash_export(dir_.string());
  EXPECT_EQ(e.layer_ids, d.layer_ids);
  EXPECT_EQ(e.num_target_layers, 6u);
  EXPECT_EQ(train::describe(e.config), train::describe(d.config));
  EXPECT_EQ(e.config.rope_theta, d.config.rope_theta);
  EXPECT_EQ(e.config.rms_norm_eps, d.config.rms_norm_eps);
  ASSERT_EQ(e.params.size(), d.params.size());
  for (size_t i = 0; i < d.params.size(); ++i)
    ASSERT_EQ(e.params[i], bf16_to_float(float_to_bf16(d.params[i]))) << "element " << i;
  // No temporary left beside it.
  for (const auto& entry : fs::directory_iterator(dir_.parent_path()))
    EXPECT_EQ(entry.path().filename().string().find("." + dir_.filename().string() + ".tmp"),
              std::string::npos);
}

TEST_F(DflashExportTest, FolderHasExactlyTheDflashKeysAndTensors) {
  const Drafter d = small_drafter();
  write(d);
  const json j = config();
  EXPECT_EQ(j.at("architectures"), json::array({"DFlashDraftModel"}));
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.at("hidden_size"), 128);
  EXPECT_EQ(j.at("vocab_size"), 256);
  EXPECT_EQ(j.at("num_hidden_layers"), 2);
  EXPECT_EQ(j.at("num_target_layers"), 6);
  EXPECT_EQ(j.at("head_dim"), 32);
  EXPECT_EQ(j.at("num_attention_heads"), 4);
  EXPECT_EQ(j.at("num_key_value_heads"), 2);
  EXPECT_EQ(j.at("intermediate_size"), 384);
  EXPECT_EQ(j.at("block_size"), 16);
  EXPECT_EQ(j.at("is_causal"), false);
  EXPECT_EQ(j.at("layer_types"), json::array({"full_attention", "full_attention"}));
  EXPECT_EQ(j.at("dflash_config").at("target_layer_ids"), json::array({1, 4}));
  EXPECT_EQ(j.at("dflash_config").at("mask_token_id"), 255);
  EXPECT_FALSE(j.at("dflash_config").contains("mask_token"));  // no tokenizer text given
  EXPECT_EQ(j.at("auto_map").at("AutoModel"), "modeling_dflash.DFlashDraftModel");
  EXPECT_TRUE(fs::is_regular_file(dir_ / "modeling_dflash.py"));
  EXPECT_EQ(fs::file_size(dir_ / "modeling_dflash.py"), dflash_modeling_source().size());
  EXPECT_NE(dflash_modeling_source().find("class DFlashDraftModel(PreTrainedModel)"),
            std::string::npos);
  EXPECT_EQ(j.at("dflash_config").at("block_size"), 16);
  EXPECT_EQ(j.at("rope_parameters").at("rope_type"), "default");
  EXPECT_EQ(j.at("rope_parameters").at("rope_theta"), j.at("rope_theta"));
  EXPECT_EQ(j.at("torch_dtype"), "bfloat16");
  EXPECT_TRUE(j.contains("rms_norm_eps") && j.contains("max_position_embeddings"));

  const auto st = SafetensorsFile::open(dir_ / "model.safetensors");
  std::set<std::string> names;
  for (const TensorInfo& t : st->tensors()) {
    names.insert(t.name);
    EXPECT_EQ(t.dtype, "BF16") << t.name;
  }
  std::set<std::string> expected = {"fc.weight", "hidden_norm.weight", "norm.weight"};
  for (const char* layer : {"layers.0.", "layers.1."})
    for (const char* n :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate_proj.weight",
          "mlp.up_proj.weight", "mlp.down_proj.weight"})
      expected.insert(std::string(layer) + n);
  EXPECT_EQ(names, expected);
  EXPECT_EQ(st->find("fc.weight")->shape, (std::vector<int64_t>{128, 256}));
}

TEST_F(DflashExportTest, MaskTokenTextIsWrittenBesideItsIdAndReadBack) {
  const Drafter d = small_drafter();
  write_dflash_export(dir_.string(), d.config, d.layer_ids, d.layout, d.params,
                      {.num_target_layers = 6, .mask_token = "<|MASK|>"});
  EXPECT_EQ(config().at("dflash_config").at("mask_token"), "<|MASK|>");
  EXPECT_EQ(read_dflash_export(dir_.string()).mask_token, "<|MASK|>");
  json j = config();
  j["dflash_config"]["mask_token"] = 7;
  set_config(j);
  expect_refused(Errc::kCheckpoint, "dflash_config.mask_token", "config.json");
}

TEST_F(DflashExportTest, ReplacesAnExistingExportWhole) {
  Drafter d = small_drafter();
  write(d);
  d.params[0] = 3.0f;
  d.layer_ids = {2, 5};
  write(d);
  const DflashExport e = read_dflash_export(dir_.string());
  EXPECT_EQ(e.params[0], 3.0f);
  EXPECT_EQ(e.layer_ids, (std::vector<int32_t>{2, 5}));
}

// The export's staging folder was .NAME.tmp-PID-COUNTER, predictable: a symlink planted
// there to another folder blocked the export (and its files were one step from landing in
// the other folder). Staging folders are now new folders of random names.
TEST_F(DflashExportTest, PlantedStagingNamesNeitherBlockNorReceiveTheExport) {
  const fs::path elsewhere = dir_.string() + "-elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directories(dir_.parent_path());
  const std::string victim = (elsewhere / "victim").string();
  hsring::testing::make_victim(victim);
  for (int counter = 0; counter < 100; ++counter)
    hsring::testing::plant_symlink(
        (dir_.parent_path() / ("." + dir_.filename().string() + ".tmp-" +
                               std::to_string(::getpid()) + "-" + std::to_string(counter)))
            .string(),
        elsewhere.string());
  const Drafter d = small_drafter();
  write(d);
  write(d);  // replacing the first
  EXPECT_EQ(read_dflash_export(dir_.string()).params.size(), d.params.size());
  EXPECT_TRUE(hsring::testing::victim_untouched(victim));
  EXPECT_EQ(std::distance(fs::directory_iterator(elsewhere), fs::directory_iterator()), 1);
  for (const auto& entry : fs::directory_iterator(dir_.parent_path()))
    if (entry.path().filename().string().starts_with("." + dir_.filename().string() + ".tmp-"))
      fs::remove(entry.path());
  fs::remove_all(elsewhere);
}

TEST_F(DflashExportTest, CarriesTheRunAndStepThatWroteIt) {
  const Drafter d = small_drafter();
  write(d);
  EXPECT_EQ(read_dflash_export(dir_.string()).origin, std::nullopt);
  EXPECT_EQ(read_dflash_origin(dir_.string()), std::nullopt);
  const DflashOrigin origin{"ring \"a\"@1234", 77};
  write_dflash_export(dir_.string(), d.config, d.layer_ids, d.layout, d.params,
                      {.num_target_layers = 6, .origin = origin});
  EXPECT_EQ(read_dflash_export(dir_.string()).origin, origin);
  EXPECT_EQ(read_dflash_origin(dir_.string()), origin);
  json j = config();
  j["hsring_origin"] = {{"run", 5}, {"step", 1}};
  set_config(j);
  expect_refused(Errc::kCheckpoint, "hsring_origin", "config.json");
  j["hsring_origin"] = {{"run", "x"}};
  set_config(j);
  expect_refused(Errc::kCheckpoint, "hsring_origin.step", "config.json");
}

TEST_F(DflashExportTest, WriterRefusesInconsistentInput) {
  Drafter d = small_drafter();
  const auto refused = [&](const Drafter& x, uint32_t layers) {
    EXPECT_THROW(write_dflash_export(dir_.string(), x.config, x.layer_ids, x.layout, x.params,
                                     {.num_target_layers = layers}),
                 Error);
    EXPECT_FALSE(fs::exists(dir_));
  };
  refused(d, 4);  // layer id 4 outside 4 layers
  Drafter short_params = d;
  short_params.params.pop_back();
  refused(short_params, 6);
  Drafter ids = d;
  ids.layer_ids = {1};
  refused(ids, 6);
  Drafter layout = d;
  layout.config.num_layers = 1;  // the layout is of 2 layers
  refused(layout, 6);
}

TEST_F(DflashExportTest, ReaderRefusesMissingFiles) {
  expect_refused(Errc::kCheckpoint, "no such folder", dir_.string());
  write(small_drafter());
  fs::remove(dir_ / "model.safetensors");
  EXPECT_THROW(read_dflash_export(dir_.string()), std::exception);
  fs::remove(dir_ / "config.json");
  expect_refused(Errc::kCheckpoint, "no such file", "config.json");
}

TEST_F(DflashExportTest, AFifoInPlaceOfAFileIsRefusedWithoutBlocking) {
  const hsring::testing::HangGuard guard;
  for (const std::string name : {"config.json", "model.safetensors"}) {
    fs::remove_all(dir_);
    write(small_drafter());
    hsring::testing::plant_fifo((dir_ / name).string());
    expect_refused(name == "config.json" ? Errc::kCheckpoint : Errc::kModel,
                   "a FIFO (named pipe), not a regular file", name);
  }
}

TEST_F(DflashExportTest, ReaderRefusesBadConfigs) {
  write(small_drafter());
  const json good = config();
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    set_config(j);
  };
  set_config(json::parse("[1]"));
  expect_refused(Errc::kCheckpoint, "not a JSON object", "config.json");
  { std::ofstream(dir_ / "config.json", std::ios::trunc) << "{\"architectures\": ["; }
  expect_refused(Errc::kCheckpoint, "not JSON", "config.json");
  // The strict reading (model/json.h): a key given twice is refused, not read as the last.
  {
    std::ofstream(dir_ / "config.json", std::ios::trunc)
        << R"({"hidden_size": 8, "hidden_size": 16})";
  }
  expect_refused(Errc::kCheckpoint, "duplicate key", "config.json");
  with([](json& j) { j["architectures"] = {"Qwen3ForCausalLM"}; });
  expect_refused(Errc::kCheckpoint, "not a DFlash drafter", "config.json");
  with([](json& j) { j.erase("architectures"); });
  expect_refused(Errc::kCheckpoint, "missing key 'architectures'", "config.json");
  for (const char* key : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "intermediate_size", "rms_norm_eps",
                          "num_target_layers", "max_position_embeddings", "dflash_config"}) {
    with([&](json& j) { j.erase(key); });
    expect_refused(Errc::kCheckpoint, std::string("missing key '") + key + "'", "config.json");
  }
  for (const char* key : {"target_layer_ids", "mask_token_id", "block_size"}) {
    with([&](json& j) { j["dflash_config"].erase(key); });
    expect_refused(Errc::kCheckpoint, std::string("missing key 'dflash_config.") + key,
                   "config.json");
  }
  with([](json& j) {
    j.erase("rope_theta");
    j.erase("rope_parameters");
  });
  expect_refused(Errc::kCheckpoint, "rope_theta", "config.json");
  with([](json& j) { j["hidden_size"] = "128"; });
  expect_refused(Errc::kCheckpoint, "not a non-negative integer", "config.json");
  with([](json& j) { j["model_type"] = "llama"; });
  expect_refused(Errc::kCheckpoint, "model_type", "config.json");
  with([](json& j) { j["dflash_config"]["target_layer_ids"] = {1, 6}; });
  expect_refused(Errc::kCheckpoint, "num_target_layers", "config.json");
  with([](json& j) { j["block_size"] = 8; });
  expect_refused(Errc::kCheckpoint, "differ", "config.json");
  with([](json& j) { j["rope_parameters"]["rope_theta"] = 1.0; });
  expect_refused(Errc::kCheckpoint, "differ", "config.json");
  with([](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; });
  expect_refused(Errc::kCheckpoint, "rope_type", "config.json");
  with([](json& j) { j["is_causal"] = true; });
  expect_refused(Errc::kCheckpoint, "is_causal", "config.json");
  with([](json& j) { j["layer_types"] = {"sliding_attention", "full_attention"}; });
  expect_refused(Errc::kCheckpoint, "layer_types", "config.json");
  with([](json& j) { j["dflash_config"]["mask_token_id"] = 256; });
  expect_refused(Errc::kCheckpoint, "not a usable DFlash drafter", "config.json");
  // A changed shape no longer matches the tensors.
  with([](json& j) { j["intermediate_size"] = 256; });
  expect_refused(Errc::kCheckpoint, "mlp.gate_proj.weight has shape", "model.safetensors");
}

// Sizes read from config.json are bounded before they reach an allocation: 100,000 layer
// ids made `hsring eval` touch 6.4 GB before refusing; a repeated id was accepted; a
// max_position_embeddings of 0 too (issue 33).
TEST_F(DflashExportTest, ReaderBoundsTheSizesItReadsBeforeAllocating) {
  write(small_drafter());
  const json good = config();
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    set_config(j);
  };
  with([](json& j) {
    j["num_target_layers"] = 200000;
    j["dflash_config"]["target_layer_ids"] = std::vector<int>(100000, 1);
  });
  expect_refused(Errc::kCheckpoint, "num_target_layers is 200000, more than the 1024",
                 "config.json");
  with([](json& j) {
    std::vector<int> ids(1000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int(i % 6);
    j["dflash_config"]["target_layer_ids"] = ids;
  });
  expect_refused(Errc::kCheckpoint, "lists 1000 layers of a target of 6", "config.json");
  with([](json& j) { j["dflash_config"]["target_layer_ids"] = {1, 1}; });
  expect_refused(Errc::kCheckpoint, "lists layer 1 twice", "config.json");
  with([](json& j) { j["max_position_embeddings"] = 0; });
  expect_refused(Errc::kCheckpoint, "'max_position_embeddings' is 0", "config.json");
  with([](json& j) { j["max_position_embeddings"] = -1; });
  expect_refused(Errc::kCheckpoint, "not a non-negative integer", "config.json");
  // Shapes the tensors do not have are refused before the parameters are allocated: these
  // MLPs would ask for terabytes.
  with([](json& j) {
    j["intermediate_size"] = 1 << 30;
    j["num_hidden_layers"] = 1024;
    j.erase("layer_types");
  });
  expect_refused(Errc::kCheckpoint, "has shape", "model.safetensors");
}

// NaN drafter weights gave tau 1.0 and exit 0 (issue 33).
TEST_F(DflashExportTest, ReaderRefusesWeightsThatAreNotFinite) {
  write(small_drafter());
  edit_tensors([](std::vector<Tensor>& t) { t.at(1).data.at(3) = std::nanf(""); });
  try {
    read_dflash_export(dir_.string());
    FAIL() << "NaN weights accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds NaN at element 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

// Property: config.json cut anywhere, with bytes changed, or with numbers grown by digits
// (the way 100,000 layer ids or a vocabulary of 10^12 arrive) is read or refused with an
// Error; never std::bad_alloc, never another exception, never a crash.
TEST_F(DflashExportTest, MutatedConfigsAreReadOrRefusedNeverACrash) {
  write(small_drafter());
  const std::string good = config().dump(2);
  std::mt19937_64 rng(33);
  for (int round = 0; round < 400; ++round) {
    std::string text = good;
    switch (round % 3) {
      case 0:
        text.resize(rng() % text.size());
        break;
      case 1:
        for (int k = 0; k < 3; ++k) text[rng() % text.size()] = char(rng());
        break;
      default: {
        // Grow a number: digits inserted after a digit.
        const size_t at = text.find_first_of("0123456789", rng() % text.size());
        if (at != std::string::npos) text.insert(at, std::to_string(rng() % 1000000000));
      }
    }
    { std::ofstream(dir_ / "config.json", std::ios::trunc) << text; }
    try {
      (void)read_dflash_export(dir_.string());
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an Error: " << e.what() << "\nconfig.json:\n" << text;
    }
  }
}

TEST_F(DflashExportTest, ReaderRefusesMissingExtraAndMisshapenTensors) {
  write(small_drafter());
  edit_tensors([](std::vector<Tensor>& t) {
    std::erase_if(t, [](const Tensor& x) { return x.name == "layers.1.self_attn.k_norm.weight"; });
  });
  expect_refused(Errc::kCheckpoint, "missing tensor layers.1.self_attn.k_norm.weight",
                 "model.safetensors");
  write(small_drafter());
  edit_tensors([](std::vector<Tensor>& t) {
    t.push_back({"embed_tokens.weight", {256, 128}, std::vector<float>(256 * 128, 0.0f)});
  });
  expect_refused(Errc::kCheckpoint, "unexpected tensor embed_tokens.weight", "model.safetensors");
  write(small_drafter());
  edit_tensors([](std::vector<Tensor>& t) {
    for (Tensor& x : t)
      if (x.name == "fc.weight") x.shape = {256, 128};
  });
  expect_refused(Errc::kCheckpoint, "fc.weight has shape [256, 128]", "model.safetensors");
}

}  // namespace
}  // namespace hsring::checkpoint
