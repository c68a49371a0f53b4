// What a co-tenant plants where hsring writes: symlinks (and plain files) under the names
// a writer would use, pointing at a file the attacker wants root to overwrite. The tests of
// every writer (tests/*/…) plant these, run the writer, and check the victim is untouched.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace hsring::testing {

inline constexpr char kVictimText[] = "root's secret, must stay as it is\n";

// Creates `path` holding kVictimText, mode 0600 (a root-owned secret, as in the issue).
inline void make_victim(const std::string& path) {
  std::ofstream(path) << kVictimText;
  ::chmod(path.c_str(), 0600);
}

// True while `path` still holds exactly kVictimText.
inline bool victim_untouched(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str() == kVictimText;
}

inline std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The temporary name write_file_atomically used to take for `path` in process `pid`:
// PATH.tmp.HOST.PID, predictable by any user who can list /proc.
inline std::string old_temporary_name(const std::string& path, pid_t pid) {
  return path + ".tmp." + host_name() + "." + std::to_string(pid);
}

// A symlink at `link` to `target`, replacing whatever had the name.
inline void plant_symlink(const std::string& link, const std::string& target) {
  std::error_code ec;
  std::filesystem::remove(link, ec);
  std::filesystem::create_symlink(target, link);
}

// A shell line for /bin/sh that plants a symlink to `victim` at the old temporary name of
// `path` for the shell's own pid ($$), which the program it then execs keeps.
inline std::string plant_for_exec(const std::string& path, const std::string& victim) {
  return "ln -s '" + victim + "' '" + path + ".tmp.'\"$(uname -n)\"'.'\"$$\"; ";
}

}  // namespace hsring::testing
