// The run folder's training curves (curves/training_curves.h): metrics.jsonl and the
// TensorBoard event files hold the same steps, a restart drops the steps past its
// checkpoint (never a step twice), a cut last line is dropped, and a folder that cannot be
// written stops the curves without throwing. The event files' bytes are checked here
// against the framing; TensorBoard's own reader reads a real run's in tests/reference.
#include "curves/training_curves.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "curves/tensorboard_event.pb.h"
#include "curves/tfrecord.h"
#include "tests/common/special_files.h"

namespace hsring::curves {
namespace {

namespace fs = std::filesystem;

class CurvesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "hsring-curves-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    run_ = (fs::path(root_) / "run").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  static StepRecord step(uint64_t n, double loss) {
    StepRecord r;
    r.step = n;
    r.wall_time = 1.7e9 + double(n);
    r.loss = loss;
    r.acceptance_length = 1.5;
    r.lr = 1e-3;
    r.target_busy = 0.25;
    r.position_acceptance = {0.5, 0.0};  // a 0 must still be written
    return r;
  }

  std::string read(const fs::path& path) const {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // step -> loss of metrics.jsonl, failing on a step seen twice.
  std::map<uint64_t, double> jsonl_losses() const {
    std::map<uint64_t, double> losses;
    std::istringstream lines(read(fs::path(run_) / kMetricsFile));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_TRUE(losses.emplace(j["step"].get<uint64_t>(), j["loss"].get<double>()).second)
          << "step " << j["step"] << " twice";
    }
    return losses;
  }

  std::vector<fs::path> event_files() const {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(run_) / kTensorboardFolder))
      files.push_back(e.path());
    return files;
  }

  // The events of one file, each record's two checksums verified.
  std::vector<tb::Event> events(const fs::path& path) const {
    const std::string bytes = read(path);
    std::vector<tb::Event> out;
    size_t at = 0;
    while (at < bytes.size()) {
      EXPECT_GE(bytes.size() - at, 16u);
      uint64_t length;
      uint32_t length_crc, data_crc;
      std::memcpy(&length, bytes.data() + at, 8);
      std::memcpy(&length_crc, bytes.data() + at + 8, 4);
      EXPECT_EQ(length_crc, mask_crc32c(crc32c(bytes.data() + at, 8)));
      const char* data = bytes.data() + at + 12;
      std::memcpy(&data_crc, data + length, 4);
      EXPECT_EQ(data_crc, mask_crc32c(crc32c(data, length)));
      tb::Event event;
      EXPECT_TRUE(event.ParseFromArray(data, int(length)));
      out.push_back(event);
      at += 16 + length;
    }
    return out;
  }

  // step -> train/loss of the event files.
  std::map<uint64_t, float> event_losses() const {
    std::map<uint64_t, float> losses;
    for (const fs::path& file : event_files()) {
      const std::vector<tb::Event> all = events(file);
      EXPECT_FALSE(all.empty());
      EXPECT_EQ(all.front().file_version(), "brain.Event:2");
      for (size_t i = 1; i < all.size(); ++i) {
        for (const auto& v : all[i].summary().value()) {
          if (v.tag() == "train/loss") {
            EXPECT_TRUE(losses.emplace(all[i].step(), v.simple_value()).second);
          }
        }
      }
    }
    return losses;
  }

  std::string root_, run_;
};

TEST_F(CurvesTest, EveryStepGoesToBothFiles) {
  auto curves = TrainingCurves::open(run_, 0);
  ASSERT_TRUE(curves->writing());
  for (uint64_t n = 1; n <= 3; ++n) curves->record(step(n, 10.0 - double(n)));
  EXPECT_EQ(jsonl_losses(), (std::map<uint64_t, double>{{1, 9}, {2, 8}, {3, 7}}));
  EXPECT_EQ(event_losses(), (std::map<uint64_t, float>{{1, 9}, {2, 8}, {3, 7}}));
  const std::vector<tb::Event> all = events(event_files().at(0));
  std::map<std::string, float> tags;
  for (const auto& v : all.at(1).summary().value()) {
    EXPECT_TRUE(v.has_simple_value()) << v.tag();
    tags[v.tag()] = v.simple_value();
  }
  EXPECT_EQ(tags.at("pipeline/target_busy"), 0.25f);
  EXPECT_EQ(tags.at("position_acceptance/01"), 0.5f);
  EXPECT_EQ(tags.at("position_acceptance/02"), 0.0f);
  EXPECT_EQ(tags.count("pipeline/drafter_busy"), 0u) << "none measured: none written";
  EXPECT_DOUBLE_EQ(all.at(1).wall_time(), 1.7e9 + 1);
}

TEST_F(CurvesTest, ARestartDropsTheStepsPastItsCheckpointAndNeverWritesOneTwice) {
  {
    auto curves = TrainingCurves::open(run_, 0);
    for (uint64_t n = 1; n <= 5; ++n) curves->record(step(n, double(n)));
  }
  // Killed after step 5; its newest checkpoint is step 3: steps 4 and 5 are trained again.
  auto curves = TrainingCurves::open(run_, 3);
  EXPECT_EQ(curves->dropped(), 2u);
  EXPECT_EQ(jsonl_losses(), (std::map<uint64_t, double>{{1, 1}, {2, 2}, {3, 3}}));
  curves->record(step(4, 40));
  curves->record(step(5, 50));
  EXPECT_EQ(jsonl_losses(), (std::map<uint64_t, double>{{1, 1}, {2, 2}, {3, 3}, {4, 40}, {5, 50}}));
  EXPECT_EQ(event_losses(), (std::map<uint64_t, float>{{1, 1}, {2, 2}, {3, 3}, {4, 40}, {5, 50}}));
  EXPECT_EQ(event_files().size(), 1u) << "the event files are rewritten from metrics.jsonl";
}

TEST_F(CurvesTest, ACutLastLineIsDroppedAndAResumeAppends) {
  {
    auto curves = TrainingCurves::open(run_, 0);
    curves->record(step(1, 1));
  }
  std::ofstream(fs::path(run_) / kMetricsFile, std::ios::app) << "{\"step\":2,\"lo";
  fs::create_directories(fs::path(run_) / kTensorboardFolder / "keep");
  auto curves = TrainingCurves::open(run_, 1);
  EXPECT_EQ(curves->dropped(), 0u);
  curves->record(step(2, 2));
  EXPECT_EQ(jsonl_losses(), (std::map<uint64_t, double>{{1, 1}, {2, 2}}));
  EXPECT_TRUE(fs::exists(fs::path(run_) / kTensorboardFolder / "keep")) << "not an event file";
}

TEST_F(CurvesTest, AFolderThatCannotBeWrittenStopsTheCurvesNotTraining) {
  std::ofstream(run_) << "a file where the run folder should be";
  auto curves = TrainingCurves::open(run_, 0);
  EXPECT_FALSE(curves->writing());
  curves->record(step(1, 1));  // does not throw
}

// A FIFO at metrics.jsonl blocked the drafter's open() of it forever (issue 33).
TEST_F(CurvesTest, AFifoAtTheMetricsFileStopsTheCurvesNotTraining) {
  const hsring::testing::HangGuard guard;
  fs::create_directories(run_);
  hsring::testing::plant_fifo((fs::path(run_) / kMetricsFile).string());
  auto curves = TrainingCurves::open(run_, 0);
  EXPECT_FALSE(curves->writing());
  curves->record(step(1, 1));  // does not throw
}

TEST_F(CurvesTest, AFailedWriteStopsTheCurvesNotTraining) {
  auto curves = TrainingCurves::open(run_, 0);
  curves->record(step(1, 1));
  // A file-size limit below what the files hold: the next append fails (EFBIG), as a
  // write to a full disk would (ENOSPC); the same path is taken.
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit tiny = saved;
  tiny.rlim_cur = 1;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tiny), 0);
  curves->record(step(2, 2));
  const bool writing = curves->writing();
  curves->record(step(3, 3));  // nothing more, no throw
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(writing);
  EXPECT_EQ(jsonl_losses(), (std::map<uint64_t, double>{{1, 1}}));
}

}  // namespace
}  // namespace hsring::curves
