#include "bench/transports.h"

#include <pthread.h>

#include <atomic>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <new>
#include <stdexcept>
#include <system_error>

#include "bench/bench_process.h"
#include "common/error.h"

namespace hsring::bench {

namespace {

// --- hsring ----------------------------------------------------------------------------

class HsringSender : public Sender {
 public:
  HsringSender(const std::string& ring, uint32_t producer, WaitMode mode)
      : producer_(ring, producer, mode) {}

  void send(uint64_t id) override {
    SlotClaim claim = producer_.begin(id);
    producer_.ring().tokens(claim.index)[0] = int32_t(id);  // the payload: one token
    producer_.publish(claim, id);
  }

 private:
  HsringProducer producer_;
};

class HsringReceiver : public Receiver {
 public:
  HsringReceiver(const std::string& ring, uint32_t consumer, WaitMode mode)
      : consumer_(ring, consumer, mode) {}

  uint64_t receive() override {
    SlotClaim claim = consumer_.acquire();
    const uint64_t id = consumer_.batch_id(claim);
    // Read before the release: after it, a producer may overwrite the slot.
    const int32_t token = consumer_.ring().tokens(claim.index)[0];
    consumer_.release(claim);
    if (token != int32_t(id)) {
      throw std::runtime_error("torn message: batch " + std::to_string(id) + " carried token " +
                               std::to_string(token));
    }
    return id;
  }

 private:
  HsringConsumer consumer_;
};

class HsringTransport : public Transport {
 public:
  HsringTransport(const std::string& tag, const ChannelShape& shape, WaitMode mode)
      : name_(register_shm_name(tag)), mode_(mode) {
    RingShape ring_shape;
    ring_shape.slot_count = shape.capacity;
    ring_shape.max_tokens = 1;
    ring_shape.hidden_size = 1;
    ring_shape.num_layers = 1;
    ring_shape.num_targets = shape.producers;
    ring_shape.num_drafters = shape.consumers;
    ring_shape.hs_min_ready = 1;
    ring_shape.ledger_capacity = shape.id_limit;  // every message is accounted, as in a run
    Ring::create(name_, ring_shape);              // the children attach; we need no mapping
  }
  ~HsringTransport() override { Ring::remove(name_); }

  std::string label() const override { return std::string("hsring (") + to_string(mode_) + ")"; }
  std::unique_ptr<Sender> open_sender(uint32_t producer) override {
    return std::make_unique<HsringSender>(name_, producer, mode_);
  }
  std::unique_ptr<Receiver> open_receiver(uint32_t consumer) override {
    return std::make_unique<HsringReceiver>(name_, consumer, mode_);
  }

 private:
  std::string name_;
  WaitMode mode_;
};

// --- pthread mutex + condition variables --------------------------------------------------

constexpr uint32_t kMaxQueueCapacity = 4096;

struct MutexQueue {
  pthread_mutex_t mutex;
  pthread_cond_t not_empty;
  pthread_cond_t not_full;
  uint32_t capacity;
  uint32_t head;                      // GUARDED_BY(mutex)
  uint32_t count;                     // GUARDED_BY(mutex)
  uint64_t items[kMaxQueueCapacity];  // GUARDED_BY(mutex)
};

void check_pthread(int err, const char* what) {
  if (err != 0) throw std::system_error(err, std::generic_category(), what);
}

class MutexSender : public Sender {
 public:
  explicit MutexSender(MutexQueue& queue) : q_(queue) {}

  void send(uint64_t id) override {
    pthread_mutex_lock(&q_.mutex);
    while (q_.count == q_.capacity) pthread_cond_wait(&q_.not_full, &q_.mutex);
    q_.items[(q_.head + q_.count) % q_.capacity] = id;
    ++q_.count;
    pthread_mutex_unlock(&q_.mutex);
    // Signalling after the unlock spares the woken consumer a bounce off the held mutex.
    pthread_cond_signal(&q_.not_empty);
  }

 private:
  MutexQueue& q_;
};

class MutexReceiver : public Receiver {
 public:
  explicit MutexReceiver(MutexQueue& queue) : q_(queue) {}

  uint64_t receive() override {
    pthread_mutex_lock(&q_.mutex);
    while (q_.count == 0) pthread_cond_wait(&q_.not_empty, &q_.mutex);
    const uint64_t id = q_.items[q_.head];
    q_.head = (q_.head + 1) % q_.capacity;
    --q_.count;
    pthread_mutex_unlock(&q_.mutex);
    pthread_cond_signal(&q_.not_full);
    return id;
  }

 private:
  MutexQueue& q_;
};

class MutexTransport : public Transport {
 public:
  explicit MutexTransport(const ChannelShape& shape) : mapping_(sizeof(MutexQueue)) {
    if (shape.capacity < 1 || shape.capacity > kMaxQueueCapacity) {
      throw Error(Errc::kUsage, "mutex queue capacity out of range");
    }
    queue_ = new (mapping_.data()) MutexQueue();
    queue_->capacity = shape.capacity;
    init_shared_objects();
  }
  ~MutexTransport() override {
    pthread_cond_destroy(&queue_->not_full);
    pthread_cond_destroy(&queue_->not_empty);
    pthread_mutex_destroy(&queue_->mutex);
  }

  std::string label() const override { return "pthread mutex+cond"; }
  // The queue lives in a mapping inherited through fork: nothing to open.
  std::unique_ptr<Sender> open_sender(uint32_t) override {
    return std::make_unique<MutexSender>(*queue_);
  }
  std::unique_ptr<Receiver> open_receiver(uint32_t) override {
    return std::make_unique<MutexReceiver>(*queue_);
  }

 private:
  void init_shared_objects() {
    pthread_mutexattr_t mutex_attr;
    pthread_mutexattr_init(&mutex_attr);
    check_pthread(pthread_mutexattr_setpshared(&mutex_attr, PTHREAD_PROCESS_SHARED),
                  "pthread_mutexattr_setpshared");
    check_pthread(pthread_mutex_init(&queue_->mutex, &mutex_attr), "pthread_mutex_init");
    pthread_mutexattr_destroy(&mutex_attr);
    pthread_condattr_t cond_attr;
    pthread_condattr_init(&cond_attr);
    check_pthread(pthread_condattr_setpshared(&cond_attr, PTHREAD_PROCESS_SHARED),
                  "pthread_condattr_setpshared");
    check_pthread(pthread_cond_init(&queue_->not_empty, &cond_attr), "pthread_cond_init");
    check_pthread(pthread_cond_init(&queue_->not_full, &cond_attr), "pthread_cond_init");
    pthread_condattr_destroy(&cond_attr);
  }

  SharedMapping mapping_;
  MutexQueue* queue_;
};

// --- one polled word: the floor ---------------------------------------------------------------

// 0 while empty, else the id + 1. The release store of a message pairs with the acquire
// load that finds it; the receiver's release store of 0 hands the word back.
struct alignas(64) Mailbox {
  std::atomic<uint64_t> word;
};

class SpinWordSender : public Sender {
 public:
  explicit SpinWordSender(Mailbox& mailbox) : box_(mailbox) {}
  void send(uint64_t id) override {
    PollBackoff backoff;
    while (box_.word.load(std::memory_order_acquire) != 0) backoff.pause();
    box_.word.store(id + 1, std::memory_order_release);
  }

 private:
  Mailbox& box_;
};

class SpinWordReceiver : public Receiver {
 public:
  explicit SpinWordReceiver(Mailbox& mailbox) : box_(mailbox) {}
  uint64_t receive() override {
    uint64_t word = 0;
    PollBackoff backoff;
    while ((word = box_.word.load(std::memory_order_acquire)) == 0) backoff.pause();
    box_.word.store(0, std::memory_order_release);
    return word - 1;
  }

 private:
  Mailbox& box_;
};

class SpinWordTransport : public Transport {
 public:
  explicit SpinWordTransport(const ChannelShape& shape) : mapping_(sizeof(Mailbox)) {
    if (shape.producers != 1 || shape.consumers != 1) {
      throw Error(Errc::kUsage, "the polled word has one producer and one consumer");
    }
    mailbox_ = new (mapping_.data()) Mailbox();
  }
  std::string label() const override { return "one polled word"; }
  std::unique_ptr<Sender> open_sender(uint32_t) override {
    return std::make_unique<SpinWordSender>(*mailbox_);
  }
  std::unique_ptr<Receiver> open_receiver(uint32_t) override {
    return std::make_unique<SpinWordReceiver>(*mailbox_);
  }

 private:
  SharedMapping mapping_;
  Mailbox* mailbox_;
};

// --- boost::interprocess::message_queue ------------------------------------------------------

namespace bip = boost::interprocess;

class MessageQueueSender : public Sender {
 public:
  explicit MessageQueueSender(const std::string& name) : queue_(bip::open_only, name.c_str()) {}
  void send(uint64_t id) override { queue_.send(&id, sizeof id, 0); }

 private:
  bip::message_queue queue_;
};

class MessageQueueReceiver : public Receiver {
 public:
  explicit MessageQueueReceiver(const std::string& name) : queue_(bip::open_only, name.c_str()) {}
  uint64_t receive() override {
    uint64_t id = 0;
    bip::message_queue::size_type size = 0;
    unsigned int priority = 0;
    queue_.receive(&id, sizeof id, size, priority);
    if (size != sizeof id) throw std::runtime_error("message_queue: short message");
    return id;
  }

 private:
  bip::message_queue queue_;
};

class MessageQueueTransport : public Transport {
 public:
  MessageQueueTransport(const std::string& tag, const ChannelShape& shape)
      : name_(register_shm_name(tag)) {
    bip::permissions owner_only(0600);
    // The queue outlives this handle; children open it by name.
    bip::message_queue(bip::create_only, name_.c_str(), shape.capacity, sizeof(uint64_t),
                       owner_only);
  }
  ~MessageQueueTransport() override { bip::message_queue::remove(name_.c_str()); }

  std::string label() const override { return "boost message_queue"; }
  std::unique_ptr<Sender> open_sender(uint32_t) override {
    return std::make_unique<MessageQueueSender>(name_);
  }
  std::unique_ptr<Receiver> open_receiver(uint32_t) override {
    return std::make_unique<MessageQueueReceiver>(name_);
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<Transport> make_hsring_transport(const std::string& tag, const ChannelShape& shape,
                                                 WaitMode mode) {
  return std::make_unique<HsringTransport>(tag, shape, mode);
}

std::unique_ptr<Transport> make_mutex_transport(const ChannelShape& shape) {
  return std::make_unique<MutexTransport>(shape);
}

std::unique_ptr<Transport> make_spin_word_transport(const ChannelShape& shape) {
  return std::make_unique<SpinWordTransport>(shape);
}

std::unique_ptr<Transport> make_message_queue_transport(const std::string& tag,
                                                        const ChannelShape& shape) {
  return std::make_unique<MessageQueueTransport>(tag, shape);
}

}  // namespace hsring::bench
