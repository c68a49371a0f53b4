// Text packing, the default corpus, and the `hsring data` commands' exit codes.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "common/error.h"
#include "data/corpus.h"
#include "data/data_commands.h"
#include "data/default_corpus.h"
#include "data/text_pack.h"
#include "data/token_batch.h"
#include "test_corpus.h"

namespace hsring::data {
namespace {

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(SplitDocumentsTest, WholeFileOrParagraphs) {
  const std::string text = "\n\nfirst line\nsecond line\n \t\n\nthird\n\n\nlast";
  EXPECT_EQ(split_documents(text, false), std::vector<std::string_view>{text});
  EXPECT_EQ(split_documents(text, true),
            (std::vector<std::string_view>{"first line\nsecond line\n", "third\n", "last"}));
  EXPECT_TRUE(split_documents("", false).empty());
  EXPECT_TRUE(split_documents("\n \n", true).empty());
}

TEST(TextPackTest, PacksBytesAsTokensAcrossShards) {
  TempDir dir;
  const std::string out = dir.file("out");
  TextPacker packer(out, TextPackOptions{100, true});
  std::string all;
  for (int i = 0; i < 30; ++i) {
    const std::string para = "paragraph " + std::to_string(i) + " \xC3\xA9t\xC3\xA9\n";
    packer.add_text(para + "\n");
    all += para;
  }
  packer.add_text(std::string(250, 'x'));  // longer than a shard: a shard of its own
  all += std::string(250, 'x');
  const PackSummary summary = packer.finish();
  EXPECT_EQ(summary.documents, 31u);
  EXPECT_EQ(summary.tokens, all.size());
  const Corpus corpus = Corpus::open(out);
  EXPECT_EQ(corpus.shards().size(), summary.shard_paths.size());
  EXPECT_EQ(corpus.token_count(), all.size());
  for (const ShardInfo& s : corpus.shards()) {
    EXPECT_EQ(s.header.token_bytes, 1u);
    EXPECT_EQ(s.header.vocab_size, 256u);
    EXPECT_TRUE(s.header.token_count <= 100 || s.header.doc_count == 1);
  }
  // Shards in name order hold the documents in order.
  std::string back;
  for (const ShardInfo& s : corpus.shards()) {
    std::string bytes(s.header.token_count, '\0');
    File::open_read(s.path).read_exact(bytes.data(), bytes.size(), s.header.tokens_offset());
    back += bytes;
  }
  EXPECT_EQ(back, all);
  EXPECT_THROW(TextPacker(out, TextPackOptions{}), Error);  // never mixes two packs
}

TEST(DataCommandsTest, PackThenInspect) {
  TempDir dir;
  write_text(dir.file("a.txt"), "alpha\n\nbeta\n");
  std::filesystem::create_directory(dir.file("more"));
  write_text(dir.file("more/b.txt"), "gamma\n");
  DataPackArgs args{{dir.file("a.txt"), dir.file("more")}, dir.file("shards"), 0, true};
  ASSERT_EQ(run_data_pack(args), 0);
  const Corpus corpus = Corpus::open(dir.file("shards"));
  EXPECT_EQ(corpus.doc_count(), 3u);
  EXPECT_EQ(corpus.token_count(), std::string("alpha\nbeta\ngamma\n").size());
  EXPECT_EQ(run_data_inspect({dir.file("shards")}), 0);
  EXPECT_EQ(run_data_inspect({corpus.shards()[0].path}), 0);
  EXPECT_EQ(run_data_pack(args), 1);  // the folder already holds shards

  // A flipped token byte: inspect fails, naming the file.
  {
    std::fstream f(corpus.shards()[0].path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kShardHeaderSize + 1);
    f.put('Z');
  }
  EXPECT_EQ(run_data_inspect({dir.file("shards")}), 1);
  EXPECT_EQ(run_data_inspect({dir.path()}), 1);  // no shard there
}

TEST(DefaultCorpusTest, PackedOnceReusedAndSafeAgainstRaces) {
  TempDir dir;
  ASSERT_FALSE(embedded_corpus_texts().empty());
  std::string first, second;
  std::thread racer([&] { second = default_corpus_dir(dir.path()); });
  first = default_corpus_dir(dir.path());
  racer.join();
  EXPECT_EQ(first, second);
  const Corpus corpus = Corpus::open(first);
  uint64_t embedded = 0;
  for (const EmbeddedText& t : embedded_corpus_texts()) embedded += t.size;
  EXPECT_GT(corpus.token_count(), 0u);
  EXPECT_LE(corpus.token_count(), embedded);  // blank lines between paragraphs are dropped
  // Only the packed folder is left: no staging folders.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
  // A damaged folder is repacked.
  std::filesystem::resize_file(corpus.shards()[0].path, 10);
  EXPECT_EQ(default_corpus_dir(dir.path()), first);
  EXPECT_NO_THROW(Corpus::open(first));
  const BatchIndex index(Corpus::open(first), PackOptions{});
  EXPECT_GT(index.batches_per_epoch(), 0u);
}

}  // namespace
}  // namespace hsring::data
