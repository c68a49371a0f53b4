// data_bench: how close the token-data reader runs to "cat speed". In one run, over the
// same shard files, it times a plain sequential read() loop (the baseline), the io_uring
// streaming reader (what the shard check uses), the full shard check (stream + CRC-32 +
// vocabulary) and the batch reader (one epoch of packed batches, read ahead through
// io_uring), each with a warm page cache and with the files' pages evicted (cold).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/file_io.h"
#include "data/file_stream.h"
#include "data/shard_writer.h"
#include "data/token_reader.h"

namespace {

using namespace hsring::data;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir;  // an existing corpus; empty: generate one in a temporary folder
  uint64_t mib = 256;
  uint32_t shards = 8;
  uint32_t reps = 5;
  uint32_t depth = 4;
  uint32_t chunk_kib = 256;
  uint32_t max_tokens = 8192;
  bool quick = false;
};

// uint16 shards of random documents (1 to 4096 tokens), `mib` MiB of tokens in all.
void generate(const std::string& dir, const Options& o) {
  std::mt19937_64 rng(42);
  const uint64_t tokens_per_shard = (o.mib << 20) / 2 / o.shards;
  std::vector<uint32_t> doc;
  for (uint32_t s = 0; s < o.shards; ++s) {
    ShardWriter writer(dir + "/shard-" + std::to_string(10000 + s) + ".hstok", 2, 50000);
    while (writer.token_count() < tokens_per_shard) {
      doc.resize(1 + rng() % 4096);
      for (uint32_t& t : doc) t = uint32_t(rng() % 50000);
      writer.add_document(doc);
    }
    writer.finish();
  }
}

// Drops the files' pages from the page cache (they are clean after the writer's fsync),
// so the next pass reads from the device; touches no other file on the machine.
void evict(const Corpus& corpus) {
  for (const ShardInfo& s : corpus.shards()) {
    const File f = File::open_read(s.path);
    ::posix_fadvise(f.fd(), 0, 0, POSIX_FADV_DONTNEED);
  }
}

uint64_t cat_pass(const Corpus& corpus, uint32_t chunk) {
  std::vector<char> buffer(chunk);
  uint64_t bytes = 0;
  for (const ShardInfo& s : corpus.shards()) {
    const File f = File::open_read(s.path);
    ssize_t n;
    while ((n = ::read(f.fd(), buffer.data(), buffer.size())) > 0) bytes += uint64_t(n);
  }
  return bytes;
}

uint64_t uring_pass(const Corpus& corpus, const StreamOptions& stream) {
  uint64_t bytes = 0;
  for (const ShardInfo& s : corpus.shards()) {
    const File f = File::open_read(s.path);
    stream_file(f, 0, s.header.file_size(), stream,
                [&](const std::byte*, size_t size) { bytes += size; });
  }
  return bytes;
}

uint64_t verify_pass(const Corpus& corpus, const StreamOptions& stream) {
  uint64_t bytes = 0;
  for (const ShardInfo& s : corpus.shards()) {
    verify_shard_tokens(s, stream);
    bytes += s.header.tokens_size();
  }
  return bytes;
}

uint64_t batch_pass(const Corpus& corpus, const BatchIndex& index, uint32_t depth,
                    uint64_t& batches) {
  TokenReader reader(corpus, index, strided_ids(0, 1, index.batches_per_epoch()),
                     ReaderOptions{depth, 256});
  batches = 0;
  while (reader.next()) ++batches;
  return reader.stats().bytes;
}

// The generated corpus goes away however the benchmark ends.
struct TempCorpus {
  std::string path;
  ~TempCorpus() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

struct Result {
  std::vector<double> gib_s;
  double median() const {
    std::vector<double> v = gib_s;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
  double spread() const {
    return gib_s.empty() ? 0
                         : *std::max_element(gib_s.begin(), gib_s.end()) -
                               *std::min_element(gib_s.begin(), gib_s.end());
  }
};

double timed_gib_s(const std::function<uint64_t()>& pass) {
  const auto start = Clock::now();
  const uint64_t bytes = pass();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return double(bytes) / double(1ull << 30) / s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"data_bench: io_uring token reader against a sequential read() loop"};
  app.add_option("--dir", o.dir, "Use this corpus instead of generating one");
  app.add_option("--mib", o.mib, "Generated corpus size in MiB")->capture_default_str();
  app.add_option("--shards", o.shards, "Generated shards")->capture_default_str();
  app.add_option("--reps", o.reps, "Repetitions of each measurement")->capture_default_str();
  app.add_option("--depth", o.depth, "Reads (chunks or batches) in flight")->capture_default_str();
  app.add_option("--chunk-kib", o.chunk_kib, "Read size in KiB")->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "Batch token budget")->capture_default_str();
  app.add_flag("--quick", o.quick, "Tiny sizes: a smoke test, not a measurement");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) o.mib = 8, o.reps = 1, o.shards = 2;

  try {
    std::string dir = o.dir;
    TempCorpus temp;
    if (dir.empty()) {
      std::string pattern = (std::filesystem::temp_directory_path() / "data-bench-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
      temp.path = dir = pattern;
      generate(dir, o);
    }
    const Corpus corpus = Corpus::open(dir, CorpusOptions{false, {}});
    const BatchIndex index(corpus, PackOptions{o.max_tokens, 1, 4096});
    const StreamOptions stream{o.chunk_kib << 10, o.depth};
    uint64_t bytes = 0, token_bytes = 0;
    for (const ShardInfo& s : corpus.shards()) {
      bytes += s.header.file_size();
      token_bytes += s.header.tokens_size();
    }
    std::printf(
        "corpus: %zu shards, %.1f MiB, %llu tokens; %llu batches of <= %u tokens; "
        "depth %u, reads of %u KiB, %u reps (median, spread)\n",
        corpus.shards().size(), double(bytes) / (1 << 20),
        static_cast<unsigned long long>(corpus.token_count()),
        static_cast<unsigned long long>(index.batches_per_epoch()), o.max_tokens, o.depth,
        o.chunk_kib, o.reps);
    {
      TokenReader probe(corpus, index, strided_ids(0, 1, 1), ReaderOptions{1, 1});
      std::printf("io_uring: %s\n", probe.uses_io_uring() ? "yes" : "NO (blocking pread fallback)");
    }

    uint64_t batches = 0;
    for (bool cold : {false, true}) {
      Result cat, uring, verify, batch;
      for (uint32_t r = 0; r < o.reps; ++r) {
        // Alternate the order each repetition, so neither side always runs first.
        auto run = [&](Result& result, const std::function<uint64_t()>& pass) {
          if (cold)
            evict(corpus);
          else
            pass();  // warm-up: the files are in the page cache before timing
          result.gib_s.push_back(timed_gib_s(pass));
        };
        auto cat_fn = [&] { return cat_pass(corpus, o.chunk_kib << 10); };
        auto uring_fn = [&] { return uring_pass(corpus, stream); };
        if (r % 2 == 0) {
          run(cat, cat_fn);
          run(uring, uring_fn);
        } else {
          run(uring, uring_fn);
          run(cat, cat_fn);
        }
        run(verify, [&] { return verify_pass(corpus, stream); });
        run(batch, [&] { return batch_pass(corpus, index, o.depth, batches); });
      }
      const char* label = cold ? "cold" : "warm";
      auto line = [&](const char* what, const Result& r) {
        std::printf("%s  %-34s %7.2f GiB/s (spread %.2f)  ratio to cat %.2f\n", label, what,
                    r.median(), r.spread(), r.median() / cat.median());
      };
      line("cat: sequential read() loop", cat);
      line("io_uring stream (shard reader)", uring);
      line("shard check: stream + CRC-32", verify);
      line("batch reader: one epoch, shuffled", batch);
      std::printf("%s  batch reader: %.0f batches/s\n", label,
                  batch.median() * double(1ull << 30) / (double(token_bytes) / double(batches)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
