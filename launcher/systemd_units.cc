#include "launcher/systemd_units.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "launcher/metrics.h"
#include "launcher/worker_spec.h"

namespace hsring {

namespace fs = std::filesystem;

namespace {

constexpr int kFirstSystemdWithRestartSteps = 254;

int installed_systemd_version() {
  FILE* pipe = ::popen("systemctl --version 2>/dev/null", "r");
  if (pipe == nullptr) return 0;
  int version = 0;
  if (std::fscanf(pipe, "systemd %d", &version) != 1) version = 0;
  ::pclose(pipe);
  return version;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// The unit instances hsring.target should start: one per configured worker.
std::vector<std::string> worker_instances(const RunOptions& run) {
  std::vector<std::string> units;
  for (const auto& [role, text] :
       {std::pair<const char*, std::string>{"target", run.targets}, {"drafter", run.drafters}}) {
    const WorkerSpec spec = parse_worker_spec(text, std::string("--") + role + "s");
    for (uint32_t i = 0; i < spec.count; ++i) {
      const int instance = spec.cpu ? int(i) : spec.gpus[i];
      units.push_back(std::string("hsring-") + role + "@" + std::to_string(instance) + ".service");
    }
  }
  return units;
}

}  // namespace

std::string render_unit(const UnitTemplate& unit, const InstallOptions& options,
                        int systemd_version) {
  std::string text = unit.text;
  replace_all(text, "@BIN_DIR@", options.bin_dir);
  replace_all(text, "@CONF@", options.config_path);
  if (systemd_version >= kFirstSystemdWithRestartSteps) return text;
  // Older systemd: fixed RestartSec; the crash-loop limit still applies (see operations.md).
  std::istringstream lines(text);
  std::string kept, line;
  while (std::getline(lines, line)) {
    if (line.rfind("RestartSteps=", 0) == 0 || line.rfind("RestartMaxDelaySec=", 0) == 0) continue;
    if (line.rfind("# Exponential backoff", 0) == 0) continue;
    kept += line + "\n";
  }
  return kept;
}

int install_systemd_units(const InstallOptions& options, const RunOptions& run_options,
                          const std::string& default_config) {
  const int version =
      options.systemd_version ? options.systemd_version : installed_systemd_version();
  const fs::path root(options.prefix);
  const fs::path unit_dir = root / "etc/systemd/system";
  const fs::path config = root / fs::path(options.config_path).relative_path();
  fs::create_directories(unit_dir);
  fs::create_directories(config.parent_path());
  for (const UnitTemplate& unit : unit_templates()) {
    write_file_atomically((unit_dir / unit.file_name).string(),
                          render_unit(unit, options, version));
    std::cerr << "wrote " << (unit_dir / unit.file_name).string() << "\n";
  }
  if (!fs::exists(config) || options.overwrite_config) {
    write_file_atomically(config.string(), default_config);
    std::cerr << "wrote " << config.string() << "\n";
  } else {
    std::cerr << "kept existing " << config.string() << "\n";
  }
  const fs::path wants = unit_dir / "hsring.target.wants";
  fs::create_directories(wants);
  for (const auto& old : fs::directory_iterator(wants)) fs::remove(old.path());
  for (const std::string& unit : worker_instances(run_options)) {
    const std::string base = unit.substr(0, unit.find('@') + 1) + ".service";
    fs::create_symlink(unit_dir / base, wants / unit);
  }
  fs::create_symlink(unit_dir / "hsring-ring.service", wants / "hsring-ring.service");
  if (version < kFirstSystemdWithRestartSteps) {
    std::cerr << "note: systemd " << version << " predates RestartSteps (254): workers restart "
              << "after a fixed 100 ms, and StartLimitBurst still stops a crash loop\n";
  }
  std::cerr << "next: systemctl daemon-reload && systemctl enable --now hsring.target\n";
  return 0;
}

}  // namespace hsring
