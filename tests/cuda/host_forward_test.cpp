// The CUDA forward pass run on the host (kernels/cuda/forward_plan.hpp through HostLaunch: the
// same launches, buffers and kernel bodies as on the GPU) against the reference forward pass, by
// memcmp of logits and hidden states: the shapes of the fast path's tests (support/model_shapes),
// both precisions, batches of ragged rows with outputs at every position, at the last, and from
// the middle. Runs on every machine, GPU or not (docs/CUDA.md).
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/cuda/host_launch.hpp"
#include "model/model_impl.hpp"
#include "support/model_shapes.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

// Rows of a batch: row b holds lengths[b] ids, and its outputs start at starts[b].
struct Batch {
  std::vector<int32_t> lengths, starts;
};

void check_shape(const test::Shape& shape, Precision precision) {
  const ModelConfig& c = shape.config;
  ModelOptions options;
  options.precision = precision;
  const auto model = Model::from_parameters(c, test::parameters_for(c, 17), options);
  const int32_t T = c.length;
  const std::vector<Batch> batches = {
      {{T}, {0}},                               // one full row
      {{1}, {0}},                               // one position
      {{T, 1, T / 2 + 1, 3}, {0, 0, T / 2, 2}}, // ragged, outputs at the last position of some
      {{5, T, 2, T - 1, 7, 1, 4, T}, {1, T - 1, 0, 3, 6, 0, 0, 0}},  // eight rows
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& batch = batches[i];
    const auto ids = test::random_ids(static_cast<int64_t>(batch.lengths.size()) * T, c.vocab_size, 7 + i);
    std::vector<RowRequest> want_rows;
    std::vector<cuda::RowSpec> got_rows;
    std::vector<std::vector<float>> want_logits, want_hidden, got_logits, got_hidden;
    for (size_t b = 0; b < batch.lengths.size(); ++b) {
      const int32_t n = batch.lengths[b], begin = batch.starts[b];
      const size_t outputs = static_cast<size_t>(n - begin);
      want_logits.emplace_back(outputs * c.vocab_size);
      want_hidden.emplace_back(outputs * c.d_model);
      got_logits.emplace_back(outputs * c.vocab_size, 1.0f);
      got_hidden.emplace_back(outputs * c.d_model, 1.0f);
    }
    for (size_t b = 0; b < batch.lengths.size(); ++b) {
      const int32_t* row_ids = ids.data() + b * T;
      const int32_t n = batch.lengths[b], begin = batch.starts[b];
      want_rows.push_back({{row_ids, static_cast<size_t>(n)}, begin, n, want_logits[b].data(), want_hidden[b].data()});
      got_rows.push_back({row_ids, begin, n, got_logits[b].data(), got_hidden[b].data()});
    }
    model->forward(want_rows, {Device::reference, std::nullopt});
    cuda::host_forward(cuda_view(model->impl()), got_rows);
    for (size_t b = 0; b < batch.lengths.size(); ++b) {
      const std::string what = std::string(shape.name) + " " + precision_name(precision) + " batch " +
                               std::to_string(i) + " row " + std::to_string(b);
      ASSERT_TRUE(test::same_bits(got_logits[b], want_logits[b])) << what << " logits";
      ASSERT_TRUE(test::same_bits(got_hidden[b], want_hidden[b])) << what << " hidden";
    }
  }
}

TEST(CudaHostForward, LogitsAndHiddenEqualTheReference) {
  for (const test::Shape& shape : test::shapes()) {
    for (const Precision precision : {Precision::f32, Precision::bf16}) {
      check_shape(shape, precision);
      if (HasFatalFailure()) return;
      std::printf("CUDA kernels on the host equal the reference: %s %s\n", shape.name, precision_name(precision));
    }
  }
}

// Hidden states alone (no head) and logits alone: the plan skips what is not asked for.
TEST(CudaHostForward, OnlyWhatIsAskedForIsWritten) {
  const ModelConfig c = test::tiny_gqa_config(12);
  const auto model = Model::from_parameters(c, test::parameters_for(c, 3));
  const auto ids = test::random_ids(12, c.vocab_size, 4);
  std::vector<float> want(static_cast<size_t>(12 * c.d_model)), got(want.size(), 2.0f);
  const RowRequest row{{ids.data(), 12}, 0, 12, nullptr, want.data()};
  model->forward({&row, 1}, {Device::reference, std::nullopt});
  const cuda::RowSpec spec{ids.data(), 0, 12, nullptr, got.data()};
  cuda::host_forward(cuda_view(model->impl()), {&spec, 1});
  EXPECT_TRUE(test::same_bits(got, want));
}

}  // namespace
}  // namespace lockstep
