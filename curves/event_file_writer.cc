#include "curves/event_file_writer.h"

#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include "common/error.h"
#include "curves/tensorboard_event.pb.h"
#include "curves/tfrecord.h"

namespace hsring::curves {

namespace {

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Serialises `event` and appends it as one record.
void write_event(AppendFile& file, const tb::Event& event) {
  std::string bytes;
  if (!event.SerializeToString(&bytes))
    throw Error(Errc::kSystem, "a TensorBoard event could not be serialised");
  std::string record;
  record.reserve(bytes.size() + 16);
  append_tfrecord(record, bytes);
  file.append(record);
}

}  // namespace

EventFileWriter EventFileWriter::create(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(Errc::kCheckpoint, dir,
                "cannot create the TensorBoard folder: " + ec.message() +
                    " (check the run folder's permissions, or give another --run-dir)");
  static std::atomic<uint32_t> files{0};
  const double now = unix_seconds();
  const std::string name = fmt::format("events.out.tfevents.{}.{}.{}.{}", int64_t(now), host_name(),
                                       ::getpid(), files.fetch_add(1, std::memory_order_relaxed));
  EventFileWriter writer(AppendFile((std::filesystem::path(dir) / name).string()));
  tb::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");  // what TensorBoard's own writers write
  write_event(writer.file_, version);
  return writer;
}

void EventFileWriter::write_scalars(int64_t step, double wall_time,
                                    std::span<const Scalar> scalars) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tb::Summary* summary = event.mutable_summary();
  for (const Scalar& s : scalars) {
    tb::Summary::Value* value = summary->add_value();
    value->set_tag(s.tag);
    value->set_simple_value(float(s.value));
  }
  write_event(file_, event);
}

}  // namespace hsring::curves
