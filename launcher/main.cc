// hsring: the launcher and operator tool. `hsring run` creates a ring and supervises its
// workers; `eval` measures a DFlash export's acceptance length; `status`, `stop`, `ring ...`,
// `config default` and `systemd install` look after running or stale rings and unattended
// installations; `model pretrain` trains a small target on the built-in corpus.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "builtin/pretrain.h"
#include "common/cli_checks.h"
#include "common/error.h"
#include "common/log.h"
#include "data/data_commands.h"
#include "eval/builtin_data.h"
#include "eval/eval_command.h"
#include "eval/generate.h"
#include "launcher/gpu_split.h"
#include "launcher/metrics.h"
#include "launcher/preflight.h"
#include "launcher/ring_commands.h"
#include "launcher/run_options.h"
#include "launcher/service_commands.h"
#include "launcher/slot_census.h"
#include "launcher/status.h"
#include "launcher/supervisor.h"
#include "launcher/systemd_units.h"
#include "shm/ring.h"
#include "worker/node_topology.h"
#include "worker/profile_interval.h"

namespace {

using namespace hsring;

// The worker programs live beside this binary.
std::string program_dir() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  return std::filesystem::path(path).parent_path().string();
}

// The file of `--config FILE` / `--config=FILE` once config_first() moved it to the
// front; "" when none.
std::string config_path(const std::vector<std::string>& args) {
  if (args.size() > 2 && args[1] == "--config") return args[2];
  if (args.size() > 1 && args[1].rfind("--config=", 0) == 0) return args[1].substr(9);
  return "";
}

// CLI11 reads --config only before the subcommand; accept it anywhere by moving it (and
// its value) to the front.
std::vector<std::string> config_first(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 2; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      std::vector<std::string> moved = {args[i], args[i + 1]};
      args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
      args.insert(args.begin() + 1, moved.begin(), moved.end());
      break;
    }
    if (args[i].rfind("--config=", 0) == 0) {
      std::string moved = args[i];
      args.erase(args.begin() + long(i));
      args.insert(args.begin() + 1, moved);
      break;
    }
  }
  return args;
}

// The commented default config: every `run` flag with its default, in the [run] section
// that `hsring --config FILE run` reads.
std::string default_config(CLI::App& run) {
  std::string body = run.config_to_str(/*default_also=*/true, /*write_description=*/true);
  // Commented out: a key that is set wins over torchrun's and Slurm's variables.
  for (const char* key : {"\nnnodes=", "\nnode-rank="}) {
    if (const size_t at = body.find(key); at != std::string::npos) body.insert(at + 1, "# ");
  }
  return "# hsring configuration: `hsring --config FILE run` (and the systemd units) read\n"
         "# the [run] section; every key is a `hsring run` flag without its dashes.\n"
         "[run]\n" +
         body;
}

int show_status(const std::string& name, const StatusOptions& options, bool prometheus,
                double watch_s) {
  auto ring = Ring::attach(name, Ring::Access::kReadOnly);
  if (prometheus) {
    // Cumulative histograms and counters: Prometheus takes its own differences.
    do {
      std::cout << render_prometheus(*ring) << std::flush;
      if (watch_s > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(int64_t(watch_s * 1e6)));
    } while (watch_s > 0);
    return 0;
  }
  if (watch_s <= 0) {
    std::cout << render_status(*ring, options) << std::flush;
    return 0;
  }
  // Each refresh covers the time since the one before (the first, --interval), or with
  // --interval 0 everything since the ring was created.
  const bool since_creation = options.interval_s <= 0;
  StatusSample before = read_status_sample(*ring);
  double wait_s = since_creation ? 0 : options.interval_s;
  while (true) {
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(wait_s * 1e6)));
    StatusSample after = read_status_sample(*ring);
    const std::string text = since_creation ? render_status(*ring, options)
                                            : render_status(*ring, before, after, options);
    if (!options.json) std::cout << "\033[H\033[2J";
    std::cout << text << std::flush;
    before = std::move(after);
    wait_s = watch_s;
  }
}

// `hsring ring inspect`: the segment validated at attach, then its slots. A slot whose
// state word is corrupt fails the inspection (exit 1) after the report names it.
int inspect_ring(const std::string& name) {
  auto ring = Ring::attach(name, Ring::Access::kReadOnly);
  std::cout << render_status(*ring, {.json = false, .interval_s = 0}) << std::flush;
  const SlotCensus census = take_slot_census(*ring);
  if (census.corrupt == 0) return 0;
  std::cerr << "hsring ring inspect: ring '" << name << "' has " << census.corrupt
            << " corrupt slot(s): " << census.problems.front()
            << (census.corrupt > 1 ? " (and more above)" : "") << "\n";
  return 1;
}

// `hsring model pretrain`: progress lines while training, then what it reached.
int pretrain_model(builtin::PretrainOptions options, const std::string& out) {
  options.out = out;
  std::printf("pretrain: %u layers, %llu steps of %zu tokens, seed %llu -> %s\n", options.layers,
              (unsigned long long)options.steps, options.batch_tokens,
              (unsigned long long)options.seed, out.c_str());
  const builtin::PretrainResult r =
      builtin::run_pretrain(options, [](const builtin::PretrainProgress& p) {
        std::printf("step %5llu/%llu  loss %.4f  lr %.2e  %.0f tokens/s  %.1f s\n",
                    (unsigned long long)p.step, (unsigned long long)p.total_steps, p.loss, p.lr,
                    p.tokens_per_s, p.elapsed_s);
        std::fflush(stdout);
      });
  std::printf(
      "pretrain: %llu steps, %llu tokens in %.1f s (%.0f tokens/s)%s\n"
      "  training loss: %.4f at the first step, %.4f at the end (uniform: ln 256 = "
      "5.5452)\n"
      "  fixed batch:   %.4f before, %.4f after (top-1 %.1f%%)\n"
      "  wrote %s (config.json, model.safetensors; token %d is reserved, the DFlash mask)\n",
      (unsigned long long)r.steps, (unsigned long long)r.tokens, r.seconds, r.tokens_per_s,
      r.stopped_by_time ? ", stopped by --seconds" : "", r.first_loss, r.last_loss,
      r.eval_loss_start, r.eval_loss_end, 100 * r.eval_agreement_end, out.c_str(),
      builtin::kReservedMaskToken);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hsring: moves target hidden states to drafter training through a crash-safe "
      "shared-memory ring",
      "hsring"};
  app.require_subcommand(1);
  app.set_config("--config", "", "Read flags from a TOML/INI file ([run] section)");
  app.allow_config_extras(false);
  // Before any subcommand exists: each takes its parent's reader when it is made.
  std::vector<std::string> args = config_first(argc, argv);
  const auto checked_config = std::make_shared<CheckedConfig>(config_path(args));
  app.config_formatter(checked_config);

  RunOptions run_options;
  CLI::App* run = app.add_subcommand("run", "Create a ring, start and supervise its workers");
  add_run_flags(*run, run_options);
  bool create_only = false, remove_only = false;
  std::string exec_worker_spec;
  auto* service = run->add_option_group("systemd", "For systemd units; one step of a run each");
  // Not configurable: a config file says what the pipeline is, not which step to take.
  service
      ->add_flag("--create-only", create_only,
                 "Create the ring (or reuse a compatible one) and exit")
      ->configurable(false);
  service->add_flag("--remove-only", remove_only, "Remove the ring and exit")->configurable(false);
  service
      ->add_option("--exec-worker", exec_worker_spec,
                   "Become worker ROLE:INSTANCE (target:0, drafter:2)")
      ->configurable(false);
  service->require_option(0, 1);

  std::string status_ring = "hsring";
  StatusOptions status_options;
  bool prometheus = false;
  double watch_s = 0;
  CLI::App* status = app.add_subcommand("status", "Show a ring's processes and slots (read-only)");
  status->add_option("--ring", status_ring, "Ring name")
      ->capture_default_str()
      ->check(ring_name_check());
  status->add_flag("--json", status_options.json, "JSON output");
  status->add_flag("--prometheus", prometheus, "Prometheus text exposition");
  status->add_option("--watch", watch_s, "Refresh every S seconds")
      ->expected(0, 1)
      ->default_str("1")
      ->check(CLI::PositiveNumber);
  status
      ->add_option("--interval", status_options.interval_s,
                   "Rates and stage timings over the last S seconds (two readings S apart; "
                   "with --watch, the time between refreshes); 0: since the ring was created")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));

  std::string stop_name = "hsring";
  CLI::App* stop = app.add_subcommand("stop", "Ask a ring's launcher to drain and stop");
  stop->add_option("--ring", stop_name, "Ring name")
      ->capture_default_str()
      ->check(ring_name_check());

  CLI::App* ring_cmd = app.add_subcommand("ring", "Inspect, remove or garbage-collect segments");
  ring_cmd->require_subcommand(1);
  std::string inspect_name, remove_name;
  bool remove_force = false, gc_dry_run = false;
  CLI::App* inspect = ring_cmd->add_subcommand("inspect", "Validate a segment and show it");
  inspect->add_option("name", inspect_name, "Ring name")->required()->check(ring_name_check());
  CLI::App* remove = ring_cmd->add_subcommand("remove", "Remove a (stale) segment");
  remove->add_option("name", remove_name, "Ring name")->required()->check(ring_name_check());
  remove->add_flag("--force", remove_force, "Remove even while processes are alive");
  CLI::App* gc = ring_cmd->add_subcommand("gc", "Remove every ring whose processes are all dead");
  gc->add_flag("--dry-run", gc_dry_run, "Only say what would be removed");

  CLI::App* config = app.add_subcommand("config", "Configuration files");
  config->require_subcommand(1);
  CLI::App* config_default = config->add_subcommand("default", "Print a commented default config");

  InstallOptions install_options;
  install_options.bin_dir = program_dir();
  CLI::App* systemd = app.add_subcommand("systemd", "systemd integration");
  systemd->require_subcommand(1);
  CLI::App* install =
      systemd->add_subcommand("install", "Write units, a default config and wants-links");
  install->add_option("--prefix", install_options.prefix, "Root to install under")
      ->capture_default_str();
  install->add_option("--bin-dir", install_options.bin_dir, "Where the hsring binaries are")
      ->capture_default_str();
  install
      ->add_option("--config-path", install_options.config_path, "The config file the units read")
      ->capture_default_str();
  install->add_option("--systemd-version", install_options.systemd_version,
                      "Target systemd version (default: this machine's)");
  install->add_flag("--overwrite-config", install_options.overwrite_config,
                    "Replace an existing config");

  builtin::PretrainOptions pretrain_options;
  std::string pretrain_out = pretrain_options.out.string();
  CLI::App* model_cmd = app.add_subcommand("model", "Target models");
  model_cmd->require_subcommand(1);
  CLI::App* pretrain = model_cmd->add_subcommand(
      "pretrain", "Train a small Qwen3-style target on the built-in corpus (HF folder)");
  pretrain->add_option("--out", pretrain_out, "Folder to write (replaces only a previous output)")
      ->capture_default_str();
  pretrain->add_option("--steps", pretrain_options.steps, "Updates (the schedule's length)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  pretrain
      ->add_option("--seconds", pretrain_options.seconds, "Stop training after S seconds; 0: never")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  pretrain->add_option("--seed", pretrain_options.seed, "Initialisation and data order")
      ->capture_default_str();
  pretrain->add_option("--threads", pretrain_options.threads, "Threads; 0: every core")
      ->capture_default_str();
  pretrain->add_option("--layers", pretrain_options.layers, "Decoder layers")
      ->capture_default_str()
      ->check(CLI::Range(1, 6));

  CLI::App* builtin = model_cmd->add_subcommand(
      "builtin", "Print the built-in trained target's folder, training it first if missing");

  const hsring::data::DataCommands data_commands = hsring::data::add_data_commands(app);
  // `data generate` needs the target model, which the data layer does not link.
  const hsring::eval::GenerateCommand generate_command =
      hsring::eval::add_generate_command(*app.get_subcommand("data"));
  CLI::App* data_builtin = app.get_subcommand("data")->add_subcommand(
      "builtin",
      "Print the built-in data's folder (the built-in target's continuations of the built-in "
      "corpus: the default job's data), generating it first if missing");
  const hsring::eval::EvalCommand eval_command = hsring::eval::add_eval_command(app);

  // Every floating-point flag of every command is finite (nan, inf: refused, named).
  refuse_non_finite_numbers(app);

  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  try {
    check_config_file(config_path(args));  // before CLI11 opens it, which a FIFO would hang
    app.parse(int(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    // A value the config file gave: CLI11 names neither the file nor the line.
    if (const std::string clearer = checked_config->explain(e, args); !clearer.empty()) {
      std::fprintf(stderr, "%s\n", clearer.c_str());
      return kRunUsage;
    }
    return app.exit(e) == 0 ? 0 : kRunUsage;
  }

  set_log_prefix("hsring");
  try {
    if (data_commands.selected()) return data_commands.run();
    if (generate_command.selected()) return generate_command.run();
    if (eval_command.selected()) return eval_command.run();
    if (*run) {
      // Once, here: the workers get the folder, never the name (one training at most).
      const std::string model_spec = run_options.model;
      run_options.model = builtin::resolve_model_spec(run_options.model);
      if (create_only) return create_ring_only(run_options);
      if (remove_only) return remove_ring_only(run_options);
      // The built-in target learns from its own continuations unless --data says otherwise;
      // generated once, here, like the target.
      const eval::RunData data = eval::resolve_run_data(run_options.data, model_spec);
      run_options.data = data.dir;
      run_options.data_is_builtin = data.builtin;
      if (run_options.eval_every > 0 && runs_model(run_options)) {
        const eval::HeldOutData held_out = eval::resolve_held_out_data(data);
        run_options.eval_data = held_out.dir;
        run_options.eval_data_held_out = held_out.held_out_only;
      }
      // Neither flag nor config: every GPU of the machine, when it has any, split by --split
      // (checked on every machine).
      const SplitRequest split = parse_split(run_options.split);
      if (run->get_option("--targets")->count() == 0 && run->get_option("--drafters")->count() == 0)
        apply_default_gpu_split(run_options, split);
      // A flag (or config key) left out: torchrun's or Slurm's word, else one machine.
      const auto given = [&](const char* flag, uint32_t value) {
        return run->get_option(flag)->count() > 0 ? std::optional<uint32_t>(value) : std::nullopt;
      };
      const NodeTopology nodes = resolve_node_topology(
          given("--nnodes", run_options.nnodes), given("--node-rank", run_options.node_rank),
          [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
      run_options.nnodes = nodes.nnodes;
      run_options.node_rank = nodes.node_rank;
      // Neither flag nor config: the environment's, checked here once for every worker.
      if (run->get_option("--profile-interval")->count() == 0)
        run_options.profile_interval_s = profile_interval_from_env();
      if (!exec_worker_spec.empty())
        return exec_worker(run_options, exec_worker_spec, program_dir());
      return Supervisor(run_options, program_dir()).run();
    }
    if (*status) return show_status(status_ring, status_options, prometheus, watch_s);
    if (*stop) return stop_ring(stop_name);
    if (*inspect) return inspect_ring(inspect_name);
    if (*remove) return remove_ring(remove_name, remove_force);
    if (*gc) return gc_rings(gc_dry_run);
    if (*config_default) {
      std::cout << default_config(*run);
      return 0;
    }
    if (*pretrain) return pretrain_model(pretrain_options, pretrain_out);
    if (*builtin) {
      std::cout << builtin::resolve_model_spec(builtin::kBuiltinModel) << "\n";
      return 0;
    }
    if (*data_builtin) {
      (void)builtin::resolve_model_spec(builtin::kBuiltinModel);  // saying so when it is trained
      std::cout << eval::resolve_builtin_data() << "\n";
      return 0;
    }
    if (*install) return install_systemd_units(install_options, run_options, default_config(*run));
  } catch (const Error& e) {
    std::cerr << "hsring: error: " << e.what() << "\n";
    return exit_code_of(e.layer());    // the one table (common/error.h)
  } catch (const std::exception& e) {  // not hsring's own: class system
    std::cerr << "hsring: error: " << e.what() << "\n";
    return exit_code_of(ErrorClass::kSystem);
  }
  return 0;
}
