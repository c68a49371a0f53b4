// TensorBoard event files: scalars written as TensorBoard's Event protos (protobuf, from
// tensorboard_event.proto) framed as TFRecords (tfrecord.h), into a file named as
// TensorBoard's own writers name theirs, so `tensorboard --logdir` finds and reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "curves/append_file.h"

namespace hsring::curves {

struct Scalar {
  std::string tag;   // "train/loss": TensorBoard groups the charts by the part before '/'
  double value = 0;  // written as a float, TensorBoard's simple_value
};

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new file in it,
  // events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, starting with the file-version
  // record. Each call makes a new file (n counts them in this process): TensorBoard reads
  // every file of a folder, in name order. Throws Error(kCheckpoint): a full disk or another
  // failure, named.
  static EventFileWriter create(const std::string& dir);

  // Appends one event holding `scalars` at `step`; `wall_time`: seconds since the Unix
  // epoch. Throws Error(kCheckpoint): a full disk or another failure, named.
  void write_scalars(int64_t step, double wall_time, std::span<const Scalar> scalars);

  const std::string& path() const { return file_.path(); }

 private:
  explicit EventFileWriter(AppendFile file) : file_(std::move(file)) {}
  AppendFile file_;
};

}  // namespace hsring::curves
