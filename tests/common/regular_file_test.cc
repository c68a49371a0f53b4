// Inputs that are not regular files (common/regular_file.h): a FIFO without a writer, a
// folder, a socket or a device is refused at once, by name; a regular file is read, and one
// larger than its kind can be is refused before it is read.
#include "common/regular_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/text_file.h"
#include "tests/common/special_files.h"

namespace hsring {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hsring-regular-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string file(const std::string& name) const { return (root_ / name).string(); }

  fs::path root_;
  testing::HangGuard guard_;
};

TEST_F(RegularFileTest, AFifoWithoutAWriterIsRefusedAtOnceForReadingAndForWriting) {
  const std::string fifo = file("fifo");
  testing::plant_fifo(fifo);
  for (const int flags : {O_RDONLY, O_WRONLY | O_APPEND | O_CREAT, O_WRONLY | O_NOFOLLOW}) {
    const RegularFileOpen opened = try_open_regular_file(fifo, flags);
    EXPECT_LT(opened.fd, 0);
    EXPECT_EQ(opened.error, 0);
    EXPECT_EQ(opened.problem, "a FIFO (named pipe), not a regular file");
  }
  try {
    (void)read_regular_file(fifo, Errc::kModel, 1024);
    FAIL() << "a FIFO was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    EXPECT_EQ(std::string(e.what()), fifo +
                                         ": cannot open: a FIFO (named pipe), not a regular "
                                         "file: give the path of a regular file");
  }
  EXPECT_THROW((void)read_file_if_exists(fifo), std::runtime_error);
}

TEST_F(RegularFileTest, AFifoWithAWriterIsRefusedAfterOpening) {
  // With a writer at the other end the open succeeds; the descriptor's type refuses it.
  const std::string fifo = file("fifo");
  testing::plant_fifo(fifo);
  const int writer = ::open(fifo.c_str(), O_RDWR);  // also a reader, so this does not block
  ASSERT_GE(writer, 0);
  const RegularFileOpen opened = try_open_regular_file(fifo);
  EXPECT_LT(opened.fd, 0);
  EXPECT_EQ(opened.problem, "a FIFO (named pipe), not a regular file");
  ::close(writer);
}

TEST_F(RegularFileTest, FoldersSocketsAndDevicesAreRefusedNamingWhatTheyAre) {
  testing::plant_socket(file("socket"));
  fs::create_directory(file("folder"));
  const struct {
    std::string path;
    std::string what;
  } cases[] = {{file("folder"), "a folder"},
               {file("socket"), "a socket"},
               {"/dev/null", "a character device"}};
  for (const auto& c : cases) {
    for (const int flags : {O_RDONLY, O_WRONLY | O_APPEND | O_CREAT}) {
      const RegularFileOpen opened = try_open_regular_file(c.path, flags);
      EXPECT_LT(opened.fd, 0) << c.path;
      EXPECT_EQ(opened.problem, c.what + ", not a regular file") << c.path;
    }
  }
}

TEST_F(RegularFileTest, AMissingFileGivesItsErrno) {
  const RegularFileOpen opened = try_open_regular_file(file("absent"));
  EXPECT_LT(opened.fd, 0);
  EXPECT_EQ(opened.error, ENOENT);
  EXPECT_FALSE(read_file_if_exists(file("absent")).has_value());
  EXPECT_THROW(open_regular_file(file("absent"), Errc::kData), Error);
}

TEST_F(RegularFileTest, ARegularFileIsOpenedBlockingAndReadWhole) {
  std::ofstream(file("text")) << "hello\n";
  const int fd = open_regular_file(file("text"), Errc::kData);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  ::close(fd);
  EXPECT_EQ(read_regular_file(file("text"), Errc::kData, 6), "hello\n");
}

TEST_F(RegularFileTest, AFileLargerThanItsKindIsRefusedBeforeItIsRead) {
  std::ofstream(file("big")) << std::string(100, 'x');
  try {
    (void)read_regular_file(file("big"), Errc::kCheckpoint, 99);
    FAIL() << "read past the bound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("100 bytes, more than the 99"), std::string::npos)
        << e.what();
  }
}

TEST_F(RegularFileTest, ASymlinkIsLeftToOpenWithNoFollow) {
  // The log writer names a link itself (ELOOP); a link to a FIFO must not block either.
  testing::plant_fifo(file("fifo"));
  fs::create_symlink(file("fifo"), file("link"));
  const RegularFileOpen nofollow = try_open_regular_file(file("link"), O_WRONLY | O_NOFOLLOW);
  EXPECT_EQ(nofollow.error, ELOOP);
  const RegularFileOpen follow = try_open_regular_file(file("link"));
  EXPECT_EQ(follow.problem, "a FIFO (named pipe), not a regular file");
}

}  // namespace
}  // namespace hsring
