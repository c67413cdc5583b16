// test_cuda: the cuda device against the reference on a GPU (docs/CUDA.md). Every test skips,
// saying why, where no GPU runs (ctest shows them as skipped, never as passed): a build without
// CUDA, no driver, no device. tools/cuda_device_check.sh runs this on a lent GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "kernels/cuda/device.hpp"
#include "lockstep/model.hpp"
#include "support/model_shapes.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    const std::string why = cuda::gpu_unavailable();                            \
    if (!why.empty()) GTEST_SKIP() << "no GPU to run the cuda device: " << why; \
  } while (0)

const CallOptions kReference{Device::reference, std::nullopt};
const CallOptions kCuda{Device::cuda, std::nullopt};

// The golden models of tests/model/golden_test.cpp (whose reference logits and losses are
// pinned there): the cuda device's logits and loss equal the reference's, so their hashes are
// the pinned ones.
TEST(CudaDevice, GoldenModelsGiveTheReferenceBits) {
  SKIP_WITHOUT_GPU();
  ModelConfig gqa;
  gqa.n_kv_heads = 2;
  struct Golden {
    const char* name;
    ModelConfig config;
    uint64_t seed;
    Precision precision;
  };
  const Golden goldens[] = {{"default", ModelConfig{}, 1, Precision::f32},
                            {"default-gqa", gqa, 2, Precision::f32},
                            {"default-bf16", ModelConfig{}, 1, Precision::bf16}};
  const std::string text = "Lockstep promises the same bits on every path: reference, SIMD, threads.";
  std::vector<int32_t> ids;
  for (const char ch : text) ids.push_back(static_cast<unsigned char>(ch));
  const int64_t T = static_cast<int64_t>(ids.size());
  for (const Golden& g : goldens) {
    ModelOptions options;
    options.precision = g.precision;
    const auto model = Model::from_parameters(g.config, init_parameters(g.config, g.seed), options);
    const auto want = model->logits({ids.data(), 1, T}, {}, kReference);
    const auto got = model->logits({ids.data(), 1, T}, {}, kCuda);
    test::expect_same(got, want, std::string(g.name) + " logits");
    const auto loss_ids = test::random_ids(g.config.batch * (g.config.length + 1), g.config.vocab_size, 2026);
    const IdsView loss_view{loss_ids.data(), g.config.batch, g.config.length + 1};
    EXPECT_EQ(model->loss_bits(loss_view, kCuda), model->loss_bits(loss_view, kReference)) << g.name;
    std::printf("cuda golden %s: logits sha256 %s\n", g.name, test::sha256_of(got).c_str());
  }
}

// The fast path's shapes, both precisions, batches of 1 to 8 ragged rows: logits and hidden
// states by memcmp.
TEST(CudaDevice, LogitsAndHiddenEqualTheReference) {
  SKIP_WITHOUT_GPU();
  for (const test::Shape& shape : test::shapes()) {
    const ModelConfig& c = shape.config;
    for (const Precision precision : {Precision::f32, Precision::bf16}) {
      ModelOptions options;
      options.precision = precision;
      const auto model = Model::from_parameters(c, test::parameters_for(c, 17), options);
      for (int64_t B = 1; B <= 8; ++B) {
        const int64_t T = c.length;
        const auto ids = test::random_ids(B * T, c.vocab_size, static_cast<uint64_t>(B * 31));
        std::vector<int32_t> lengths;
        for (int64_t b = 0; b < B; ++b)
          lengths.push_back(static_cast<int32_t>(1 + test::random_ids(1, static_cast<int32_t>(T), static_cast<uint64_t>(B * 100 + b))[0]));
        const std::string what = std::string(shape.name) + " " + precision_name(precision) + " B=" + std::to_string(B);
        test::expect_same(model->logits({ids.data(), B, T}, lengths, kCuda),
                          model->logits({ids.data(), B, T}, lengths, kReference), what + " logits");
        test::expect_same(model->hidden({ids.data(), B, T}, lengths, kCuda),
                          model->hidden({ids.data(), B, T}, lengths, kReference), what + " hidden");
        if (HasFatalFailure()) return;
      }
      std::printf("cuda equals the reference: %s %s\n", shape.name, precision_name(precision));
    }
  }
}

// A model loaded for the device has its weights there once; calls from several threads share
// them and each gets the bits it would get alone.
TEST(CudaDevice, ModelLoadedForTheDeviceServesCallsFromSeveralThreads) {
  SKIP_WITHOUT_GPU();
  const ModelConfig c = test::tiny_gqa_config(24);
  ModelOptions options;
  options.device = Device::cuda;
  const auto model = Model::from_parameters(c, test::parameters_for(c, 5), options);
  const auto ids = test::random_ids(4 * c.length, c.vocab_size, 9);
  const auto want = model->logits({ids.data(), 4, c.length}, {}, kReference);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = model->logits({ids.data(), 4, c.length}); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) test::expect_same(g, want, "a thread's logits");
}

}  // namespace
}  // namespace lockstep
