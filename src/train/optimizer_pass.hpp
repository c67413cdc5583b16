// The optimizer's pass over every parameter, shared by the trainer and its benchmark: the
// clipping norm, then AdamW and the EMA. With kernels null it runs ref's loops (the reference
// device); else that target's SIMD twins, which give the same bits.
#pragma once

#include <cstdint>

#include "core/thread_pool.hpp"
#include "kernels/ref/optimizer.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep::train {

// ref::block_sum_of_squares of g [n]; with kernels, its blocks summed side by side on `workers`
// of `pool`, then added in increasing block order.
double gradient_sum_of_squares(const simd::Kernels* kernels, ThreadPool& pool, int workers, const float* g,
                               int64_t n);

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
