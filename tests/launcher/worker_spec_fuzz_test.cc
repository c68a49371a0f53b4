// Property and fuzz tests of the worker specs the launcher parses from its flags
// (parse_worker_spec: "cpu:N" or a GPU list). Fixed seeds, so a failure reproduces.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"

namespace hsring {
namespace {

std::string format_spec(const WorkerSpec& spec) {
  if (spec.cpu) return "cpu:" + std::to_string(spec.count);
  std::string text;
  for (size_t i = 0; i < spec.gpus.size(); ++i)
    text += (i ? "," : "") + std::to_string(spec.gpus[i]);
  return text;
}

void expect_well_formed(const WorkerSpec& spec, const std::string& text) {
  EXPECT_GE(spec.count, 1u) << text;
  EXPECT_LT(spec.count, kMaxProcesses) << text;
  if (spec.cpu) {
    EXPECT_TRUE(spec.gpus.empty()) << text;
  } else {
    EXPECT_EQ(spec.gpus.size(), spec.count) << text;
    for (int gpu : spec.gpus) {
      EXPECT_GE(gpu, 0) << text;
      EXPECT_LE(gpu, 1023) << text;
    }
  }
}

// Parses `text`: either a well-formed spec that survives format -> parse unchanged, or
// Error naming the flag. Anything else fails the test.
bool parse_checked(const std::string& text) {
  WorkerSpec spec;
  try {
    spec = parse_worker_spec(text, "--targets");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--targets"), std::string::npos) << e.what();
    return false;
  }
  expect_well_formed(spec, text);
  const WorkerSpec again = parse_worker_spec(format_spec(spec), "--targets");
  EXPECT_EQ(again.cpu, spec.cpu) << text;
  EXPECT_EQ(again.count, spec.count) << text;
  EXPECT_EQ(again.gpus, spec.gpus) << text;
  return true;
}

TEST(WorkerSpecTest, EdgeCases) {
  EXPECT_TRUE(parse_checked("cpu:1"));
  EXPECT_TRUE(parse_checked("cpu:63"));
  EXPECT_TRUE(parse_checked("cpu:007"));
  EXPECT_TRUE(parse_checked("0"));
  EXPECT_TRUE(parse_checked("1023"));
  EXPECT_TRUE(parse_checked("3,3,3"));
  for (const char* bad : {"",       "cpu:",   "cpu:0",  "cpu:64", "cpu:-1",
                          "cpu:+1", "cpu:1x", "cpu: 1", "CPU:1",  "cpu:4294967297",
                          "1024",   "-1",     "0,",     ",0",     "0,,1",
                          " 0",     "0 ",     "0x1",    "1;2",    "gpu:0"}) {
    EXPECT_FALSE(parse_checked(bad)) << "'" << bad << "'";
  }
  const WorkerSpec gpus = parse_worker_spec("4,0,4", "--drafters");
  EXPECT_FALSE(gpus.cpu);
  EXPECT_EQ(gpus.count, 3u);
  EXPECT_EQ(gpus.gpus, (std::vector<int>{4, 0, 4}));
}

TEST(WorkerSpecTest, WorkerCountLimitHolds) {
  std::string list = "0";
  for (uint32_t i = 1; i < kMaxProcesses - 1; ++i) list += "," + std::to_string(i);
  EXPECT_TRUE(parse_checked(list));  // kMaxProcesses - 1 workers: one index left for the other role
  EXPECT_FALSE(parse_checked(list + ",5"));
}

TEST(WorkerSpecTest, RandomStringsParseOrThrowInvalidArgument) {
  std::mt19937_64 rng(0x5EED0003);
  const std::string alphabet = "cpu:0123456789,,,:- +x";
  int valid = 0;
  for (int iteration = 0; iteration < 50000; ++iteration) {
    std::string text;
    const size_t length = rng() % 24;
    if (rng() % 4 == 0) text = "cpu:";
    for (size_t i = 0; i < length; ++i)
      text += rng() % 8 == 0 ? char(rng()) : alphabet[rng() % alphabet.size()];
    valid += parse_checked(text);
    if (HasFailure()) return;
  }
  EXPECT_GT(valid, 100) << "the generator should produce some valid specs";
}

TEST(WorkerSpecTest, GeneratedValidSpecsParseToWhatWasGenerated) {
  std::mt19937_64 rng(0x5EED0004);
  for (int iteration = 0; iteration < 5000; ++iteration) {
    WorkerSpec expected;
    std::string text;
    const auto number = [&](uint32_t value) {
      return std::string(rng() % 8 == 0 ? "0" : "") + std::to_string(value);  // leading zero
    };
    if (rng() % 2) {
      expected.count = 1 + uint32_t(rng() % (kMaxProcesses - 1));
      text = "cpu:" + number(expected.count);
    } else {
      expected.cpu = false;
      expected.count = 1 + uint32_t(rng() % (kMaxProcesses - 1));
      for (uint32_t i = 0; i < expected.count; ++i) {
        expected.gpus.push_back(int(rng() % 1024));
        text += (i ? "," : "") + number(uint32_t(expected.gpus.back()));
      }
    }
    WorkerSpec spec;
    ASSERT_NO_THROW(spec = parse_worker_spec(text, "--drafters")) << text;
    EXPECT_EQ(spec.cpu, expected.cpu) << text;
    EXPECT_EQ(spec.count, expected.count) << text;
    EXPECT_EQ(spec.gpus, expected.gpus) << text;
  }
}

}  // namespace
}  // namespace hsring
