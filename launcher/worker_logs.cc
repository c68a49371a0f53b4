#include "launcher/worker_logs.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/error.h"
#include "common/regular_file.h"
#include "common/syscheck.h"

namespace hsring {

namespace {

// "uid 65534 (nobody)"
std::string user_text(uid_t uid) {
  std::string text = fmt::format("uid {}", uid);
  std::vector<char> buffer(16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    text += std::string(" (") + found->pw_name + ")";
  return text;
}

}  // namespace

void prepare_log_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st {};
  if (ec || ::stat(dir.c_str(), &st) != 0)
    throw Error(Errc::kUsage, dir,
                fmt::format("--log-dir: cannot create the folder: {}; give a folder this user "
                            "can write",
                            ec ? ec.message() : errno_text(errno)));
  if (!S_ISDIR(st.st_mode))
    throw Error(Errc::kUsage, dir, "--log-dir: not a folder; give a folder");
  if (st.st_uid != ::geteuid())
    throw Error(Errc::kUsage, dir,
                "--log-dir: the folder belongs to " + user_text(st.st_uid) +
                    ", not to this user (" + user_text(::geteuid()) +
                    "): its owner could read the workers' logs or plant links in it that "
                    "redirect them. Give a folder of this user's own");
}

std::string create_private_log_folder(const std::string& parent, const std::string& ring) {
  std::string name = parent + "/hsring-" + ring + "-XXXXXX";
  if (::mkdtemp(name.data()) == nullptr)
    throw Error(Errc::kSystem, parent,
                fmt::format("cannot create a folder for the user commands' logs: {}; set "
                            "TMPDIR or give --log-dir",
                            errno_text(errno)));
  return name;
}

int open_worker_log(const std::string& path) {
  // Never blocks on a FIFO planted at the name (common/regular_file.h).
  const RegularFileOpen opened =
      try_open_regular_file(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
  const int fd = opened.fd;
  if (fd < 0) {
    const int error = opened.error;
    if (error == 0)
      throw Error(
          Errc::kUsage, path,
          "worker log: " + opened.problem + ". Remove it, or give a --log-dir of this user's own");
    if (error == ELOOP)
      throw Error(Errc::kUsage, path,
                  "worker log: a symlink has the log's name; hsring does not write through "
                  "links. Remove it, or give a --log-dir of this user's own");
    throw sys_error(Errc::kSystem, error, path, "cannot open the worker log");
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0)
    problem = fmt::format("cannot stat it: {}", errno_text(errno));
  else if (st.st_uid != ::geteuid())
    problem = "the file belongs to " + user_text(st.st_uid) + ", who would read the logs";
  else if (st.st_nlink != 1)
    problem = fmt::format(
        "the file has {} names (a hard link to it elsewhere would receive the logs)", st.st_nlink);
  if (problem.empty()) return fd;
  ::close(fd);
  throw Error(Errc::kUsage, path,
              "worker log: " + problem + ". Remove it, or give a --log-dir of this user's own");
}

}  // namespace hsring
