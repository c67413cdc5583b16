#include "train/optimizer_pass.hpp"

#include <algorithm>
#include <vector>

namespace lockstep::train {

double gradient_sum_of_squares(const simd::Kernels* kernels, ThreadPool& pool, int workers, const float* g,
                               int64_t n) {
  if (!kernels) return ref::block_sum_of_squares(g, n);
  const int64_t blocks = (n + ref::kNormBlock - 1) / ref::kNormBlock;
  std::vector<double> sums(static_cast<size_t>(blocks));
  pool.run(workers, [&](int w, int nw) {
    const auto [b, e] = static_range(blocks, w, nw);
    kernels->block_sums_of_squares(g, n, b, e, sums.data() + b);
  });
  double total = 0.0;
  for (const double block : sums) total = total + block;
  return total;
}

void gradient_block_sums(const simd::Kernels& kernels, ThreadPool& pool, int workers, const float* g, int64_t n,
                         int64_t b0, int64_t b1, double* sums) {
  pool.run(workers, [&](int w, int nw) {
    const auto [b, e] = static_range(b1 - b0, w, nw);
    kernels.block_sums_of_squares(g, n, b0 + b, b0 + e, sums + b0 + b);
  });
}

double sum_in_order(const std::vector<double>& sums) {
  double total = 0.0;
  for (const double block : sums) total = total + block;
  return total;
}

void update_range(const simd::Kernels* kernels, const ref::AdamWScalars& s, float grad_scale, double ema_decay,
                  const OptimizerBuffers& b, int64_t begin, int64_t end) {
  const auto adamw = kernels ? kernels->adamw_update : &ref::adamw_update;
  const auto ema = kernels ? kernels->ema_update : &ref::ema_update;
  constexpr int64_t kPiece = 4096;
  for (int64_t i = begin; i < end; i += kPiece) {
    const int64_t m = std::min(kPiece, end - i);
    adamw(s, grad_scale, b.grad + i, b.p + i, b.m + i, b.v + i, b.p_out + i, b.m_out + i, b.v_out + i, m);
    if (b.ema) ema(ema_decay, b.ema + i, b.p_out + i, b.ema_out + i, m);
  }
}

}  // namespace lockstep::train
