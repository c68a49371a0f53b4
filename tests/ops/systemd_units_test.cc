// The systemd units, exercised the way systemd runs them: `hsring systemd install` into a
// scratch root, `systemd-analyze verify` on every unit, then each unit's ExecStart line
// run with a notification socket and a watchdog, a worker SIGKILLed and started again as
// Restart=on-failure would, and the ring's ExecStop. No systemd as PID 1 is needed.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/common/planted_files.h"
#include "tests/crash/process_util.h"

namespace hsring {
namespace {

using crash::Millis;
namespace fs = std::filesystem;

std::string unit_dir(const crash::TempDir& dir) { return dir.file("root/etc/systemd/system"); }

// Installs the units for `version` into dir/root, with the units reading dir/hsring.conf.
crash::CommandResult install(const crash::TempDir& dir, int version) {
  return crash::run_command({crash::bin_dir() + "/hsring", "systemd", "install", "--prefix",
                             dir.file("root"), "--config-path", dir.file("hsring.conf"),
                             "--systemd-version", std::to_string(version)});
}

// The words of the unit's `key=` line with %i replaced (the units quote nothing).
std::vector<std::string> unit_command(const std::string& unit_text, const std::string& key,
                                      const std::string& instance) {
  std::istringstream lines(unit_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key + "=", 0) != 0) continue;
    std::vector<std::string> words;
    std::istringstream split(line.substr(key.size() + 1));
    for (std::string word; split >> word;) {
      for (size_t at = word.find("%i"); at != std::string::npos; at = word.find("%i"))
        word.replace(at, 2, instance);
      words.push_back(word);
    }
    return words;
  }
  return {};
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    timeval tv{0, 100'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NotifySocket() { ::close(fd_); }
  const std::string& path() const { return path_; }

  // Waits up to `timeout` for a datagram containing `needle`.
  bool wait_for(const std::string& needle, Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[512];
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer - 1, 0);
      if (n <= 0) continue;
      if (std::string(buffer, size_t(n)).find(needle) != std::string::npos) return true;
    }
    return false;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

std::string read_unit(const crash::TempDir& dir, const std::string& name) {
  return crash::read_file(unit_dir(dir) + "/" + name);
}

TEST(SystemdUnits, InstallWritesUnitsConfigAndWants) {
  crash::TempDir dir;
  const auto result = install(dir, 255);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* unit : {"hsring.target", "hsring-ring.service", "hsring-target@.service",
                           "hsring-drafter@.service"}) {
    EXPECT_TRUE(fs::exists(unit_dir(dir) + "/" + unit)) << unit;
  }
  const std::string target = read_unit(dir, "hsring-target@.service");
  EXPECT_NE(target.find("LimitMEMLOCK=infinity"), std::string::npos);
  EXPECT_NE(target.find("KillMode=control-group"), std::string::npos);
  EXPECT_NE(target.find("Type=notify"), std::string::npos);
  EXPECT_NE(target.find("WatchdogSec="), std::string::npos);
  EXPECT_NE(target.find("StartLimitBurst="), std::string::npos);
  EXPECT_NE(target.find("RestartSteps="), std::string::npos) << "systemd 255 has RestartSteps";
  EXPECT_NE(target.find("--config " + dir.file("hsring.conf")), std::string::npos);
  // The default config starts two CPU targets and one drafter: one wants-link each.
  for (const char* link : {"hsring-target@0.service", "hsring-target@1.service",
                           "hsring-drafter@0.service", "hsring-ring.service"}) {
    EXPECT_TRUE(fs::is_symlink(unit_dir(dir) + "/hsring.target.wants/" + link)) << link;
  }
  EXPECT_NE(crash::read_file(dir.file("root") + dir.file("hsring.conf")).find("[run]"),
            std::string::npos);
}

// `systemd install` into folders another user can write: a symlink planted at each file's
// old temporary name (PATH.tmp.HOST.PID) never leads root's write to the file it points at.
TEST(SystemdUnits, InstallNeverWritesThroughPlantedSymlinks) {
  crash::TempDir reference, dir;
  ASSERT_EQ(install(reference, 255).exit_code, 0);
  const std::string victim = dir.file("victim");
  testing::make_victim(victim);
  std::string plant;
  fs::create_directories(unit_dir(dir));
  for (const auto& entry : fs::directory_iterator(unit_dir(reference)))
    if (entry.is_regular_file())
      plant +=
          testing::plant_for_exec(unit_dir(dir) + "/" + entry.path().filename().string(), victim);
  const std::string config = dir.file("root") + dir.file("hsring.conf");
  fs::create_directories(fs::path(config).parent_path());
  plant += testing::plant_for_exec(config, victim);
  const auto result = crash::run_command({"/bin/sh", "-c", plant + "exec \"$@\"", "sh",
                                          crash::bin_dir() + "/hsring", "systemd", "install",
                                          "--prefix", dir.file("root"), "--config-path",
                                          dir.file("hsring.conf"), "--systemd-version", "255"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(testing::victim_untouched(victim));
  for (const auto& entry : fs::directory_iterator(unit_dir(reference))) {
    if (entry.is_regular_file()) {
      EXPECT_NE(read_unit(dir, entry.path().filename().string()).find("[Unit]"), std::string::npos)
          << entry.path().filename();
    }
  }
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(config)));
}

TEST(SystemdUnits, OlderSystemdGetsNoUnknownKeys) {
  crash::TempDir dir;
  ASSERT_EQ(install(dir, 252).exit_code, 0);
  const std::string target = read_unit(dir, "hsring-target@.service");
  EXPECT_EQ(target.find("RestartSteps"), std::string::npos);
  EXPECT_EQ(target.find("RestartMaxDelaySec"), std::string::npos);
  EXPECT_NE(target.find("RestartSec=100ms"), std::string::npos);
}

TEST(SystemdUnits, SystemdAnalyzeVerifiesEveryUnit) {
  if (::access("/usr/bin/systemd-analyze", X_OK) != 0)
    GTEST_SKIP() << "systemd-analyze is not installed (package systemd)";
  crash::TempDir dir;
  ASSERT_EQ(install(dir, 252).exit_code, 0);
  // Instances stand for the templates; verify sees the unit folder as its search path.
  const auto verify = crash::run_command(
      {"/usr/bin/systemd-analyze", "verify", unit_dir(dir) + "/hsring.target",
       unit_dir(dir) + "/hsring-ring.service", unit_dir(dir) + "/hsring-target@0.service",
       unit_dir(dir) + "/hsring-drafter@0.service"},
      Millis(60000));
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(verify.err.find("Unknown key"), std::string::npos) << verify.err;
}

TEST(SystemdUnits, ExecLinesRunThePipelineAndRestartAfterSigkill) {
  crash::TempDir dir;
  ASSERT_EQ(install(dir, 252).exit_code, 0);
  const std::string ring = crash::unique_ring_name();
  {
    std::ofstream config(dir.file("hsring.conf"));
    config << "[run]\nring=\"" << ring
           << "\"\nmodel=\"synthetic\"\ntargets=\"cpu:2\"\ndrafters=\"cpu:1\"\n"
           << "slots=8\nmax-tokens=64\nhidden-size=32\nnum-layers=2\n";
  }
  const std::string ring_unit = read_unit(dir, "hsring-ring.service");
  const auto start_ring = crash::run_command(unit_command(ring_unit, "ExecStart", ""));
  ASSERT_EQ(start_ring.exit_code, 0) << start_ring.err;
  ASSERT_TRUE(crash::segment_exists(ring));
  // Starting the ring service again reuses the compatible segment.
  EXPECT_EQ(crash::run_command(unit_command(ring_unit, "ExecStart", "")).exit_code, 0);

  struct Unit {
    std::string role;
    std::string instance;
    std::unique_ptr<NotifySocket> notify;
    std::unique_ptr<crash::Spawned> process;
  };
  std::vector<Unit> units;
  for (const auto& [role, instance] : std::vector<std::pair<std::string, std::string>>{
           {"target", "0"}, {"target", "1"}, {"drafter", "0"}}) {
    units.push_back({role, instance, nullptr, nullptr});
  }
  auto start = [&](Unit& u) {
    const std::string text = read_unit(dir, "hsring-" + u.role + "@.service");
    const std::string socket_path = dir.file(u.role + u.instance + ".sock");
    u.notify.reset();
    ::unlink(socket_path.c_str());  // a restart binds the same path again
    u.notify = std::make_unique<NotifySocket>(socket_path);
    // What systemd sets for Type=notify with WatchdogSec=: the socket and the period.
    u.process = std::make_unique<crash::Spawned>(
        unit_command(text, "ExecStart", u.instance), dir.file(u.role + u.instance + ".out"),
        dir.file(u.role + u.instance + ".err"),
        std::vector<std::string>{"NOTIFY_SOCKET=" + u.notify->path(), "WATCHDOG_USEC=400000"});
  };
  for (Unit& u : units) start(u);
  for (Unit& u : units) {
    EXPECT_TRUE(u.notify->wait_for("READY=1", Millis(10000))) << u.role << u.instance;
    EXPECT_TRUE(u.notify->wait_for("WATCHDOG=1", Millis(5000))) << u.role << u.instance;
  }

  // SIGKILL target 0; Restart=on-failure starts the same ExecStart again.
  units[0].process->signal(SIGKILL);
  const auto killed = units[0].process->wait(Millis(5000));
  ASSERT_TRUE(killed.has_value());
  EXPECT_TRUE(WIFSIGNALED(*killed));
  start(units[0]);
  EXPECT_TRUE(units[0].notify->wait_for("READY=1", Millis(10000)));
  std::this_thread::sleep_for(Millis(500));

  const auto status =
      crash::run_command({crash::bin_dir() + "/hsring", "status", "--ring", ring, "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  // Target 0 is in its second epoch; nothing torn; batches flowed.
  EXPECT_NE(status.out.find("\"role\": \"target\", \"index\": 0, \"pid\": " +
                            std::to_string(units[0].process->pid()) + ", \"epoch\": 2"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find("\"torn\": 1"), std::string::npos);

  // `systemctl stop`: SIGTERM to each unit's processes; a clean exit is not a failure.
  for (Unit& u : units) u.process->signal(SIGTERM);
  for (Unit& u : units) {
    const auto stopped = u.process->wait(Millis(15000));
    ASSERT_TRUE(stopped.has_value()) << u.role << u.instance << " ignored SIGTERM";
    EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0)
        << u.role << u.instance << ": " << crash::describe_status(*stopped);
  }
  const auto stop_ring = crash::run_command(unit_command(ring_unit, "ExecStop", ""));
  EXPECT_EQ(stop_ring.exit_code, 0) << stop_ring.err;
  EXPECT_FALSE(crash::segment_exists(ring));
}

// The environment a user command's unit left in dir/ROLE-env.EPOCH (the command writes
// it there before it execs the worker): NAME -> value.
std::map<std::string, std::string> recorded_env(const crash::TempDir& dir, const std::string& role,
                                                int epoch) {
  std::map<std::string, std::string> env;
  std::istringstream lines(crash::read_file(dir.file(role + "-env." + std::to_string(epoch))));
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// target-cmd / drafter-cmd in the config: the units run the user commands with the
// environment `hsring run` gives them (HSRING_EPOCH the epoch each start opens), and
// each is supervised as a built-in worker's unit is (READY=1, watchdog, a restart after
// SIGKILL opening the next epoch, a clean exit at SIGTERM).
TEST(SystemdUnits, UserCommandsRunAsUnitsWithTheLaunchersEnvironment) {
  crash::TempDir dir;
  ASSERT_EQ(install(dir, 252).exit_code, 0);
  const std::string ring = crash::unique_ring_name();
  // A compound command, so the shell forks before it execs the worker (NotifyAccess=all).
  const auto command = [&](const std::string& role) {
    return "env > " + dir.file(role) + "-env.$HSRING_EPOCH; exec " + crash::bin_dir() + "/hsring-" +
           role + " --ring $HSRING_RING --index $HSRING_INDEX";
  };
  {
    std::ofstream config(dir.file("hsring.conf"));
    config << "[run]\nring=\"" << ring
           << "\"\nmodel=\"synthetic\"\ntargets=\"cpu:1\"\ndrafters=\"cpu:1\"\n"
           << "slots=8\nmax-tokens=64\nhidden-size=32\nnum-layers=2\nprofile-interval=0.5\n"
           << "target-cmd=\"" << command("target") << "\"\ndrafter-cmd=\"" << command("drafter")
           << "\"\n";
  }
  const std::string ring_unit = read_unit(dir, "hsring-ring.service");
  ASSERT_EQ(crash::run_command(unit_command(ring_unit, "ExecStart", "")).exit_code, 0);

  std::map<std::string, std::unique_ptr<NotifySocket>> sockets;
  std::map<std::string, std::unique_ptr<crash::Spawned>> processes;
  auto start = [&](const std::string& role) {
    const std::string path = dir.file(role + ".sock");
    sockets[role].reset();
    ::unlink(path.c_str());
    sockets[role] = std::make_unique<NotifySocket>(path);
    processes[role] = std::make_unique<crash::Spawned>(
        unit_command(read_unit(dir, "hsring-" + role + "@.service"), "ExecStart", "0"),
        dir.file(role + ".out"), dir.file(role + ".err"),
        std::vector<std::string>{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=400000"});
  };
  for (const char* role : {"target", "drafter"}) start(role);
  for (const char* role : {"target", "drafter"}) {
    EXPECT_TRUE(sockets[role]->wait_for("READY=1", Millis(10000))) << role;
    EXPECT_TRUE(sockets[role]->wait_for("WATCHDOG=1", Millis(5000))) << role;
    const auto env = recorded_env(dir, role, 1);
    EXPECT_EQ(env.count("HSRING_RING") ? env.at("HSRING_RING") : "", ring) << role;
    EXPECT_EQ(env.count("HSRING_ROLE") ? env.at("HSRING_ROLE") : "", role);
    EXPECT_EQ(env.count("HSRING_INDEX") ? env.at("HSRING_INDEX") : "", "0") << role;
    EXPECT_EQ(env.count("HSRING_EPOCH") ? env.at("HSRING_EPOCH") : "", "1") << role;
    EXPECT_EQ(env.count("HSRING_LIB") ? env.at("HSRING_LIB") : "",
              crash::bin_dir() + "/libhsring.so")
        << role;
    EXPECT_EQ(env.count("HSRING_PROFILE_INTERVAL") ? env.at("HSRING_PROFILE_INTERVAL") : "", "0.5")
        << role;
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u) << role << ": a CPU worker";
  }
  // Restart=on-failure after a SIGKILL: the same ExecStart, told the next epoch.
  processes["target"]->signal(SIGKILL);
  ASSERT_TRUE(processes["target"]->wait(Millis(5000)).has_value());
  start("target");
  EXPECT_TRUE(sockets["target"]->wait_for("READY=1", Millis(10000)));
  EXPECT_EQ(recorded_env(dir, "target", 2)["HSRING_EPOCH"], "2");
  std::this_thread::sleep_for(Millis(500));
  const auto status =
      crash::run_command({crash::bin_dir() + "/hsring", "status", "--ring", ring, "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("\"role\": \"target\", \"index\": 0, \"pid\": " +
                            std::to_string(processes["target"]->pid()) + ", \"epoch\": 2"),
            std::string::npos)
      << status.out;
  for (const char* role : {"target", "drafter"}) processes[role]->signal(SIGTERM);
  for (const char* role : {"target", "drafter"}) {
    const auto stopped = processes[role]->wait(Millis(15000));
    ASSERT_TRUE(stopped.has_value()) << role << " ignored SIGTERM";
    EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0)
        << role << ": " << crash::describe_status(*stopped);
  }
  EXPECT_EQ(crash::run_command(unit_command(ring_unit, "ExecStop", "")).exit_code, 0);
}

}  // namespace
}  // namespace hsring
