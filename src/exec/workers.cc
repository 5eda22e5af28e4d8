#include "exec/workers.h"

namespace chorus {

ChannelWorkers::~ChannelWorkers() {
  ++generation_;
  for (auto& slot : slots_) {
    slot->stop = true;
    slot->go.store(generation_, std::memory_order_release);
    wakeSleepers(slot->go, slot->goSleepers);
  }
  for (auto& slot : slots_) slot->thread.join();
}

void ChannelWorkers::loop(Slot* slot, int index) {
  uint64_t seen = 0;
  for (;;) {
    Waiter waiter(0, nullptr, spinCount_);
    uint64_t now;
    while ((now = slot->go.load(std::memory_order_acquire)) == seen)
      waiter.pause(slot->go, seen, slot->goSleepers);
    seen = now;
    if (slot->stop) return;
    (*slot->task)(index);
    slot->done.store(now, std::memory_order_release);
    wakeSleepers(slot->done, slot->doneSleepers);
  }
}

void ChannelWorkers::run(int n, const std::function<void(int)>& fn) {
  if (n <= 1) {
    if (n == 1) fn(0);
    return;
  }
  while (static_cast<int>(slots_.size()) < n - 1) {
    slots_.emplace_back(new Slot());
    Slot* slot = slots_.back().get();
    int index = static_cast<int>(slots_.size());
    slot->thread = std::thread([this, slot, index] { loop(slot, index); });
  }
  const uint64_t gen = ++generation_;
  for (int i = 0; i < n - 1; ++i) {
    Slot& slot = *slots_[i];
    slot.task = &fn;
    slot.go.store(gen, std::memory_order_release);
    wakeSleepers(slot.go, slot.goSleepers);
  }
  fn(0);
  for (int i = 0; i < n - 1; ++i) {
    Slot& slot = *slots_[i];
    Waiter waiter(0, nullptr, spinCount_);
    uint64_t d;
    while ((d = slot.done.load(std::memory_order_acquire)) != gen)
      waiter.pause(slot.done, d, slot.doneSleepers);
  }
}

}  // namespace chorus
