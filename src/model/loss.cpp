#include "model/loss.hpp"

#include <bit>
#include <vector>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"

namespace lockstep {

float mean_cross_entropy(const Model::Impl& m, std::span<const float> logits,
                         std::span<const int32_t> targets, const CallOptions& call) {
  const int32_t V = m.config.vocab_size;
  const int64_t R = static_cast<int64_t>(targets.size());
  std::vector<float> per_row(static_cast<size_t>(R), 0.0f);
  const Device device = call.device.value_or(m.device);
  if (device == Device::reference) {
    for (int64_t r = 0; r < R; ++r)
      if (targets[static_cast<size_t>(r)] >= 0)
        per_row[static_cast<size_t>(r)] = ref::cross_entropy(logits.data() + r * V, V, targets[static_cast<size_t>(r)]);
  } else {
    const simd::Kernels& k = simd::kernels_for(m.packed.get());
    ThreadPool& pool = m.thread_pool();
    pool.run(m.threads_for(call), [&](int w, int n) {
      const auto [begin, end] = static_range(R, w, n);
      for (int64_t r = begin; r < end; ++r)
        if (targets[static_cast<size_t>(r)] >= 0)
          per_row[static_cast<size_t>(r)] = k.cross_entropy(logits.data() + r * V, V, targets[static_cast<size_t>(r)]);
    });
  }
  float total = 0.0f;
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (targets[static_cast<size_t>(r)] < 0) continue;
    total = total + per_row[static_cast<size_t>(r)];
    ++count;
  }
  if (count == 0) return std::bit_cast<float>(0x7fc00000u);
  return total / static_cast<float>(count);
}

}  // namespace lockstep
