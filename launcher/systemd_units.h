// `hsring systemd install`: writes the unit files of systemd/ (embedded at build time), a
// default config, and the hsring.target wants-links for the configured workers.
#pragma once

#include <string>
#include <vector>

#include "launcher/run_options.h"

namespace hsring {

struct UnitTemplate {
  const char* file_name;
  const char* text;  // with @BIN_DIR@ and @CONF@ placeholders
};
const std::vector<UnitTemplate>& unit_templates();

struct InstallOptions {
  std::string prefix = "/";  // root of the installation (tests use a scratch folder)
  std::string bin_dir;       // where hsring and the workers are
  std::string config_path = "/etc/hsring/hsring.conf";  // as seen by the units
  int systemd_version = 0;                              // 0: ask systemctl
  bool overwrite_config = false;
};

// The unit text for `systemd_version`: placeholders filled, and the backoff keys that
// older systemd does not know (RestartSteps, RestartMaxDelaySec: 254+) dropped.
std::string render_unit(const UnitTemplate& unit, const InstallOptions& options,
                        int systemd_version);

// Writes units, config and wants-links under options.prefix. `default_config` is the
// commented config text to install when none exists. Returns the exit code.
int install_systemd_units(const InstallOptions& options, const RunOptions& run_options,
                          const std::string& default_config);

}  // namespace hsring
