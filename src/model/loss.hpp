// The mean next-token loss over a batch of logits (docs/ARITHMETIC.md, "Loss").
#pragma once

#include <span>

#include "model/model_impl.hpp"

namespace lockstep {

// logits [R, vocab], targets [R] (-100 ignored). Each position's loss by cross_entropy, then
// total = total + loss_r in increasing r from +0, and total / count (count as f32). No
// non-ignored target: NaN.
float mean_cross_entropy(const Model::Impl& model, std::span<const float> logits,
                         std::span<const int32_t> targets, const CallOptions& call);

}  // namespace lockstep
