// The fast path against the reference, whole forward passes and losses, with memcmp: for every
// SIMD target this machine runs, thread counts 1, 2, 3 and 7, batches of 1 to 8 ragged rows, odd
// model shapes, both precisions; and the imported architectures' parts: Llama 3's RoPE scaling
// and biases on q, k, v (Qwen2) and o (Llama's attention_bias).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <cstring>

#include "lockstep/model.hpp"
#include "lockstep/session.hpp"
#include "support/model_shapes.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using test::Shape;
using test::shapes;
using test::parameters_for;
using test::llama3_scaling;

TEST(FastPath, LogitsHiddenAndLossEqualTheReference) {
  for (const Shape& shape : shapes()) {
    const ModelConfig& c = shape.config;
    const auto params = parameters_for(c, 17);
    for (const Precision precision : {Precision::f32, Precision::bf16}) {
      ModelOptions ref_options;
      ref_options.precision = precision;
      const auto reference = Model::from_parameters(c, params, ref_options);
      for (const std::string& target : test::targets_under_test()) {
        ModelOptions options;
        options.precision = precision;
        options.simd_target = target;
        const auto fast = Model::from_parameters(c, params, options);
        for (int64_t B = 1; B <= 8; ++B) {
          const int64_t T = c.length;
          const auto ids = test::random_ids(B * T, c.vocab_size, static_cast<uint64_t>(B * 31));
          std::vector<int32_t> lengths;
          for (int64_t b = 0; b < B; ++b)
            lengths.push_back(static_cast<int32_t>(1 + test::random_ids(1, static_cast<int32_t>(T), static_cast<uint64_t>(B * 100 + b))[0]));
          const auto want = reference->logits({ids.data(), B, T}, lengths, {Device::reference, std::nullopt});
          const auto want_hidden = reference->hidden({ids.data(), B, T}, lengths, {Device::reference, std::nullopt});
          for (int threads : {1, 2, 3, 7}) {
            const std::string what = std::string(shape.name) + " " + precision_name(precision) + " " + target +
                                     " B=" + std::to_string(B) + " threads=" + std::to_string(threads);
            const auto got = fast->logits({ids.data(), B, T}, lengths, {Device::cpu, threads});
            ASSERT_TRUE(test::same_bits(got, want)) << what << " logits";
            const auto got_hidden = fast->hidden({ids.data(), B, T}, lengths, {Device::cpu, threads});
            ASSERT_TRUE(test::same_bits(got_hidden, want_hidden)) << what << " hidden";
          }
        }
        const auto loss_ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 5);
        const uint32_t want_loss = reference->loss_bits({loss_ids.data(), c.batch, c.length + 1}, {Device::reference, std::nullopt});
        for (int threads : {1, 2, 3, 7})
          EXPECT_EQ(fast->loss_bits({loss_ids.data(), c.batch, c.length + 1}, {Device::cpu, threads}), want_loss)
              << shape.name << " " << target << " threads=" << threads;
        std::printf("fast path equals the reference: %s %s on %s\n", shape.name, precision_name(precision),
                    target.c_str());
      }
    }
  }
}

TEST(FastPath, DecodeStepsSplitOrNotEqualTheReference) {
  // A model wide enough that a one-token step shares some phases among the threads (q/k/v,
  // gate/up, down: two to four items each) and runs the rest on the caller alone (norms, RoPE,
  // attention, wo, the head): sessions on 1, 2, 3 and 7 threads, appends of 1 to 3 tokens, and
  // a batched step of ragged sessions, each logit's bits the reference session's.
  // Once as the base architecture, once with Llama 3 scaling and every bias.
  for (const bool imported : {false, true}) {
  ModelConfig c;
  c.vocab_size = 300;
  c.length = 20;
  c.d_model = 256;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 512;
  c.batch = 2;
  if (imported) {
    c.qkv_bias = c.o_bias = true;
    RopeScaling s = llama3_scaling();
    s.original_max_position = 1024;  // head_dim 64: wavelengths from 6.3 to 5e4
    c.rope_scaling = s;
  }
  const auto params = parameters_for(c, 23);
  const auto ids = test::random_ids(c.length, c.vocab_size, 41);
  for (const Precision precision : {Precision::f32, Precision::bf16}) {
    ModelOptions ref_options;
    ref_options.precision = precision;
    const auto reference = Model::from_parameters(c, params, ref_options);
    Session want(reference, {Device::reference, std::nullopt});
    std::vector<std::vector<float>> want_steps;
    const int chunks[] = {1, 1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 1, 1};
    for (size_t at = 0, i = 0; i < std::size(chunks) && at + static_cast<size_t>(chunks[i]) <= ids.size(); at += static_cast<size_t>(chunks[i]), ++i)
      want_steps.push_back(want.append(std::span<const int32_t>(ids).subspan(at, static_cast<size_t>(chunks[i]))));
    std::vector<std::vector<float>> want_batch;  // session s's logits at its last new position
    for (int s = 0; s < 4; ++s) {
      const int64_t last = 1 + 4 * s + (1 + s % 2) - 1;
      const auto all = reference->logits({ids.data(), 1, last + 1}, {}, {Device::reference, std::nullopt});
      want_batch.emplace_back(all.end() - c.vocab_size, all.end());
    }
    for (const std::string& target : test::targets_under_test()) {
      ModelOptions options;
      options.precision = precision;
      options.simd_target = target;
      const auto fast = Model::from_parameters(c, params, options);
      for (int threads : {1, 2, 3, 7}) {
        Session got(fast, {Device::cpu, threads});
        for (size_t at = 0, i = 0; i < want_steps.size(); at += static_cast<size_t>(chunks[i]), ++i)
          ASSERT_TRUE(test::same_bits(got.append(std::span<const int32_t>(ids).subspan(at, static_cast<size_t>(chunks[i]))),
                                      want_steps[i]))
              << precision_name(precision) << " " << target << " threads " << threads << " step " << i;
      }
      // Ragged sessions stepped together: one token each, or two.
      for (int threads : {2, 7}) {
        std::vector<Session> sessions;
        std::vector<std::vector<float>> out(4, std::vector<float>(static_cast<size_t>(c.vocab_size)));
        std::vector<SessionStep> steps;
        for (int s = 0; s < 4; ++s) {
          sessions.emplace_back(fast, CallOptions{Device::cpu, threads});
          sessions.back().append(std::span<const int32_t>(ids).subspan(0, static_cast<size_t>(1 + 4 * s)));
        }
        for (int s = 0; s < 4; ++s)
          steps.push_back({&sessions[static_cast<size_t>(s)],
                           std::span<const int32_t>(ids).subspan(static_cast<size_t>(1 + 4 * s), static_cast<size_t>(1 + s % 2)),
                           out[static_cast<size_t>(s)].data(), nullptr});
        append_batch(steps, {Device::cpu, threads});
        for (int s = 0; s < 4; ++s)
          EXPECT_TRUE(test::same_bits(out[static_cast<size_t>(s)], want_batch[static_cast<size_t>(s)]))
              << precision_name(precision) << " " << target << " threads " << threads << " session " << s
              << (imported ? " (biases, llama3 scaling)" : "");
      }
    }
  }
  }
}

TEST(FastPath, ARowsBitsDoNotDependOnItsNeighbours) {
  // The same row, alone and beside 0..7 other rows of every length, at several thread counts.
  const ModelConfig c = test::tiny_gqa_config(24);
  const auto model = Model::from_parameters(c, init_parameters(c, 3));
  const auto row = test::random_ids(c.length, c.vocab_size, 99);
  const auto alone = model->logits({row.data(), 1, c.length}, {}, {Device::cpu, 1});
  for (int others = 0; others <= 7; ++others) {
    for (int place = 0; place <= others; ++place) {
      std::vector<int32_t> ids;
      std::vector<int32_t> lengths;
      for (int b = 0; b <= others; ++b) {
        if (b == place) {
          ids.insert(ids.end(), row.begin(), row.end());
          lengths.push_back(c.length);
        } else {
          const auto other = test::random_ids(c.length, c.vocab_size, static_cast<uint64_t>(1000 + b * 7 + others));
          ids.insert(ids.end(), other.begin(), other.end());
          lengths.push_back(1 + (b * 5 + others) % c.length);
        }
      }
      const int64_t B = others + 1;
      const int threads = 1 + (others % 3);
      const auto got = model->logits({ids.data(), B, c.length}, lengths, {Device::cpu, threads});
      ASSERT_EQ(std::memcmp(got.data() + place * c.length * c.vocab_size, alone.data(), alone.size() * 4), 0)
          << "row at " << place << " of " << B << ", threads " << threads;
    }
  }
}

TEST(FastPath, ForwardOutputsOnlyWhatWasAsked) {
  // RowRequest with an output window [out_begin, out_end): equal to the full pass at those rows.
  const ModelConfig c = test::tiny_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 8));
  const auto ids = test::random_ids(20, c.vocab_size, 4);
  const auto full = model->logits({ids.data(), 1, 20}, {}, {Device::reference, std::nullopt});
  for (Device device : {Device::reference, Device::cpu}) {
    std::vector<float> logits(3 * c.vocab_size);
    RowRequest r;
    r.ids = {ids.data(), 20};
    r.out_begin = 9;
    r.out_end = 12;
    r.logits = logits.data();
    model->forward({&r, 1}, {device, 2});
    EXPECT_EQ(std::memcmp(logits.data(), full.data() + 9 * c.vocab_size, logits.size() * 4), 0) << device_name(device);
  }
}

}  // namespace
}  // namespace lockstep
