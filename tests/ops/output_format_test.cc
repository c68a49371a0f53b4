// What `hsring` writes for machines must parse whatever the ring is called and whatever
// the segment holds: `status --json` and `--summary-json` through a real JSON parser,
// `status --prometheus` and `--metrics-file` through a strict reader of the text format's
// escaping (and python's prometheus_client parser when it is installed). Ring names that
// cannot be a segment's are refused with the reason; slots whose phase is not a phase are
// reported by name and fail `ring inspect`.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "drafter_proc/grad_exchange.h"
#include "launcher/metrics.h"
#include "launcher/run_summary.h"
#include "shm/ring.h"
#include "tests/crash/process_util.h"

namespace hsring {
namespace {

using crash::Millis;
using nlohmann::json;

std::string hsring_bin() { return crash::bin_dir() + "/hsring"; }

// A name with every character the outputs must escape or pass through: quotes, a
// backslash, spaces, non-ASCII UTF-8. Unique per test process.
std::string awkward_ring_name() {
  static int counter = 0;
  return "hsring-test \"q\" back\\slash ü " + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

// One sample line of the text exposition format, read strictly: metric name, labels with
// their values unescaped (only \\, \" and \n are escapes), the value as written.
struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// nullopt (with `why`) when the line breaks the format.
std::optional<PromSample> parse_prom_line(const std::string& line, std::string& why) {
  static const std::regex name_re("^[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex label_re("^[a-zA-Z_][a-zA-Z0-9_]*");
  std::smatch m;
  if (!std::regex_search(line, m, name_re)) {
    why = "no metric name";
    return std::nullopt;
  }
  PromSample s;
  s.name = m.str();
  size_t i = s.name.size();
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const std::string rest = line.substr(i);
      if (!std::regex_search(rest, m, label_re)) {
        why = "bad label name at " + std::to_string(i);
        return std::nullopt;
      }
      const std::string label = m.str();
      i += label.size();
      if (line.compare(i, 2, "=\"") != 0) {
        why = "label " + label + " without =\"";
        return std::nullopt;
      }
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size()) {
          why = "label " + label + " value without its closing quote";
          return std::nullopt;
        }
        const char c = line[i];
        if (c == '"') break;
        if (c == '\\') {
          const char next = i + 1 < line.size() ? line[i + 1] : '\0';
          if (next == '\\')
            value += '\\';
          else if (next == '"')
            value += '"';
          else if (next == 'n')
            value += '\n';
          else {
            why = std::string("label ") + label + ": '\\" + next + "' is not an escape";
            return std::nullopt;
          }
          ++i;
          continue;
        }
        value += c;
      }
      ++i;  // the closing quote
      s.labels[label] = value;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) {
      why = "labels without their closing '}'";
      return std::nullopt;
    }
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') {
    why = "no space before the value";
    return std::nullopt;
  }
  s.value = line.substr(i + 1);
  if (s.value != "NaN" && s.value != "+Inf" && s.value != "-Inf") {
    static const std::regex number_re("^[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$");
    if (!std::regex_match(s.value, number_re)) {
      why = "value '" + s.value + "' is not a number, NaN, +Inf or -Inf";
      return std::nullopt;
    }
  }
  return s;
}

// Every sample of `text`; a test failure for each line that breaks the format.
std::vector<PromSample> parse_prometheus(const std::string& text) {
  std::vector<PromSample> samples;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::string why;
    if (auto sample = parse_prom_line(line, why))
      samples.push_back(*sample);
    else
      ADD_FAILURE() << "line " << n << " breaks the exposition format (" << why << "): " << line;
  }
  return samples;
}

// The same text through prometheus_client's parser when python has it; skipped with the
// reason printed otherwise.
void parse_with_prometheus_client(const std::string& text, const std::string& ring) {
  const auto probe =
      crash::run_command({"/usr/bin/env", "python3", "-c", "import prometheus_client"});
  if (probe.exit_code != 0) {
    std::cout << "[ skipped  ] prometheus_client parser: python3 cannot import prometheus_client"
              << std::endl;
    return;
  }
  crash::TempDir dir;
  {
    std::ofstream(dir.file("metrics.prom")) << text;
    std::ofstream(dir.file("ring.txt")) << ring;
  }
  const std::string script =
      "import sys\n"
      "from prometheus_client.parser import text_string_to_metric_families\n"
      "ring = open(sys.argv[2], encoding='utf-8').read()\n"
      "n = 0\n"
      "for family in text_string_to_metric_families(open(sys.argv[1], encoding='utf-8').read()):\n"
      "    for s in family.samples:\n"
      "        assert s.labels['ring'] == ring, s.labels\n"
      "        n += 1\n"
      "assert n > 0\n";
  const auto run = crash::run_command(
      {"/usr/bin/env", "python3", "-c", script, dir.file("metrics.prom"), dir.file("ring.txt")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// A small synthetic run on `ring` that leaves its segment behind (--keep-ring).
crash::CommandResult kept_run(const std::string& ring, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {hsring_bin(), "run",           "--ring",    ring,
                                   "--model",    "synthetic",     "--batches", "300",
                                   "--quiet",    "--slots",       "8",         "--max-tokens",
                                   "64",         "--hidden-size", "32",        "--keep-ring"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return crash::run_command(argv, Millis(60000));
}

class RingCleanup {
 public:
  explicit RingCleanup(std::string name) : name_(std::move(name)) { Ring::remove(name_); }
  ~RingCleanup() { Ring::remove(name_); }

 private:
  std::string name_;
};

TEST(OutputFormat, AwkwardRingNameGivesStatusJsonThatParses) {
  const std::string ring = awkward_ring_name();
  RingCleanup cleanup(ring);
  crash::TempDir dir;
  const auto run = kept_run(ring, {"--summary-json", dir.file("summary.json")});
  ASSERT_EQ(run.exit_code, 0) << run.err;

  const auto status =
      crash::run_command({hsring_bin(), "status", "--ring", ring, "--json", "--interval", "0"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(status.out)) << status.out;
  EXPECT_EQ(doc["ring"], ring);
  for (const char* key : {"slots", "slot_bytes", "max_tokens", "hidden_size", "num_layers", "dtype",
                          "launcher_pid", "launcher_alive", "slots_recovered", "interval_s",
                          "content", "training", "slots_by_state", "processes"})
    EXPECT_TRUE(doc.contains(key)) << key << " missing from\n" << status.out;
  EXPECT_EQ(doc["slots"], 8);
  EXPECT_EQ(doc["slots_by_state"]["free"], 8);
  EXPECT_EQ(doc["slots_by_state"]["corrupt"], 0);
  ASSERT_EQ(doc["processes"].size(), 3u);
  EXPECT_EQ(doc["processes"][2]["role"], "drafter");
  EXPECT_EQ(doc["processes"][2]["batches"], 300);
  EXPECT_TRUE(doc["processes"][0]["stages"].contains("target.forward")) << status.out;
}

TEST(OutputFormat, AwkwardRingNameGivesSummaryJsonThatParses) {
  const std::string ring = awkward_ring_name();
  RingCleanup cleanup(ring);
  crash::TempDir dir;
  const auto run = kept_run(ring, {"--summary-json", dir.file("summary.json")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string text = crash::read_file(dir.file("summary.json"));
  json doc;
  ASSERT_NO_THROW(doc = json::parse(text)) << text;
  EXPECT_EQ(doc["ring"], ring);
  EXPECT_EQ(doc["batches_consumed"], 300);
  EXPECT_EQ(doc["batches_torn"], 0);
  EXPECT_TRUE(doc["wall_s"].is_number()) << text;
}

TEST(OutputFormat, AwkwardRingNameGivesPrometheusThatParses) {
  const std::string ring = awkward_ring_name();
  RingCleanup cleanup(ring);
  crash::TempDir dir;
  const auto run = kept_run(ring, {"--metrics-file", dir.file("hsring.prom")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto status = crash::run_command({hsring_bin(), "status", "--ring", ring, "--prometheus"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  for (const std::string& text : {status.out, crash::read_file(dir.file("hsring.prom"))}) {
    const std::vector<PromSample> samples = parse_prometheus(text);
    ASSERT_FALSE(samples.empty()) << text;
    for (const PromSample& s : samples) EXPECT_EQ(s.labels.at("ring"), ring) << s.name;
    parse_with_prometheus_client(text, ring);
  }
}

TEST(OutputFormat, PrometheusEscapesLabelsAndSpellsNonFiniteValues) {
  // A newline cannot be in a ring name, but label values are escaped wherever they come from.
  EXPECT_EQ(prometheus_label("ring", "a\"b\\c\nd"), "ring=\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(prometheus_label("ring", "ü x"), "ring=\"ü x\"");
  EXPECT_EQ(prometheus_value(std::nan("")), "NaN");
  EXPECT_EQ(prometheus_value(HUGE_VAL), "+Inf");
  EXPECT_EQ(prometheus_value(-HUGE_VAL), "-Inf");
  EXPECT_EQ(prometheus_value(2.5), "2.5");
  std::string why;
  EXPECT_TRUE(parse_prom_line("m{" + prometheus_label("ring", "a\"b\\c\nd") + "} NaN", why)) << why;
}

TEST(OutputFormat, SummaryJsonWritesNullForALossThatIsNotFinite) {
  RunSummary s;
  s.ring = "line\nbreak \"and\" \\";  // the writer escapes even what names refuse
  s.trained = true;
  s.steps = 3;
  s.initial_loss = 5.5;
  s.final_loss = std::nan("");
  s.agreement = HUGE_VAL;
  s.wall_s = 1.25;
  const std::string text = summary_json(s);
  json doc;
  ASSERT_NO_THROW(doc = json::parse(text)) << text;
  EXPECT_EQ(doc["ring"], s.ring);
  EXPECT_TRUE(doc["final_loss"].is_null()) << text;
  EXPECT_TRUE(doc["agreement"].is_null()) << text;
  EXPECT_EQ(doc["initial_loss"], 5.5);
  EXPECT_EQ(doc["wall_s"], 1.25);
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
}

// A segment written by a careless or hostile co-tenant: slot 3's state word says phase 6,
// slot 5's phase 7, and the training progress holds a NaN loss.
class CorruptRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ring_name_ = crash::unique_ring_name();
    Ring::remove(ring_name_);
    RingShape shape;
    shape.slot_count = 8;
    shape.max_tokens = 16;
    shape.hidden_size = 8;
    shape.num_layers = 1;
    shape.ledger_capacity = 64;
    ring_ = Ring::create(ring_name_, shape);
    ring_->slot(3).state.store(SlotState(uint64_t(6) << 61 | 17).word());
    ring_->slot(5).state.store(SlotState(uint64_t(7) << 61).word());
    TrainingProgress& t = ring_->header().training;
    t.tokens.store(100);
    t.steps.store(4);
    const float nan = std::nanf("");
    uint32_t bits;
    std::memcpy(&bits, &nan, sizeof bits);
    t.loss_ema.store(bits);
  }
  void TearDown() override {
    ring_.reset();
    Ring::remove(ring_name_);
  }

  std::string ring_name_;
  std::unique_ptr<Ring> ring_;
};

TEST_F(CorruptRingTest, RingInspectNamesOutOfRangePhasesAndFails) {
  const auto inspect = crash::run_command({hsring_bin(), "ring", "inspect", ring_name_});
  EXPECT_EQ(inspect.exit_code, 1) << inspect.out << inspect.err;
  EXPECT_NE(inspect.out.find("slot 3: phase 6 is not a valid phase: corrupt"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("slot 5: phase 7 is not a valid phase: corrupt"), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("free 6 claimed 0 writing 0 ready 0 reading 0 corrupt 2"),
            std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.err.find("2 corrupt slot(s)"), std::string::npos) << inspect.err;
}

TEST_F(CorruptRingTest, StatusJsonCountsCorruptSlotsAndWritesNullForANanLoss) {
  const auto status = crash::run_command(
      {hsring_bin(), "status", "--ring", ring_name_, "--json", "--interval", "0"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(status.out)) << status.out;
  EXPECT_EQ(doc["slots_by_state"]["corrupt"], 2);
  EXPECT_EQ(doc["slots_by_state"]["free"], 6);
  ASSERT_EQ(doc["slot_problems"].size(), 2u);
  EXPECT_EQ(doc["slot_problems"][0], "slot 3: phase 6 is not a valid phase: corrupt");
  EXPECT_TRUE(doc["training"]["loss"].is_null()) << status.out;
  EXPECT_EQ(doc["training"]["steps"], 4);
}

TEST_F(CorruptRingTest, PrometheusCountsCorruptSlotsAndSpellsNan) {
  const auto status =
      crash::run_command({hsring_bin(), "status", "--ring", ring_name_, "--prometheus"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  std::map<std::string, std::string> values;
  for (const PromSample& s : parse_prometheus(status.out)) {
    if (s.name == "hsring_slots") values["slots " + s.labels.at("state")] = s.value;
    if (s.name == "hsring_training_loss") values["loss"] = s.value;
  }
  EXPECT_EQ(values["slots CORRUPT"], "2") << status.out;
  EXPECT_EQ(values["slots FREE"], "6") << status.out;
  EXPECT_EQ(values["loss"], "NaN") << status.out;
}

TEST(RingNames, NamesThatCannotBeASegmentAreRefusedWithTheReason) {
  const std::string too_long(kMaxRingNameBytes + 1, 'x');
  const struct {
    std::string name;
    std::string reason;
  } bad[] = {
      {"", "cannot be empty"},
      {"a/b", "cannot contain '/'"},
      {".", "names a directory"},
      {"..", "names a directory"},
      {too_long, "too long: at most 249"},
      {std::string("a\nb"), "control character (0x0a at byte 1)"},
      {std::string("a\0b", 3), "control character (0x00 at byte 1)"},
      {"a\x7f", "control character (0x7f"},
      {"bad \xff utf8", "must be UTF-8"},
  };
  for (const auto& b : bad) {
    const std::string why = ring_name_problem(b.name);
    EXPECT_NE(why.find(b.reason), std::string::npos) << "'" << b.name << "': " << why;
    EXPECT_THROW(Ring::attach(b.name, Ring::Access::kReadOnly), Error) << b.name;
    EXPECT_FALSE(Ring::remove(b.name)) << b.name;
  }
  for (const std::string& good :
       {std::string("a b"), std::string("q\"uote'"), std::string("back\\slash"),
        std::string("ü-日本"), std::string(kMaxRingNameBytes, 'x')})
    EXPECT_EQ(ring_name_problem(good), "") << good;
  // The limit leaves room for the longest segment named after a ring.
  EXPECT_EQ(kMaxRingNameBytes + GradExchange::name_for("").size(), size_t(NAME_MAX));
}

TEST(RingNames, EveryCommandRefusesABadNameAsAUsageError) {
  const std::string too_long(kMaxRingNameBytes + 1, 'x');
  const std::vector<std::vector<std::string>> commands = {
      {hsring_bin(), "run", "--ring", "a/b", "--model", "synthetic"},
      {hsring_bin(), "run", "--ring", too_long, "--model", "synthetic"},
      {hsring_bin(), "status", "--ring", ".."},
      {hsring_bin(), "stop", "--ring", "a\nb"},
      {hsring_bin(), "ring", "inspect", "."},
      {hsring_bin(), "ring", "remove", "../x"},
  };
  for (const auto& argv : commands) {
    const auto r = crash::run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << argv[1] << ": " << r.err;
    EXPECT_NE(r.err.find("ring name"), std::string::npos) << argv[1] << ": " << r.err;
  }
}

}  // namespace
}  // namespace hsring
