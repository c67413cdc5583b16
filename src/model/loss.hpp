// Next-token losses over rows of logits (docs/ARITHMETIC.md, "cross-entropy", "The mean loss").
#pragma once

#include <span>
#include <vector>

#include "model/model_impl.hpp"

namespace lockstep {

// logits [R, vocab], targets [R]: each row's cross-entropy, NaN where the target is -100.
// Rows are independent and split across the pool's workers on the cpu device.
std::vector<float> cross_entropy_rows(const Model::Impl& model, std::span<const float> logits,
                                      std::span<const int32_t> targets, const CallOptions& call);

// total = total + loss_r over the counted rows in increasing r, from +0; then total / count.
// No counted row: NaN (0x7fc00000).
float mean_loss(std::span<const float> losses, std::span<const int32_t> targets);

}  // namespace lockstep
