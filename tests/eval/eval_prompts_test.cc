// Where evaluation prompts come from (eval/eval_prompts.h), the held-out split of a --data
// corpus (data/held_out.h), tau's bootstrap interval (eval/acceptance_interval.h) and the
// summary of decoded prompts (eval/eval_report.h), on corpora written here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../data/test_corpus.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/held_out.h"
#include "eval/acceptance_interval.h"
#include "eval/eval_prompts.h"
#include "eval/eval_report.h"

namespace hsring::eval {
namespace {

using data::testing::TempDir;

// A one-shard corpus whose document d holds tokens 1000 d + 0, 1, ... (vocabulary 1 << 16).
std::string write_documents(const TempDir& dir, const std::vector<uint32_t>& lengths,
                            const std::vector<std::vector<uint8_t>>& masks = {}) {
  data::ShardWriter writer(dir.file("s000.hstok"), 4, 1 << 16);
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<uint32_t> doc(lengths[d]);
    for (uint32_t i = 0; i < doc.size(); ++i) doc[i] = uint32_t(1000 * d + i);
    if (masks.empty())
      writer.add_document(doc);
    else
      writer.add_document(doc, masks[d]);
  }
  writer.finish();
  return dir.path();
}

std::vector<int32_t> tokens_of(size_t document, uint32_t from, uint32_t count) {
  std::vector<int32_t> t(count);
  for (uint32_t i = 0; i < count; ++i) t[i] = int32_t(1000 * document + from + i);
  return t;
}

TEST(AcceptanceIntervalTest, ResamplesPromptsAndRecomputesTheRatioOfSums) {
  // tau weights prompts by their forwards: 102 tokens in 12 forwards is 8.5, where the mean
  // of the two prompts' own taus would be 5.5.
  const std::vector<PromptTally> two = {{100, 10}, {2, 2}};
  const AcceptanceInterval i = bootstrap_acceptance_interval(two);
  EXPECT_EQ(i.level, kAcceptanceIntervalLevel);
  EXPECT_EQ(i.low, 1.0);    // a resample of the short prompt twice
  EXPECT_EQ(i.high, 10.0);  // and of the long one twice
  // Seeded: the same tallies give the same bounds; identical prompts give a point.
  std::vector<PromptTally> many;
  for (uint64_t p = 0; p < 40; ++p) many.push_back({10 + p % 7 * 5, 5 + p % 3});
  const AcceptanceInterval a = bootstrap_acceptance_interval(many);
  const AcceptanceInterval b = bootstrap_acceptance_interval(many);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  uint64_t tokens = 0, forwards = 0;
  for (const PromptTally& p : many) tokens += p.tokens, forwards += p.forwards;
  const double tau = double(tokens) / double(forwards);
  EXPECT_LT(a.low, tau);
  EXPECT_GT(a.high, tau);
  const AcceptanceInterval narrow = bootstrap_acceptance_interval(many, 0.5);
  EXPECT_GE(narrow.low, a.low);
  EXPECT_LE(narrow.high, a.high);
  const std::vector<PromptTally> same(30, PromptTally{30, 10});
  const AcceptanceInterval point = bootstrap_acceptance_interval(same);
  EXPECT_EQ(point.low, 3.0);
  EXPECT_EQ(point.high, 3.0);
  const AcceptanceInterval one = bootstrap_acceptance_interval(std::span(two).first(1));
  EXPECT_EQ(one.low, 10.0);
  EXPECT_EQ(one.high, 10.0);
}

TEST(EvalReportTest, SummarisesDecodingKeepingEachPromptsIndexAndSource) {
  const std::vector<EvalPrompt> prompts = {{{1}, "a#0"}, {{2}, "a#1@32"}};
  std::vector<SpeculativeResult> speculative = {
      {.tokens = {5, 6, 7}, .produced = {2, 1}, .verified = {2, 2, 1}, .accepted = {2, 1, 0}},
      {.tokens = {8, 9}, .produced = {2}, .verified = {1, 1, 1}, .accepted = {1, 1, 1}}};
  const std::vector<std::vector<int32_t>> greedy = {{5, 6, 7}, {8, 0}};
  const EvalReport r = summarise_decoding(prompts, speculative, greedy, 3);
  EXPECT_DOUBLE_EQ(r.acceptance_length, 5.0 / 3.0);
  EXPECT_LE(r.acceptance_length_interval.low, r.acceptance_length);
  EXPECT_GE(r.acceptance_length_interval.high, r.acceptance_length);
  EXPECT_FALSE(r.matches_greedy);  // prompt 1's output is not its greedy one
  EXPECT_TRUE(r.prompts[0].matches_greedy);
  EXPECT_EQ(r.position_acceptance, (std::vector<double>{2.0 / 3.0, 0.5}));
  EXPECT_EQ(r.target_forwards, 5u);
  const nlohmann::json j = nlohmann::json::parse(eval_report_json(r));
  EXPECT_EQ(j.at("acceptance_length_interval").size(), 2u);
  EXPECT_EQ(j.at("acceptance_length_interval_level"), kAcceptanceIntervalLevel);
  EXPECT_EQ(r.prompts[1].output, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(j.at("prompts")[1].at("index"), 1);
  EXPECT_EQ(j.at("prompts")[1].at("source"), "a#1@32");
  EXPECT_NE(eval_report_text(r).find("95% interval"), std::string::npos) << eval_report_text(r);
}

TEST(EvalPromptsTest, HeldOutWindowsCutEveryDocumentRoundRobin) {
  TempDir dir;
  // Windows of 32: three in document 0, none in 1 (too short), one in 2, two in 3.
  const data::Corpus corpus = data::Corpus::open(write_documents(dir, {100, 20, 40, 64}));
  const std::vector<EvalPrompt> all = held_out_windows(corpus, 100, 32);
  ASSERT_EQ(all.size(), 6u);
  const std::vector<std::pair<size_t, uint32_t>> order = {{0, 0},  {2, 0},  {3, 0},
                                                          {0, 32}, {3, 32}, {0, 64}};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [doc, from] = order[i];
    EXPECT_EQ(all[i].tokens, tokens_of(doc, from, 32)) << i;
    EXPECT_EQ(all[i].source,
              "s000.hstok#" + std::to_string(doc) + (from ? "@" + std::to_string(from) : ""));
  }
  // Fewer still span the documents.
  const std::vector<EvalPrompt> three = held_out_windows(corpus, 3, 32);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[2].source, "s000.hstok#3");
  EXPECT_THROW(held_out_windows(corpus, 8, 200), Error);
}

TEST(EvalPromptsTest, PromptFolderDocumentsEndBeforeTheirFirstTrainedLabel) {
  TempDir dir;
  const std::vector<uint8_t> chat = {0, 0, 0, 0, 0, 1, 1, 1, 0, 1};  // prompt of 5, response
  const std::vector<uint8_t> none(6, 0), first_only = {1, 0, 0, 0};
  const data::Corpus corpus =
      data::Corpus::open(write_documents(dir, {10, 6, 0, 4}, {chat, none, {}, first_only}));
  const std::vector<EvalPrompt> prompts = document_prompts(corpus, 100);
  ASSERT_EQ(prompts.size(), 3u);  // the empty document gives none
  EXPECT_EQ(prompts[0].tokens, tokens_of(0, 0, 5));
  EXPECT_EQ(prompts[0].source, "s000.hstok#0");
  EXPECT_EQ(prompts[1].tokens, tokens_of(1, 0, 6));  // nothing trained: all of it
  EXPECT_EQ(prompts[2].tokens, tokens_of(3, 0, 4));  // only its first token: no label
  EXPECT_EQ(prompts[2].source, "s000.hstok#3");
  EXPECT_EQ(document_prompts(corpus, 1).size(), 1u);

  TempDir plain;  // a shard without a mask: every document whole
  const data::Corpus unmasked = data::Corpus::open(write_documents(plain, {7, 3}));
  const std::vector<EvalPrompt> whole = document_prompts(unmasked, 100);
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].tokens, tokens_of(0, 0, 7));
  EXPECT_EQ(whole[1].tokens, tokens_of(1, 0, 3));
}

TEST(HeldOutSplitTest, TheLastDocumentsAreHeldOutOfTraining) {
  EXPECT_EQ(data::held_out_document_count(15), 0u);
  EXPECT_EQ(data::held_out_document_count(16), 1u);
  EXPECT_EQ(data::held_out_document_count(100), 6u);
  EXPECT_EQ(data::held_out_document_count(100000), data::kMaxHeldOutDocuments);
  TempDir dir;
  std::mt19937_64 rng(3);
  data::testing::write_random_corpus(dir.path(), rng, 3, 20, 50);  // 60 documents
  const data::Corpus corpus = data::Corpus::open(dir.path());
  ASSERT_EQ(corpus.doc_count(), 60u);
  EXPECT_EQ(data::first_held_out_document(corpus), 57u);
  // The two tables partition each shard's documents: the last shard's last 3 are held out.
  const auto training = data::training_doc_offsets(corpus);
  const auto held_out = data::held_out_doc_offsets(corpus);
  ASSERT_EQ(training.size(), 3u);
  ASSERT_EQ(held_out.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    const auto& all = corpus.shards()[s].doc_offsets;
    const size_t kept = s < 2 ? 20 : 17;
    EXPECT_EQ(training[s], std::vector<uint64_t>(all.begin(), all.begin() + kept + 1));
    EXPECT_EQ(held_out[s], std::vector<uint64_t>(all.begin() + kept, all.end()));
  }
  // The held-out prompts of a --data corpus come from those documents only.
  PromptChoice choice;
  choice.data = dir.path();
  choice.prompt_tokens = 1;
  const ChosenPrompts chosen = choose_prompts(choice, "test", 1u << 20);
  EXPECT_LE(chosen.prompts.size(), 3u);
  for (const EvalPrompt& p : chosen.prompts) {
    const uint64_t document = std::stoull(p.source.substr(p.source.find('#') + 1));
    EXPECT_TRUE(p.source.starts_with("s002.hstok#")) << p.source;
    EXPECT_GE(document, 17u) << p.source;
  }
}

TEST(EvalPromptsTest, ChoicesThatCannotWorkAreRefusedWithTheRemedy) {
  TempDir dir;
  write_documents(dir, {40, 40});
  PromptChoice choice;
  choice.data = dir.path();  // two documents: none held out
  try {
    choose_prompts(choice, "test", 1u << 20);
    FAIL() << "a corpus of 2 documents had held-out prompts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--eval-prompts"), std::string::npos) << e.what();
  }
  choice = {};
  choice.prompts = "8";  // the count, as the old --prompts took it
  try {
    choose_prompts(choice, "test", 1u << 20);
    FAIL() << "--prompts 8 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-prompts 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsring::eval
