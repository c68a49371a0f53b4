// choose_mask_token over tokenizer files written as the families ship them (Qwen, Llama 3,
// a declared mask token, none), read back by read_tokenizer_vocab.
#include "train/dflash_mask_token.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace hsring::train {
namespace {

namespace fs = std::filesystem;

class MaskTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hsring-mask-token-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }
  // A byte-level BPE tokenizer.json: vocabulary "a".."e" at 0..4, then `added`.
  void tokenizer_json(const std::string& added) const {
    write("tokenizer.json",
          R"({"version": "1.0", "added_tokens": [)" + added +
              R"(], "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4},
              "merges": []}})");
  }
  TokenizerVocab vocab() const {
    auto v = read_tokenizer_vocab(dir_);
    EXPECT_TRUE(v.has_value());
    return v ? *v : TokenizerVocab{};
  }
  fs::path dir_;
};

std::string added(int id, const std::string& text) {
  return R"({"id": )" + std::to_string(id) + R"(, "content": ")" + text +
         R"(", "special": true, "normalized": false})";
}

TEST_F(MaskTokenTest, QwenFamilyTakesMaskAtTheTokenizersNextIdBelowTheEmbeddingRows) {
  tokenizer_json(added(5, "<|endoftext|>") + "," + added(6, "<|im_start|>"));
  const TokenizerVocab v = vocab();
  EXPECT_EQ(v.next_id, 7);
  const MaskToken m = choose_mask_token(&v, 16, -1);  // rows 7..15 have no text, as in Qwen3
  EXPECT_EQ(m.id, 7);
  EXPECT_EQ(m.text, "<|MASK|>");
  EXPECT_EQ(mask_token_text(v, 7), "<|MASK|>");
  EXPECT_EQ(mask_token_text(v, 8), std::nullopt);
}

TEST_F(MaskTokenTest, LlamaFamilyTakesTheLastReservedSpecialToken) {
  tokenizer_json(added(5, "<|begin_of_text|>") + "," + added(6, "<|reserved_special_token_0|>") +
                 "," + added(7, "<|reserved_special_token_1|>") + "," + added(8, "<|eot_id|>"));
  const TokenizerVocab v = vocab();
  const MaskToken m = choose_mask_token(&v, 9, -1);  // no free row, as in Llama 3
  EXPECT_EQ(m.id, 7);
  EXPECT_EQ(m.text, "<|reserved_special_token_1|>");
}

TEST_F(MaskTokenTest, DeclaredMaskTokenWins) {
  tokenizer_json(added(5, "<unused0>") + "," + added(6, "<mask>"));
  write("tokenizer_config.json", R"({"mask_token": {"content": "<mask>", "special": true}})");
  const TokenizerVocab v = vocab();
  const MaskToken m = choose_mask_token(&v, 32, -1);
  EXPECT_EQ(m.id, 6);
  EXPECT_EQ(m.text, "<mask>");
}

TEST_F(MaskTokenTest, AddedTokensDecoderAloneNamesTokens) {
  write("tokenizer_config.json",
        R"({"added_tokens_decoder": {"3": {"content": "<|MASK|>", "special": true}}})");
  const TokenizerVocab v = vocab();
  const MaskToken m = choose_mask_token(&v, 10, -1);
  EXPECT_EQ(m.id, 3);
  EXPECT_EQ(m.text, "<|MASK|>");
}

TEST_F(MaskTokenTest, NoTokenizerKeepsTheLastRowWithoutText) {
  EXPECT_FALSE(read_tokenizer_vocab(dir_).has_value());
  const MaskToken m = choose_mask_token(nullptr, 257, -1);
  EXPECT_EQ(m.id, 256);
  EXPECT_EQ(m.text, "");
  EXPECT_EQ(choose_mask_token(nullptr, 257, 3).id, 3);
}

TEST_F(MaskTokenTest, ExplicitIdMustHaveText) {
  tokenizer_json(added(5, "<|endoftext|>"));
  const TokenizerVocab v = vocab();
  EXPECT_EQ(choose_mask_token(&v, 16, 5).text, "<|endoftext|>");
  EXPECT_EQ(choose_mask_token(&v, 16, 6).text, "<|MASK|>");    // the next id: SGLang adds it there
  EXPECT_FALSE(choose_mask_token(&v, 16, 2).warning.empty());  // "c": an ordinary token
  try {
    choose_mask_token(&v, 16, 9);
    FAIL() << "an id without text was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUsage);
    EXPECT_NE(std::string(e.what()).find("has no text"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(choose_mask_token(&v, 16, 16), Error);  // outside the vocabulary
}

TEST_F(MaskTokenTest, NothingToChooseIsRefusedWithTheRemedy) {
  tokenizer_json(added(5, "<|endoftext|>"));
  const TokenizerVocab v = vocab();
  try {
    choose_mask_token(&v, 6, -1);
    FAIL() << "a mask token was chosen from a full vocabulary";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kUsage);
    EXPECT_NE(std::string(e.what()).find("--mask-token-id"), std::string::npos) << e.what();
  }
}

TEST_F(MaskTokenTest, MalformedTokenizerIsRefusedNamingTheFile) {
  write("tokenizer.json", R"({"added_tokens": [{"id": "x", "content": "<a>"}]})");
  try {
    read_tokenizer_vocab(dir_);
    FAIL() << "a malformed tokenizer.json was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsring::train
