#include "eval/prompt_preparation.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/syscheck.h"

extern char** environ;

namespace hsring::eval {

void prepare_chat_prompts(const std::string& model, const std::string& jsonl,
                          const std::string& dir) {
  std::vector<std::string> args = {"/proc/self/exe", "data", "prepare",        "--model", model,
                                   "--dataset",      jsonl,  "--prompts-only", "-o",      dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string command = "hsring";
  for (size_t i = 1; i < args.size(); ++i) command += " " + args[i];
  pid_t pid = 0;
  if (const int e = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); e != 0)
    throw sys_error(Errc::kSystem, e, fmt::format("could not start `{}`", command));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(Errc::kSystem, "waiting for `" + command + "` failed");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFEXITED(status)
                              ? fmt::format("exited with status {}", WEXITSTATUS(status))
                              : fmt::format("was killed by signal {}", WTERMSIG(status));
  throw Error(Errc::kData, "rendering the chats of " + jsonl + " into prompts failed: `" + command +
                               "` " + how +
                               " (its message is above; give --prompts a token-shard "
                               "folder instead)");
}

}  // namespace hsring::eval
