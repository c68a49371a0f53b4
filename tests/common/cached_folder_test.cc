// hsring::cached_folder (common/cached_folder.h): built once and reused, never seen half
// built, rebuilt when left broken, nothing left behind when the build throws, and one
// folder for threads that race to build it.
#include "common/cached_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hsring {
namespace {

namespace fs = std::filesystem;

class CachedFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hsring-cached-folder-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Holds when its one file says "done"; the build writes it in two steps, so a reader of
  // a half-built folder would see "half".
  static bool holds(const fs::path& dir) {
    std::ifstream in(dir / "content");
    std::string word;
    return in >> word && word == "done";
  }
  std::function<void(const fs::path&)> build() {
    return [this](const fs::path& staging) {
      builds_.fetch_add(1);
      fs::create_directories(staging);
      std::ofstream(staging / "content") << "half";
      std::ofstream(staging / "content") << "done";
    };
  }
  // The entries of root_ other than `dir`: staging folders left behind.
  size_t leftovers(const fs::path& dir) const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(root_)) n += e.path() != dir;
    return n;
  }

  fs::path root_;
  std::atomic<int> builds_{0};
};

TEST_F(CachedFolderTest, BuildsOnceAndReusesTheFolderAfter) {
  const fs::path dir = root_ / "cache";
  EXPECT_EQ(cached_folder(dir, holds, build(), Errc::kData), dir);
  EXPECT_EQ(cached_folder(dir, holds, build(), Errc::kData), dir);
  EXPECT_EQ(builds_.load(), 1);
  EXPECT_TRUE(holds(dir));
  EXPECT_EQ(leftovers(dir), 0u);
}

TEST_F(CachedFolderTest, AFolderLeftBrokenIsBuiltAgain) {
  const fs::path dir = root_ / "cache";
  fs::create_directories(dir);
  std::ofstream(dir / "content") << "half";
  EXPECT_EQ(cached_folder(dir, holds, build(), Errc::kData), dir);
  EXPECT_TRUE(holds(dir));
  EXPECT_EQ(builds_.load(), 2);  // the first rename fails onto the broken folder
  EXPECT_EQ(leftovers(dir), 0u);
}

TEST_F(CachedFolderTest, AThrowingBuildLeavesNothingAndPassesItsErrorOn) {
  const fs::path dir = root_ / "cache";
  EXPECT_THROW(cached_folder(
                   dir, holds,
                   [](const fs::path& staging) {
                     fs::create_directories(staging);
                     throw std::runtime_error("disk full");
                   },
                   Errc::kData),
               std::runtime_error);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(leftovers(dir), 0u);
}

TEST_F(CachedFolderTest, ABuildThatNeverHoldsEndsInAnErrorNamingTheFolder) {
  const fs::path dir = root_ / "cache";
  try {
    cached_folder(
        dir, holds, [](const fs::path& staging) { fs::create_directories(staging); }, Errc::kModel);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
}

TEST_F(CachedFolderTest, ThreadsRacingToBuildAllGetOneWholeFolder) {
  const fs::path dir = root_ / "cache";
  std::vector<std::thread> threads;
  std::atomic<int> whole{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      const fs::path got = cached_folder(dir, holds, build(), Errc::kData);
      whole.fetch_add(got == dir && holds(got));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(whole.load(), 8);
  EXPECT_GE(builds_.load(), 1);
  EXPECT_EQ(leftovers(dir), 0u);
}

}  // namespace
}  // namespace hsring
