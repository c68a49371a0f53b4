// `hsring data generate` end to end on the built-in target: each written document is its
// prompt followed by the target's own greedy decoding of it, the loss mask counts exactly
// the generated tokens, the output does not depend on --threads, and bad flags are refused
// with a message naming the flag. And the default job's data, the built-in target's
// continuations of the built-in corpus (eval/builtin_data.h).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "../crash/process_util.h"
#include "../data/test_corpus.h"
#include "builtin/pretrain.h"
#include "common/error.h"
#include "data/corpus.h"
#include "data/default_corpus.h"
#include "data/shard_file.h"
#include "data/shard_writer.h"
#include "data/token_batch.h"
#include "eval/builtin_data.h"
#include "eval/generate.h"
#include "eval/speculative_decode.h"
#include "model/cpu_target_model.h"
#include "tests/common/special_files.h"

namespace hsring::eval {
namespace {

namespace fs = std::filesystem;
using data::testing::TempDir;

constexpr uint32_t kNewTokens = 6;

std::string hsring_bin() { return crash::bin_dir() + "/hsring"; }

// Byte-level prompts (vocabulary 256, which the built-in target's 257 holds), one empty.
void write_prompts(const std::string& dir) {
  data::ShardWriter writer(dir + "/p.hstok", 1, 256);
  for (const char* text : {"The ring of slots ", "", "Drafters train on", "Q: why?\nA: "})
    writer.add_text_document(text);
  writer.finish();
}

std::vector<std::vector<int32_t>> documents_of(const data::Corpus& corpus) {
  std::vector<std::vector<int32_t>> docs;
  for (uint32_t s = 0; s < corpus.shards().size(); ++s) {
    const data::ShardInfo& shard = corpus.shards()[s];
    for (size_t d = 0; d + 1 < shard.doc_offsets.size(); ++d) {
      const data::Piece piece{s, uint32_t(shard.doc_offsets[d + 1] - shard.doc_offsets[d]),
                              shard.doc_offsets[d]};
      if (piece.length == 0) continue;
      data::BatchRef ref;
      ref.pieces = std::span<const data::Piece>(&piece, 1);
      ref.token_count = piece.length;
      docs.push_back(data::read_batch(corpus, ref).tokens);
    }
  }
  return docs;
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

crash::CommandResult generate(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {hsring_bin(), "data", "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  return crash::run_command(argv, crash::Millis(120000));
}

TEST(GenerateCliTest, ContinuationIsTheTargetsGreedyDecodeAndTheMaskCoversExactlyIt) {
  TempDir dir;
  const std::string prompts = dir.path() + "/prompts", out = dir.path() + "/out";
  fs::create_directories(prompts);
  write_prompts(prompts);
  const auto r = generate({"--model", "builtin", "--data", prompts, "-o", out, "--max-new-tokens",
                           std::to_string(kNewTokens), "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("generated 18 tokens after"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 empty prompts skipped"), std::string::npos) << r.out;

  const auto target = open_cpu_model(builtin::resolve_model_spec("builtin"), 0, {1});
  const auto prompt_docs = documents_of(data::Corpus::open(prompts));
  const data::Corpus written = data::Corpus::open(out);
  ASSERT_EQ(written.shards().size(), 1u);
  const data::ShardInfo& shard = written.shards()[0];
  EXPECT_TRUE(shard.header.has_mask());
  EXPECT_EQ(shard.header.vocab_size, target->config().vocab_size);
  const auto docs = documents_of(written);
  ASSERT_EQ(docs.size(), prompt_docs.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    const std::vector<int32_t>& prompt = prompt_docs[d];
    std::vector<int32_t> expected = prompt;
    const std::vector<int32_t> greedy = greedy_decode(*target, prompt, kNewTokens);
    expected.insert(expected.end(), greedy.begin(), greedy.end());
    EXPECT_EQ(docs[d], expected) << "document " << d;
  }
  // The mask, as the batches see it: a row counts exactly when its next token is generated.
  const data::BatchIndex index(written, data::PackOptions{512, 0});
  uint64_t counted_rows = 0;
  for (uint64_t id = 0; id < index.batches_per_epoch(); ++id) {
    const data::BatchRef ref = index.batch(id);
    const data::TokenBatch batch = data::read_batch(written, ref);
    for (size_t p = 0; p < ref.pieces.size(); ++p) {
      const data::Piece& piece = ref.pieces[p];
      // Which document of the shard, hence how long its prompt is.
      const auto doc =
          size_t(std::upper_bound(shard.doc_offsets.begin(), shard.doc_offsets.end(), piece.begin) -
                 shard.doc_offsets.begin() - 1);
      const uint64_t prompt_end = shard.doc_offsets[doc] + prompt_docs[doc].size();
      for (uint32_t i = 0; i + 1 < piece.length; ++i) {
        const bool generated_next = piece.begin + i + 1 >= prompt_end;
        const int32_t label = batch.labels[size_t(batch.doc_offsets[p]) + i];
        EXPECT_EQ(label >= 0, generated_next) << "document " << doc << " token " << i;
        counted_rows += label >= 0;
      }
    }
  }
  EXPECT_EQ(counted_rows, 3 * kNewTokens);
  const auto inspect = crash::run_command({hsring_bin(), "data", "inspect", out});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.out << inspect.err;
  EXPECT_NE(inspect.out.find("18 tokens counted"), std::string::npos) << inspect.out;

  // Deterministic: another thread count writes the same bytes.
  const std::string again = dir.path() + "/again";
  const auto r2 = generate({"--model", "builtin", "--data", prompts, "-o", again,
                            "--max-new-tokens", std::to_string(kNewTokens), "--threads", "2"});
  ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
  EXPECT_EQ(slurp(again + "/shard-00000.hstok"), slurp(out + "/shard-00000.hstok"));
}

// A run SIGKILLed after some shards were finished, then resumed with --resume, writes the
// very shards (byte for byte) of a run nobody interrupted; a resume with other flags is
// refused, naming the record.
TEST(GenerateCliTest, AKilledRunResumesAndLosesNothing) {
  TempDir dir;
  const std::string prompts = dir.path() + "/prompts";
  fs::create_directories(prompts);
  {
    data::ShardWriter writer(prompts + "/p.hstok", 1, 256);
    for (int i = 0; i < 48; ++i) writer.add_text_document("prompt " + std::to_string(i * 7919));
    writer.finish();
  }
  const auto flags = [&](const std::string& out) {
    return std::vector<std::string>{
        "--model",          "tiny", "--data",         prompts, "-o",        out,
        "--max-new-tokens", "10",   "--shard-tokens", "120",   "--threads", "1"};
  };
  const std::string whole = dir.path() + "/whole", cut = dir.path() + "/cut";
  const auto r = generate(flags(whole));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto shards_in = [](const std::string& folder) {
    return data::Corpus::list_shards(folder).size();
  };
  ASSERT_GE(shards_in(whole), 8u);

  std::vector<std::string> argv = {hsring_bin(), "data", "generate"};
  for (const std::string& f : flags(cut)) argv.push_back(f);
  {
    crash::Spawned run(argv, dir.path() + "/cut.out", dir.path() + "/cut.err");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!run.exited() && (!fs::exists(cut) || shards_in(cut) < 3) &&
           std::chrono::steady_clock::now() < deadline)
      run.wait(crash::Millis(2));
    ASSERT_FALSE(run.exited()) << "the run ended before it could be killed: " << run.stdout_text();
    run.signal(SIGKILL);
    const auto status = run.wait(crash::Millis(10000));
    ASSERT_TRUE(status && WIFSIGNALED(*status));
  }
  const size_t kept = shards_in(cut);
  ASSERT_LT(kept, shards_in(whole)) << "the kill came after the last shard";

  const auto same_flags_again = generate(flags(cut));  // without --resume: refused
  EXPECT_NE(same_flags_again.exit_code, 0);
  EXPECT_NE(same_flags_again.err.find("--resume"), std::string::npos) << same_flags_again.err;
  auto other = flags(cut);
  other[7] = "11";  // --max-new-tokens
  other.push_back("--resume");
  const auto refused = generate(other);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("generate.json records another run"), std::string::npos)
      << refused.err;

  auto resume = flags(cut);
  resume.push_back("--resume");
  const auto resumed = generate(resume);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resuming after the"), std::string::npos) << resumed.out;
  const auto want = data::Corpus::list_shards(whole), got = data::Corpus::list_shards(cut);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(slurp(got[i]), slurp(want[i])) << fs::path(got[i]).filename();
  for (const auto& entry : fs::directory_iterator(cut))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
        << "a temporary left behind: " << entry.path();
}

TEST(GenerateCliTest, BadFlagsAreRefusedNamingTheFlag) {
  TempDir dir;
  const std::string prompts = dir.path() + "/prompts";
  fs::create_directories(prompts);
  write_prompts(prompts);
  const std::string full = dir.path() + "/full";
  fs::create_directories(full);
  std::ofstream(full + "/note.txt") << "not empty";
  const std::string fresh = dir.path() + "/fresh";
  const struct {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"--data", prompts, "-o", fresh, "--max-new-tokens", "4"}, "--model"},
      {{"--model", "tiny", "--data", prompts, "-o", fresh, "--max-new-tokens", "0"},
       "--max-new-tokens"},
      {{"--model", "tiny", "--data", prompts, "-o", fresh, "--max-new-tokens", "x"},
       "--max-new-tokens"},
      {{"--model", "tiny", "--data", prompts, "-o", fresh}, "--max-new-tokens"},
      {{"--model", "tiny", "--data", prompts, "-o", full, "--max-new-tokens", "4"}, "is not empty"},
      {{"--model", "tiny", "--data", dir.path() + "/none", "-o", fresh, "--max-new-tokens", "4"},
       "is not a folder"},
      {{"--model", "no-such-model", "--data", prompts, "-o", fresh, "--max-new-tokens", "4"},
       "no-such-model"},
      {{"--model", "tiny", "--data", prompts, "-o", fresh, "--max-new-tokens", "4", "--stop-token",
        "999999"},
       "stop token 999999"},
  };
  for (const auto& c : cases) {
    const auto r = generate(c.args);
    EXPECT_NE(r.exit_code, 0) << c.says;
    EXPECT_NE((r.out + r.err).find(c.says), std::string::npos) << r.out << r.err;
    EXPECT_FALSE(fs::exists(fresh + "/shard-00000.hstok")) << c.says;
  }
}

TEST(GenerateTest, StopsAfterAStopTokenAndReadsTheModelsEos) {
  TempDir dir;
  const std::string prompts = dir.path() + "/prompts";
  fs::create_directories(prompts);
  write_prompts(prompts);
  const auto target = open_cpu_model("tiny", 3, {1});
  const data::Corpus corpus = data::Corpus::open(prompts);
  const std::vector<int32_t> first = documents_of(corpus)[0];
  const std::vector<int32_t> plain = greedy_decode(*target, first, 5);
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.stop_tokens = {plain[1]};  // the second generated token ends the first document
  data::ShardSetWriter out(dir.path() + "/out", 2, target->config().vocab_size);
  const GenerateSummary s = generate_continuations(*target, corpus, o, out);
  EXPECT_EQ(s.documents, 3u);
  EXPECT_GE(s.stopped, 1u);
  const auto docs = documents_of(data::Corpus::open(dir.path() + "/out"));
  std::vector<int32_t> expected = first;
  const auto upto = std::find(plain.begin(), plain.end(), plain[1]) + 1;
  expected.insert(expected.end(), plain.begin(), upto);
  EXPECT_EQ(docs[0], expected);

  // eos_token_id as HF writes it: a number, or a list, in either file.
  const std::string model = dir.path() + "/model";
  fs::create_directories(model);
  std::ofstream(model + "/config.json") << R"({"eos_token_id": 7})";
  std::ofstream(model + "/generation_config.json") << R"({"eos_token_id": [7, 9]})";
  EXPECT_EQ(model_stop_tokens(model), (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(model_stop_tokens("tiny").empty());

  // A FIFO in place of generation_config.json is refused, not waited on (issue 33).
  const hsring::testing::HangGuard guard;
  hsring::testing::plant_fifo(model + "/generation_config.json");
  try {
    (void)model_stop_tokens(model);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_NE(std::string(e.what()).find("generation_config.json: cannot open: a FIFO"),
              std::string::npos)
        << e.what();
  }
}

// The built-in data is what its header says: every training document of the built-in
// corpus cut to its first kBuiltinPromptTokens tokens, then the built-in target's greedy
// decoding of that prompt for kBuiltinNewTokens tokens, only those counted by the mask. It
// is cached (scripts/test.sh generates it before the tests), found again under the same
// name, and printed by `hsring data builtin`.
TEST(BuiltinDataTest, EachDocumentIsAPromptAndTheBuiltinTargetsContinuation) {
  const std::string dir = builtin_data_dir();
  EXPECT_EQ(builtin_data_dir(), dir);
  EXPECT_NE(fs::path(dir).filename().string().find("builtin-data-"), std::string::npos) << dir;
  const auto listed = crash::run_command({hsring_bin(), "data", "builtin"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out << listed.err;
  EXPECT_EQ(listed.out, dir + "\n");

  const data::Corpus corpus = data::Corpus::open(dir);
  const auto docs = documents_of(corpus);
  const auto sources = documents_of(data::Corpus::open(data::default_corpus_dir()));
  ASSERT_EQ(docs.size(), sources.size());
  uint64_t counted = 0, expected_counted = 0;
  for (const data::ShardInfo& shard : corpus.shards()) {
    ASSERT_TRUE(shard.header.has_mask());
    counted += data::verify_shard_tokens(shard).counted_tokens;
  }
  for (size_t d = 0; d < docs.size(); ++d) {
    const size_t prompt = std::min<size_t>(sources[d].size(), kBuiltinPromptTokens);
    ASSERT_EQ(docs[d].size(), prompt + kBuiltinNewTokens) << "document " << d;
    EXPECT_TRUE(std::equal(docs[d].begin(), docs[d].begin() + long(prompt), sources[d].begin()))
        << "document " << d << " does not start with its corpus document";
    expected_counted += kBuiltinNewTokens;
  }
  EXPECT_EQ(counted, expected_counted);
  // The continuations are the built-in target's own (two documents: a decode is seconds).
  const auto target = open_cpu_model(builtin::resolve_model_spec("builtin"), 0, {2});
  for (const size_t d : {size_t(0), docs.size() - 1}) {
    const size_t prompt = docs[d].size() - kBuiltinNewTokens;
    const std::vector<int32_t> head(docs[d].begin(), docs[d].begin() + long(prompt));
    const std::vector<int32_t> greedy = greedy_decode(*target, head, kBuiltinNewTokens);
    EXPECT_TRUE(std::equal(greedy.begin(), greedy.end(), docs[d].begin() + long(prompt)))
        << "document " << d << " is not the target's continuation";
  }
}

TEST(BuiltinDataTest, TheBuiltinTargetTrainsOnItUnlessDataIsGiven) {
  const std::string dir = builtin_data_dir();
  const RunData by_default = resolve_run_data("", builtin::kBuiltinModel);
  EXPECT_EQ(by_default.dir, dir);
  EXPECT_TRUE(by_default.builtin);
  const RunData named = resolve_run_data(kBuiltinData, "tiny");
  EXPECT_EQ(named.dir, dir);
  EXPECT_TRUE(named.builtin);
  const RunData given = resolve_run_data("/my/shards", builtin::kBuiltinModel);
  EXPECT_EQ(given.dir, "/my/shards");
  EXPECT_FALSE(given.builtin);
  const RunData preset = resolve_run_data("", "tiny");  // the built-in corpus
  EXPECT_EQ(preset.dir, "");
  EXPECT_FALSE(preset.builtin);
}

}  // namespace
}  // namespace hsring::eval
