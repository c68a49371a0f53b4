#include "drafter_proc/gradient_group.h"

namespace hsring {

namespace {

class SharedMemoryGroup final : public GradientGroup {
 public:
  SharedMemoryGroup(std::unique_ptr<GradExchange> exchange, std::string name,
                    train::DrafterTrainer& trainer)
      : exchange_(std::move(exchange)), name_(std::move(name)), trainer_(trainer) {}

  uint32_t members() const override { return exchange_->members(); }

  ExchangeResult all_reduce(uint64_t step, uint64_t counted, const PeerWatch& peers,
                            const std::function<bool()>& keep_waiting) override {
    const ExchangeResult result =
        exchange_->all_reduce(step, trainer_.host_gradients(), counted, peers, keep_waiting);
    if (result == ExchangeResult::kReduced) trainer_.host_gradients_changed();
    return result;
  }

  const std::string& restart_reason() const override { return exchange_->restart_reason(); }
  std::string describe() const override { return "averaging gradients through /dev/shm/" + name_; }

 private:
  std::unique_ptr<GradExchange> exchange_;
  std::string name_;
  train::DrafterTrainer& trainer_;
};

}  // namespace

std::unique_ptr<GradientGroup> open_shared_memory_group(const std::string& ring_name,
                                                        uint64_t ring_stamp, uint32_t members,
                                                        uint32_t rank,
                                                        train::DrafterTrainer& trainer,
                                                        uint32_t epoch, uint64_t first_step) {
  const std::string name = GradExchange::name_for(ring_name);
  auto exchange = GradExchange::open(name, members, rank, trainer.layout().total, ring_stamp);
  exchange->join(epoch, first_step);
  return std::make_unique<SharedMemoryGroup>(std::move(exchange), name, trainer);
}

}  // namespace hsring
