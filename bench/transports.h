// One-way channels of small messages between processes, so that hsring and two
// conventional queues run under exactly the same load: each message is a 64-bit id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bench/hsring_endpoints.h"

namespace hsring::bench {

class Sender {
 public:
  virtual ~Sender() = default;
  // Blocks while the channel is full. Throws on a broken channel.
  virtual void send(uint64_t id) = 0;
};

class Receiver {
 public:
  virtual ~Receiver() = default;
  // Blocks while the channel is empty. Throws on a broken channel.
  virtual uint64_t receive() = 0;
};

// What a channel is sized for.
struct ChannelShape {
  uint32_t producers = 1;
  uint32_t consumers = 1;
  uint32_t capacity = 64;  // messages (hsring: slots) in flight at most
  uint64_t id_limit = 1;   // ids sent are below this (sizes the hsring ledger)
};

// A channel's shared state. The parent makes it before forking and its destructor removes
// it; that destructor never runs in a child, which leaves with _exit. Children open their
// endpoints after the fork, each with its own attachment.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string label() const = 0;
  // REQUIRES: producer < shape.producers; called once per producer, in its process.
  virtual std::unique_ptr<Sender> open_sender(uint32_t producer) = 0;
  // REQUIRES: consumer < shape.consumers; called once per consumer, in its process.
  virtual std::unique_ptr<Receiver> open_receiver(uint32_t consumer) = 0;
};

// hsring: a ring of `capacity` slots of one token, hidden size 1, one layer, one target
// per producer and one drafter per consumer, hs_min_ready 1. The id travels as the bound
// batch id and as token 0, which the receiver checks. Named after `tag`.
std::unique_ptr<Transport> make_hsring_transport(const std::string& tag, const ChannelShape& shape,
                                                 WaitMode mode);
// A bounded FIFO guarded by a PTHREAD_PROCESS_SHARED mutex and two condition variables,
// in a shared anonymous mapping: the textbook cross-process queue.
std::unique_ptr<Transport> make_mutex_transport(const ChannelShape& shape);
// One cache line bounced between exactly one producer and one consumer, both polling: no
// protocol at all, so its round trip is the floor that the machine sets for any channel.
std::unique_ptr<Transport> make_spin_word_transport(const ChannelShape& shape);
// boost::interprocess::message_queue of `capacity` 8-byte messages. Named after `tag`.
std::unique_ptr<Transport> make_message_queue_transport(const std::string& tag,
                                                        const ChannelShape& shape);

}  // namespace hsring::bench
