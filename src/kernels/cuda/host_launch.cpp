#include "kernels/cuda/host_launch.hpp"

namespace lockstep::cuda {

void host_forward(const ModelView& model, std::span<const RowSpec> rows) {
  const ForwardShape& s = model.shape;
  const WeightArena w = arrange_weights(model);
  const BatchLayout batch = arrange_batch(rows);
  const int64_t R = batch.rows(), O = batch.n_outputs();
  const int64_t attention_rows = attention_rows_for(s, R, batch.max_positions);
  const ForwardSizes n = forward_sizes(s, R, O, attention_rows, batch.max_positions, batch.any_logits);
  std::vector<float> x(n.x), xn(n.x), qkv(n.qkv), att(n.att), gate_up(n.gate_up), h(n.h), scores(n.scores),
      hidden(n.hidden), logits(n.logits);
  const ForwardBuffers b{batch.ids.data(), batch.pos.data(), batch.outputs.data(), x.data(), xn.data(), qkv.data(),
                         att.data(), gate_up.data(), h.data(), scores.data(), hidden.data(),
                         batch.any_logits ? logits.data() : nullptr, R, O, attention_rows, batch.max_positions};
  HostLaunch launch;
  run_forward(launch, s, w, w.values.data(), b);
  scatter_outputs(rows, s, logits.data(), hidden.data());
}

}  // namespace lockstep::cuda
