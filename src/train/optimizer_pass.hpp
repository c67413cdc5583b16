// The optimizer's pass over every parameter, shared by the trainer and its benchmark: the
// clipping norm, then AdamW and the EMA. With kernels null it runs ref's loops (the reference
// device); else that target's SIMD twins, which give the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/ref/optimizer.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep::train {

// ref::block_sum_of_squares of g [n]; with kernels, its blocks summed side by side on `workers`
// of `pool`, then added in increasing block order.
double gradient_sum_of_squares(const simd::Kernels* kernels, ThreadPool& pool, int workers, const float* g,
                               int64_t n);

// Blocks [b0, b1) of ref::kNormBlock elements of g [n]: each block's sum of squares into
// sums[b], side by side on `workers` of `pool` (the blocks gradient_sum_of_squares sums).
void gradient_block_sums(const simd::Kernels& kernels, ThreadPool& pool, int workers, const float* g, int64_t n,
                         int64_t b0, int64_t b1, double* sums);
// The blocks' sums added in increasing block order from +0, as gradient_sum_of_squares does.
double sum_in_order(const std::vector<double>& sums);

// One step's buffers: the gradient and the state in, the next state out (ema and ema_out null
// without an EMA).
struct OptimizerBuffers {
  const float *grad, *p, *m, *v, *ema;
  float *p_out, *m_out, *v_out, *ema_out;
};

// AdamW, then the EMA of the new weights (decay ema_decay), over elements [begin, end), in pieces
// so that the EMA reads the new weights while they are in cache.
void update_range(const simd::Kernels* kernels, const ref::AdamWScalars& s, float grad_scale, double ema_decay,
                  const OptimizerBuffers& b, int64_t begin, int64_t end);

}  // namespace lockstep::train
