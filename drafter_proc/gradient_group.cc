#include "drafter_proc/gradient_group.h"

#include "shm/ring.h"

namespace hsring {

namespace {

class SharedMemoryGroup final : public GradientGroup {
 public:
  SharedMemoryGroup(std::unique_ptr<GradExchange> exchange, std::string name, const GroupJoin& join,
                    train::DrafterTrainer& trainer)
      : exchange_(std::move(exchange)),
        name_(std::move(name)),
        peers_(join.peers),
        keep_waiting_(join.keep_waiting),
        trainer_(trainer) {}

  uint32_t members() const override { return exchange_->members(); }

  ExchangeResult all_reduce(uint64_t step, uint64_t counted) override {
    const ExchangeResult result =
        exchange_->all_reduce(step, trainer_.host_gradients(), counted, peers_, keep_waiting_);
    if (result == ExchangeResult::kReduced) trainer_.host_gradients_changed();
    return result;
  }

  const std::string& restart_reason() const override { return exchange_->restart_reason(); }
  std::string describe() const override { return "averaging gradients through /dev/shm/" + name_; }

 private:
  std::unique_ptr<GradExchange> exchange_;
  std::string name_;
  PeerWatch peers_;
  std::function<bool()> keep_waiting_;
  train::DrafterTrainer& trainer_;
};

}  // namespace

std::unique_ptr<GradientGroup> open_shared_memory_group(const GroupJoin& join,
                                                        train::DrafterTrainer& trainer) {
  const std::string name = GradExchange::name_for(join.ring.name());
  auto exchange = GradExchange::open(name, join.members, join.rank, trainer.layout().total,
                                     join.ring.header().created_unix_ns);
  exchange->join(join.epoch, join.first_step);
  return std::make_unique<SharedMemoryGroup>(std::move(exchange), name, join, trainer);
}

}  // namespace hsring
