// Writing where another user may have planted names (common/exclusive_file.h,
// common/text_file.h): a symlink at the temporary's old predictable name or at the final
// name never leads a write to the file it points at.
#include "common/exclusive_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "common/text_file.h"
#include "tests/common/planted_files.h"

namespace hsring {
namespace {

namespace fs = std::filesystem;

class ExclusiveFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hsring-exclusive-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "shared");
    victim_ = (root_ / "victim").string();
    testing::make_victim(victim_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string shared(const std::string& name) const { return (root_ / "shared" / name).string(); }

  fs::path root_;
  std::string victim_;
};

TEST_F(ExclusiveFileTest, WriteFileAtomicallyIgnoresASymlinkAtTheOldTemporaryName) {
  const std::string path = shared("hsring.prom");
  testing::plant_symlink(testing::old_temporary_name(path, ::getpid()), victim_);
  write_file_atomically(path, "new text\n");
  EXPECT_TRUE(testing::victim_untouched(victim_));
  EXPECT_EQ(read_file_if_exists(path).value_or(""), "new text\n");
}

TEST_F(ExclusiveFileTest, WriteFileAtomicallyReplacesASymlinkAtTheNameWithoutFollowingIt) {
  const std::string path = shared("summary.json");
  testing::plant_symlink(path, victim_);
  write_file_atomically(path, "{}\n");
  EXPECT_TRUE(testing::victim_untouched(victim_));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path)));
  EXPECT_EQ(read_file_if_exists(path).value_or(""), "{}\n");
  // Nothing but the file itself is left in the folder.
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "shared"), fs::directory_iterator()), 1);
}

TEST_F(ExclusiveFileTest, TemporariesAreNewFilesOfUnguessableNames) {
  std::set<std::string> names;
  for (int i = 0; i < 200; ++i) {
    const ExclusiveTemporary t = create_exclusive_temporary(shared(""), ".x.tmp-");
    ASSERT_GE(t.fd, 0) << t.path << ": " << t.error;
    struct stat st {};
    ASSERT_EQ(::fstat(t.fd, &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_size, 0);
    EXPECT_EQ(st.st_mode & 0022, 0u);  // never writable by others
    ::close(t.fd);
    EXPECT_TRUE(names.insert(t.path).second) << t.path;
    EXPECT_GE(t.path.size(), shared("").size() + std::string(".x.tmp-").size() + 12);
  }
}

TEST_F(ExclusiveFileTest, FoldersAreNewAndEmpty) {
  const ExclusiveFolder a = create_exclusive_folder(shared(""), ".export.tmp-");
  const ExclusiveFolder b = create_exclusive_folder(shared(""), ".export.tmp-");
  ASSERT_EQ(a.error, 0);
  ASSERT_EQ(b.error, 0);
  EXPECT_NE(a.path, b.path);
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(a.path)));
  EXPECT_TRUE(fs::is_empty(a.path));
  EXPECT_EQ(create_exclusive_folder(shared("missing"), "x").error, ENOENT);
}

}  // namespace
}  // namespace hsring
