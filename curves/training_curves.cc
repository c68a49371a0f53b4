#include "curves/training_curves.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/log.h"
#include "common/text_file.h"

namespace hsring::curves {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

Json to_json(const StepRecord& r) {
  Json j;
  j["step"] = r.step;
  j["wall_time"] = r.wall_time;
  j["loss"] = r.loss;
  j["acceptance_length"] = r.acceptance_length;
  j["agreement"] = r.agreement;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["step_ms"] = r.step_ms;
  j["tokens_per_s"] = r.tokens_per_s;
  if (r.target_busy) j["target_busy"] = *r.target_busy;
  if (r.drafter_busy) j["drafter_busy"] = *r.drafter_busy;
  if (!r.position_acceptance.empty()) j["position_acceptance"] = r.position_acceptance;
  if (r.held_out) {
    j["eval_loss"] = r.held_out->loss;
    j["eval_acceptance_length"] = r.held_out->acceptance_length;
    j["eval_agreement"] = r.held_out->agreement;
  }
  return j;
}

// The TensorBoard scalars of one metrics.jsonl record, so that a record appended now and
// one replayed from the file after a restart give the same events. TensorBoard groups
// charts by the tag's part before '/': train/, pipeline/ (busy fractions), eval/ (the
// held-out evaluation) and position_acceptance/ (one chart per block position, 01 .. B-1).
std::vector<Scalar> scalars_of(const Json& record) {
  std::vector<Scalar> scalars;
  for (const auto& [key, value] : record.items()) {
    if (key == "step" || key == "wall_time") continue;
    if (value.is_array()) {
      for (size_t k = 0; k < value.size(); ++k)
        if (value[k].is_number())
          scalars.push_back({fmt::format("{}/{:02}", key, k + 1), value[k].get<double>()});
    } else if (value.is_number()) {
      const bool busy = key.size() > 5 && key.ends_with("_busy");
      if (key.starts_with("eval_"))
        scalars.push_back({"eval/" + key.substr(5), value.get<double>()});
      else
        scalars.push_back({(busy ? "pipeline/" : "train/") + key, value.get<double>()});
    }
  }
  return scalars;
}

CurvePoint point_of(const Json& record) {
  const auto number = [&](const char* key) -> std::optional<double> {
    const auto it = record.find(key);
    if (it == record.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  CurvePoint p;
  p.step = record["step"].get<uint64_t>();
  p.loss = number("loss").value_or(std::nan(""));
  p.acceptance_length = number("acceptance_length").value_or(std::nan(""));
  p.held_out_loss = number("eval_loss");
  p.held_out_acceptance_length = number("eval_acceptance_length");
  return p;
}

// Removes the folder's event files (only those: anything else a user put there stays).
void remove_event_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents."))
      fs::remove(entry.path());
  }
}

}  // namespace

std::unique_ptr<TrainingCurves> TrainingCurves::open(const std::string& run_dir,
                                                     uint64_t start_step) {
  std::unique_ptr<TrainingCurves> curves(new TrainingCurves(run_dir));
  try {
    fs::create_directories(run_dir);
    const std::string path = (fs::path(run_dir) / kMetricsFile).string();
    // The resume rule (training_curves.h): keep the whole records of steps up to start_step.
    std::vector<Json> kept;
    std::string kept_text;
    bool rewrite = false;
    if (const std::optional<std::string> text = read_file_if_exists(path)) {
      std::string_view rest = *text;
      while (!rest.empty()) {
        const size_t end = rest.find('\n');
        if (end == std::string_view::npos) {  // cut by a kill mid-write
          rewrite = true;
          break;
        }
        const std::string_view line = rest.substr(0, end);
        rest.remove_prefix(end + 1);
        Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_unsigned()) {
          rewrite = true;
          continue;
        }
        if (j["step"].get<uint64_t>() > start_step) {
          ++curves->dropped_;
          rewrite = true;
          continue;
        }
        kept_text.append(line).push_back('\n');
        kept.push_back(std::move(j));
      }
    }
    if (rewrite) write_file_atomically(path, kept_text);
    curves->metrics_ = std::make_unique<AppendFile>(path);
    // The event files are metrics.jsonl's image: rewritten from it, they hold no step
    // twice whatever reads them (TensorBoard's purge of out-of-order steps is not relied on).
    const fs::path events_dir = fs::path(run_dir) / kTensorboardFolder;
    remove_event_files(events_dir);
    curves->events_ = std::make_unique<EventFileWriter>(EventFileWriter::create(events_dir));
    for (const Json& j : kept) {
      curves->events_->write_scalars(int64_t(j["step"].get<uint64_t>()), j.value("wall_time", 0.0),
                                     scalars_of(j));
      curves->points_.push_back(point_of(j));
    }
    curves->last_step_ = start_step;
  } catch (const std::exception& e) {
    curves->fail(e.what());
  }
  return curves;
}

void TrainingCurves::record(const StepRecord& record) noexcept {
  if (!metrics_) return;
  try {
    const Json j = to_json(record);
    metrics_->append(j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
    events_->write_scalars(int64_t(record.step), record.wall_time, scalars_of(j));
    points_.push_back(point_of(j));
    last_step_ = record.step;
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void TrainingCurves::write_plot() noexcept {
  if (plot_failed_) return;
  const std::string path = (fs::path(run_dir_) / kPlotFile).string();
  try {
    write_curves_png(path, points_);
  } catch (const std::exception& e) {
    plot_failed_ = true;
    try {
      log_line("warning: no " + path + ": " + e.what() + "; training goes on without it");
    } catch (...) {
    }
  }
}

void TrainingCurves::fail(const std::string& what) noexcept {
  metrics_.reset();
  events_.reset();
  try {
    log_line(
        fmt::format("warning: the training curves in {} stop after step {}: {}; training "
                    "goes on without them (free space or fix the folder, then resume the "
                    "run to write them again)",
                    run_dir_, last_step_, what));
  } catch (...) {
  }
}

}  // namespace hsring::curves
