// Evaluation: the mean next-token loss over many windows, summed in a fixed order.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/model.hpp"

namespace lockstep::train {

// The mean loss over `rows` windows ids [rows, cols] (each cols - 1 predictions): the f32
// per-position losses (Model::token_losses) summed from +0 in increasing row * (cols - 1) +
// position, divided by their count converted to f32, the batch mean's rule
// (docs/ARITHMETIC.md) over more rows than a batch. Rows go through the model in groups; the
// grouping does not change a bit.
float mean_window_loss(const Model& model, const std::vector<int32_t>& ids, int64_t rows, int64_t cols,
                       const CallOptions& call);

}  // namespace lockstep::train
