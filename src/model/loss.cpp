#include "model/loss.hpp"

#include <bit>

#include "kernels/ref/ops.hpp"
#include "model/packed_weights.hpp"

namespace lockstep {

std::vector<float> cross_entropy_rows(const Model::Impl& m, std::span<const float> logits,
                                      std::span<const int32_t> targets, const CallOptions& call) {
  const int32_t V = m.config.vocab_size;
  const int64_t R = static_cast<int64_t>(targets.size());
  std::vector<float> out(static_cast<size_t>(R), std::bit_cast<float>(0x7fc00000u));
  const Device device = call.device.value_or(m.device);
  if (device == Device::reference) {
    for (int64_t r = 0; r < R; ++r)
      if (targets[static_cast<size_t>(r)] >= 0)
        out[static_cast<size_t>(r)] = ref::cross_entropy(logits.data() + r * V, V, targets[static_cast<size_t>(r)]);
    return out;
  }
  const simd::Kernels& k = kernels_for(m.packed.get());
  m.thread_pool().run(m.threads_for(call), [&](int w, int n) {
    const auto [begin, end] = static_range(R, w, n);
    for (int64_t r = begin; r < end; ++r)
      if (targets[static_cast<size_t>(r)] >= 0)
        out[static_cast<size_t>(r)] = k.cross_entropy(logits.data() + r * V, V, targets[static_cast<size_t>(r)]);
  });
  return out;
}

float mean_loss(std::span<const float> losses, std::span<const int32_t> targets) {
  float total = 0.0f;
  int64_t count = 0;
  for (size_t r = 0; r < losses.size(); ++r) {
    if (targets[r] < 0) continue;
    total = total + losses[r];
    ++count;
  }
  if (count == 0) return std::bit_cast<float>(0x7fc00000u);
  return total / static_cast<float>(count);
}

}  // namespace lockstep
