// Whole-program fuzzing of what an operator hands hsring (issue 33): model folders and DFlash
// exports through `hsring eval`, token shards through `hsring data inspect`, config files
// through `hsring --config F run --create-only`. Each case mutates a valid input; the
// program must end by itself (a timeout is a hang), by an exit (never a signal), with one
// of its documented codes (docs/operations.md, "Fuzzing"), within bounded memory.
//
// Memory: RLIMIT_AS in the release build, so an allocation sized by a file's numbers ends
// in std::bad_alloc and exit 4, which no command documents for bad input. The sanitizers
// reserve terabytes of address space, so there their allocator's cap
// (max_allocation_size_mb) stands in: its report exits 1.
//
// Cost: the cases of each kind run until its share of HSRING_FUZZ_SECONDS (default 36 for
// all four kinds) is spent, so the test fits CI in every flavour (faster builds run more
// cases). A case is a pure function of its kind and index; a failing one is kept under
// the test's temporary folder with the command line that replays it.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/dflash_export.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "shm/ring.h"
#include "tests/crash/process_util.h"
#include "tests/model/test_files.h"
#include "train/dflash_config.h"
#include "train/dflash_model.h"

namespace hsring {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Rng = std::mt19937_64;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr rlim_t kAddressSpace = rlim_t(4) << 30;  // the tiny model's eval needs < 1 GiB
constexpr int kAllocationCapMb = 1024;
const std::chrono::seconds kCaseTimeout(kSanitized ? 60 : 20);

std::string hsring() { return crash::bin_dir() + "/hsring"; }

double budget_seconds() {
  const char* s = std::getenv("HSRING_FUZZ_SECONDS");
  return s && *s ? std::atof(s) : 36.0;
}

struct Outcome {
  bool timed_out = false;
  int status = 0;  // wait status
  std::string err;
};

// Runs argv with stdout discarded and stderr kept, under the memory bound; kills it after
// kCaseTimeout.
Outcome run_bounded(const std::vector<std::string>& argv, const fs::path& err_file) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) env_text.emplace_back(*e);
  // Appended: the last occurrence of a sanitizer option wins.
  const std::string cap = ":max_allocation_size_mb=" + std::to_string(kAllocationCapMb);
  for (const char* name : {"ASAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* old = std::getenv(name);
    env_text.push_back(std::string(name) + "=" + (old ? old : "") + cap);
  }
  std::vector<char*> env, args;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open("/dev/null", O_WRONLY);
    const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(126);
    if (!kSanitized) {
      const rlimit limit{kAddressSpace, kAddressSpace};
      if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(126);
    }
    ::execve(args[0], args.data(), env.data());
    ::_exit(127);
  }
  Outcome o;
  const auto deadline = Clock::now() + kCaseTimeout;
  while (::waitpid(pid, &o.status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      o.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &o.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  o.err = crash::read_file(err_file);
  return o;
}

// ---- Mutations: of JSON and TOML text (numbers grown, keys dropped, lists blown up) and of
// binary files (bytes flipped, header bytes set, cuts). Each picks one at random.

const char* const kNumbers[] = {"0",          "-1",         "1099511627776",
                                "4294967296", "2147483647", "1e308",
                                "100000",     "3.5",        "-0",
                                "nan",        "\"7\"",      "null",
                                "[]",         "{}",         "18446744073709551615"};

// Where the numbers of `text` are: [start, end) spans of digits with a sign, point and
// exponent.
std::vector<std::pair<size_t, size_t>> number_spans(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    const size_t start = i > 0 && text[i - 1] == '-' ? i - 1 : i;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || std::strchr(".eE+-", text[i])))
      ++i;
    spans.emplace_back(start, i);
  }
  return spans;
}

std::string mutate_text(std::string text, Rng& rng) {
  const int mutations = 1 + int(rng() % 3);
  for (int m = 0; m < mutations && !text.empty(); ++m) {
    switch (rng() % 6) {
      case 0:
      case 1: {  // a number replaced
        const std::vector<std::pair<size_t, size_t>> spans = number_spans(text);
        if (spans.empty()) break;
        const auto [start, end] = spans[rng() % spans.size()];
        text.replace(start, end - start, kNumbers[rng() % std::size(kNumbers)]);
        break;
      }
      case 2: {  // a line dropped or doubled
        const size_t start = text.rfind('\n', rng() % text.size());
        const size_t from = start == std::string::npos ? 0 : start + 1;
        const size_t end = text.find('\n', from);
        const std::string line = text.substr(from, end == std::string::npos ? end : end - from + 1);
        if (rng() % 2)
          text.erase(from, line.size());
        else
          text.insert(from, line);
        break;
      }
      case 3: {  // a list blown up: 100,000 copies of its first element (a 600 KB file)
        const size_t open = text.find('[', rng() % text.size());
        if (open == std::string::npos) break;
        const size_t close = text.find_first_of(",]", open);
        if (close == std::string::npos) break;
        const std::string element = text.substr(open + 1, close - open - 1);
        if (element.empty() || element.size() > 20) break;
        std::string many;
        for (int i = 0; i < 100000; ++i) many += element + ",";
        text.insert(open + 1, many);
        break;
      }
      case 4:  // a byte changed
        text[rng() % text.size()] = char(rng());
        break;
      default:  // cut
        text.resize(rng() % text.size());
    }
  }
  return text;
}

std::string mutate_binary(std::string bytes, Rng& rng, size_t header_size) {
  if (bytes.empty()) return bytes;
  const size_t head = std::min(bytes.size(), std::max<size_t>(header_size, 8));
  switch (rng() % 5) {
    case 0:  // a few header bytes changed
      for (int k = 0; k < 1 + int(rng() % 4); ++k) bytes[rng() % head] = char(rng());
      break;
    case 1: {  // 8 header bytes set to a large little-endian number (a length, an offset)
      const uint64_t big = uint64_t(1) << (20 + rng() % 44);
      const size_t at = rng() % head;
      for (size_t i = 0; i < 8 && at + i < bytes.size(); ++i) bytes[at + i] = char(big >> (8 * i));
      break;
    }
    case 2:  // a cut
      bytes.resize(rng() % bytes.size());
      break;
    case 3:  // bytes anywhere changed
      for (int k = 0; k < 1 + int(rng() % 8); ++k) bytes[rng() % bytes.size()] = char(rng());
      break;
    default: {  // a safetensors header's numbers mutated as text (offsets, shapes)
      uint64_t stated = 0;
      if (bytes.size() >= 8) std::memcpy(&stated, bytes.data(), 8);
      if (stated == 0 || stated > bytes.size() - 8) break;
      const std::string header = bytes.substr(8, stated);
      std::string mutated = mutate_text(header, rng);
      const uint64_t length = mutated.size();
      std::string out(reinterpret_cast<const char*>(&length), 8);
      bytes = out + mutated + bytes.substr(8 + stated);
    }
  }
  return bytes;
}

std::string slurp(const fs::path& path) { return crash::read_file(path.string()); }
void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// ---- The seeds: a 2-layer Qwen3-shaped target (byte vocabulary), its DFlash export, prompts.

class InputFuzz : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path root = root_path();
    fs::remove_all(root);
    fs::create_directories(root);
    ModelConfig config = named_model_config("tiny");
    config.num_layers = 2;
    config.intermediate_size = 64;
    const ModelWeights weights = random_weights(config, 1);
    test::write_model_folder(root / "model", config, weights, "F32");
    const train::DflashConfig dflash = train::default_dflash_config(config, 2, 1);
    train::DflashModel drafter(dflash, {weights.embed_tokens, weights.lm_head_or_embeddings()});
    const std::vector<int32_t> layers = default_capture_layers(config.num_layers, 2);
    checkpoint::write_dflash_export((root / "export").string(), dflash, layers, drafter.layout(),
                                    drafter.params(), {.num_target_layers = config.num_layers});
    fs::create_directories(root / "text");
    spit(root / "text" / "a.txt", "The ring held everywhere we attacked it. Nothing was torn.\n");
    const auto packed = crash::run_command(
        {hsring(), "data", "pack", (root / "text").string(), "-o", (root / "prompts").string()});
    ASSERT_EQ(packed.exit_code, 0) << packed.err;
    const auto config_text = crash::run_command({hsring(), "config", "default"});
    ASSERT_EQ(config_text.exit_code, 0) << config_text.err;
    spit(root / "hsring.conf", config_text.out);
  }
  // The inputs of a failed case stay for replay, with the seeds they name.
  static void TearDownTestSuite() {
    if (!failed_) fs::remove_all(root_path());
  }

  static fs::path root_path() {
    return fs::temp_directory_path() / ("hsring-input-fuzz-" + std::to_string(::getpid()));
  }
  fs::path root() const { return root_path(); }

  // Runs cases 0, 1, ... of `kind` until its share of the budget is spent (at least
  // `min_cases`): `make(case_dir, rng)` writes the mutated input and returns the argv.
  // `seed`: the unmutated input's command, which must exit 0.
  void fuzz(const std::string& kind, const std::set<int>& documented, int min_cases,
            const std::vector<std::string>& seed,
            const std::function<std::vector<std::string>(const fs::path&, Rng&)>& make) {
    const Outcome accepted = run_bounded(seed, root() / (kind + "-seed.stderr"));
    ASSERT_FALSE(accepted.timed_out);
    ASSERT_TRUE(WIFEXITED(accepted.status) && WEXITSTATUS(accepted.status) == 0)
        << kind << " seed: " << crash::describe_status(accepted.status) << "\n"
        << accepted.err;
    const double share = budget_seconds() / 4;
    const auto started = Clock::now();
    int cases = 0;
    std::map<int, int> codes;
    for (;; ++cases) {
      const double spent = std::chrono::duration<double>(Clock::now() - started).count();
      if (cases >= min_cases && spent >= share) break;
      Rng rng(std::hash<std::string>{}(kind) ^ uint64_t(cases));
      const fs::path dir = root() / (kind + "-" + std::to_string(cases));
      fs::create_directories(dir);
      const std::vector<std::string> argv = make(dir, rng);
      const Outcome o = run_bounded(argv, dir / "stderr");
      std::string replay;
      for (const std::string& a : argv) replay += a + " ";
      const bool documented_exit =
          !o.timed_out && WIFEXITED(o.status) && documented.count(WEXITSTATUS(o.status));
      if (!documented_exit) {
        ADD_FAILURE() << kind << " case " << cases << ": "
                      << (o.timed_out ? "no exit within the timeout (a hang)"
                                      : crash::describe_status(o.status))
                      << "; documented exits:" << ::testing::PrintToString(documented)
                      << "\nreplay (input kept): " << replay << "\n"
                      << o.err.substr(0, 4000);
        failed_ = true;
        if (cases > min_cases) break;  // one failure of a kind is enough to read
        continue;
      }
      ++codes[WEXITSTATUS(o.status)];
      fs::remove_all(dir);
    }
    std::cout << "[ fuzz     ] " << kind << ": " << cases << " cases in "
              << std::chrono::duration<double>(Clock::now() - started).count() << " s, exits "
              << ::testing::PrintToString(codes) << std::endl;
  }

  // A copy of seed folder `name` with one of its files mutated.
  void mutate_folder(const std::string& name, const fs::path& dir, Rng& rng) {
    fs::copy(root() / name, dir / name, fs::copy_options::recursive);
    const fs::path file = dir / name / (rng() % 2 ? "config.json" : "model.safetensors");
    const std::string bytes = slurp(file);
    spit(file,
         file.extension() == ".json" ? mutate_text(bytes, rng) : mutate_binary(bytes, rng, 1024));
  }

  std::vector<std::string> eval_argv(const fs::path& model, const fs::path& drafter) const {
    return {hsring(),           "eval",
            "--model",          model.string(),
            "--drafter",        drafter.string(),
            "--prompts",        (root() / "prompts").string(),
            "--max-prompts",    "1",
            "--max-new-tokens", "4",
            "--threads",        "1"};
  }

  static bool failed_;
};

bool InputFuzz::failed_ = false;

TEST_F(InputFuzz, MutatedModelFoldersEndWithADocumentedExit) {
  fuzz("model", {0, 2}, 3, eval_argv(root() / "model", root() / "export"),
       [&](const fs::path& dir, Rng& rng) {
         mutate_folder("model", dir, rng);
         return eval_argv(dir / "model", root() / "export");
       });
}

TEST_F(InputFuzz, MutatedExportsEndWithADocumentedExit) {
  fuzz("export", {0, 2}, 3, eval_argv(root() / "model", root() / "export"),
       [&](const fs::path& dir, Rng& rng) {
         mutate_folder("export", dir, rng);
         return eval_argv(root() / "model", dir / "export");
       });
}

TEST_F(InputFuzz, MutatedShardsEndWithADocumentedExit) {
  fuzz("shard", {0, 1}, 3, {hsring(), "data", "inspect", (root() / "prompts").string()},
       [&](const fs::path& dir, Rng& rng) {
         fs::copy(root() / "prompts", dir / "shards", fs::copy_options::recursive);
         for (const fs::directory_entry& e : fs::directory_iterator(dir / "shards"))
           spit(e.path(), mutate_binary(slurp(e.path()), rng, 128));
         return std::vector<std::string>{hsring(), "data", "inspect", (dir / "shards").string()};
       });
}

// --create-only: the config's values reach the ring's shape and the preflight, and then a
// ring is made (removed again here) rather than a run started.
TEST_F(InputFuzz, MutatedConfigFilesEndWithADocumentedExit) {
  const std::string ring = crash::unique_ring_name();
  const auto create = [&](const fs::path& config) {
    return std::vector<std::string>{hsring(), "--config",      config.string(),
                                    "run",    "--create-only", "--ring",
                                    ring,     "--model",       "synthetic"};
  };
  Ring::remove(ring);
  fuzz("config", {0, 2, 4}, 3, create(root() / "hsring.conf"), [&](const fs::path& dir, Rng& rng) {
    Ring::remove(ring);
    spit(dir / "hsring.conf", mutate_text(slurp(root() / "hsring.conf"), rng));
    return create(dir / "hsring.conf");
  });
  Ring::remove(ring);
}

}  // namespace
}  // namespace hsring
