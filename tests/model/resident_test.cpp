// What a loaded model holds in memory. An f32 model keeps one copy of its weights: each matrix's
// f32 pages are given back as it is packed, and expanded again from the panels, bit for bit, when
// the reference path, parameters() or a trainer asks (for every SIMD target this machine runs).
// bf16 keeps each matrix weight's low 16 bits beside its rounded panels: one copy too. Loading
// from a file peaks near one copy of the weights (Linux: VmHWM, reset through clear_refs); a q8
// or q4 load never holds the f32 matrices.
#include <gtest/gtest.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "lockstep/trainer.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

ModelConfig mid_config() {  // ~1.2 M parameters (4.8 MB), widths off the panel widths
  ModelConfig c;
  c.vocab_size = 1000;
  c.length = 24;
  c.d_model = 192;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.d_ff = 520;
  c.batch = 2;
  return c;
}

size_t weight_bytes(const ModelConfig& c) { return static_cast<size_t>(ParameterRegistry(c).total()) * sizeof(float); }

// Bytes a packed copy adds over the flat matrices: panel padding, and the pages at the edges of
// each matrix that it shares with its neighbours (never given back).
size_t packing_slack(const PackedWeights& pw) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t slack = 0;
  auto add = [&](const simd::PackedMatrix& m) {
    slack += static_cast<size_t>((m.panels * m.panel - m.N) * m.K) * sizeof(float) + 3 * page;
  };
  for (const auto& L : pw.layers) {
    add(L.qkv);
    add(L.wo);
    add(L.gate_up);
    add(L.w_down);
  }
  add(pw.head);
  return slack;
}

TEST(Resident, F32ModelHoldsOneCopyOfItsWeights) {
  const ModelConfig c = mid_config();
  const auto model = Model::from_parameters(c, init_parameters(c, 3));
  const Model::Impl& m = model->impl();
  ASSERT_FALSE(m.released.empty());
  const size_t bound = weight_bytes(c) + packing_slack(*m.packed);
  EXPECT_LE(m.resident_weight_bytes(), bound) << "weights " << weight_bytes(c);
  // Nearly every matrix byte is given back (all but the pages at the matrices' edges).
  size_t released = 0;
  for (const auto& r : m.released) released += static_cast<size_t>(r.end - r.begin) * sizeof(float);
  const size_t embed_and_norms = (static_cast<size_t>(c.vocab_size) + 2 * c.n_layers + 1) * c.d_model * sizeof(float);
  const size_t matrices = weight_bytes(c) - embed_and_norms;
  EXPECT_GE(released, matrices - packing_slack(*m.packed));
  // Asking for the parameters brings the second copy back (what the reference path reads).
  const size_t before = m.resident_weight_bytes();
  (void)model->parameters();
  EXPECT_EQ(m.resident_weight_bytes(), before + released);
}

// bf16 panels are rounded; the low halves kept beside them give the f32 values back, ties
// included (low bits 0x8000, rounded up or down by the parity of the bits above).
TEST(Resident, Bf16ModelHoldsOneCopyOfItsWeightsAndExpandsThemBitForBit) {
  const ModelConfig c = mid_config();
  std::vector<float> params = init_parameters(c, 3);
  const ParameterRegistry reg(c);
  const int64_t wq = reg.layer(0).wq, head = reg.head();
  for (int64_t i = 0; i < 4096; i += 2) {  // ties both ways, and values that round up and down
    params[static_cast<size_t>(wq + i)] = std::bit_cast<float>(0x3c218000u + (static_cast<uint32_t>(i) << 16));
    params[static_cast<size_t>(wq + i + 1)] = std::bit_cast<float>(0xbc21ffffu - (static_cast<uint32_t>(i) << 15));
    params[static_cast<size_t>(head + i)] = std::bit_cast<float>(0x3b808000u + static_cast<uint32_t>(i));
  }
  const auto ids = test::random_ids(c.length, c.vocab_size, 11);
  std::vector<float> want;
  for (const std::string& target : test::targets_under_test()) {
    for (const bool reference_first : {false, true}) {
      ModelOptions o;
      o.precision = Precision::bf16;
      o.simd_target = target;
      const auto model = Model::from_parameters(c, params, o);
      const Model::Impl& m = model->impl();
      ASSERT_FALSE(m.released.empty()) << target;
      EXPECT_LE(m.resident_weight_bytes(), weight_bytes(c) + packing_slack(*m.packed)) << target;
      const auto fast = model->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 2});
      if (want.empty()) want = fast;
      ASSERT_TRUE(test::same_bits(fast, want)) << target;
      if (reference_first) {
        EXPECT_TRUE(test::same_bits(model->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt}),
                                    want))
            << target;
      }
      const std::span<const float> got = model->parameters();
      ASSERT_EQ(got.size(), params.size());
      EXPECT_EQ(std::memcmp(got.data(), params.data(), params.size() * sizeof(float)), 0) << target;
      EXPECT_TRUE(test::same_bits(model->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt}),
                                  want))
          << target;
      EXPECT_TRUE(test::same_bits(model->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 3}), want)) << target;
    }
  }
}

// Released matrices come back with the very bits, whichever asks first, on every target: the
// reference path, parameters() (memcmp with the given values) or a trainer made from the model
// (its loss and updated parameters equal a trainer given the values directly).
TEST(Resident, F32ExpansionGivesTheOriginalBitsOnEveryTarget) {
  const ModelConfig c = mid_config();
  const std::vector<float> params = init_parameters(c, 4);
  const auto ids = test::random_ids(c.length, c.vocab_size, 12);
  const auto batch = test::random_ids(static_cast<int64_t>(c.batch) * (c.length + 1), c.vocab_size, 13);
  Trainer direct(c, params);
  const uint32_t want_loss = direct.train_step({batch.data(), c.batch, c.length + 1});
  std::vector<float> want;
  for (const std::string& target : test::targets_under_test()) {
    for (const int first : {0, 1, 2}) {
      ModelOptions o;
      o.simd_target = target;
      const auto model = Model::from_parameters(c, params, o);
      ASSERT_FALSE(model->impl().released.empty()) << target;
      const auto fast = model->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 3});
      if (want.empty()) want = fast;
      ASSERT_TRUE(test::same_bits(fast, want)) << target;
      if (first == 0) {
        EXPECT_TRUE(test::same_bits(model->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt}),
                                    want))
            << target;
      } else if (first == 2) {
        Trainer t(c, model->parameters());
        EXPECT_EQ(t.train_step({batch.data(), c.batch, c.length + 1}), want_loss) << target;
        EXPECT_TRUE(test::same_bits(t.parameters(), direct.parameters())) << target;
      }
      const std::span<const float> got = model->parameters();
      ASSERT_EQ(got.size(), params.size());
      EXPECT_EQ(std::memcmp(got.data(), params.data(), params.size() * sizeof(float)), 0) << target << " " << first;
      EXPECT_EQ(model->parameters_sha256(), sha256_f32_le(params));
      EXPECT_TRUE(test::same_bits(model->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 2}), want)) << target;
    }
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOCKSTEP_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LOCKSTEP_UNDER_SANITIZER 1
#endif
#endif

// kB from /proc/self/status ("VmRSS", "VmHWM"), -1 when not there.
int64_t status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  return -1;
}

[[maybe_unused]] ModelConfig rss_config() {  // ~9 M parameters (36 MB as f32); unused under a sanitizer
  ModelConfig c;
  c.vocab_size = 2048;
  c.length = 32;
  c.d_model = 384;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.d_ff = 1024;
  c.batch = 1;
  return c;
}

// Writes a model directory of `c` stored as `storage` ("float32", "q8" or "q4").
[[maybe_unused]] void write_model(const std::string& dir, const ModelConfig& c, const std::string& storage) {
  const std::vector<float> params = init_parameters(c, 5);
  fs::create_directories(dir);
  const std::string file = dir + "/" + format::kWeightsFile;
  std::string sha;
  if (storage == "q8") {
    sha = sha256_f32_le(format::write_weights_q8(file, c, params));
  } else if (storage == "q4") {
    sha = sha256_f32_le(format::write_weights_q4(file, c, params));
  } else {
    format::write_weights(file, c, params);
    sha = sha256_f32_le(params);
  }
  format::ModelDescription d;
  d.config = c;
  d.profile = profile_name();
  d.weights = {format::kWeightsFile, storage, sha};
  format::write_file_synced(dir + "/model.json", format::render_model_json(d));
}

// Gives the allocator's free memory back to the system (glibc keeps freed blocks below its mmap
// threshold, which would count in VmRSS as memory still held).
void trim_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// What loading `dir` adds to the process: VmRSS once loaded and VmHWM (its peak, when the
// system lets clear_refs reset it; else -1), in kB over VmRSS before.
struct LoadCost {
  std::shared_ptr<const Model> model;
  int64_t added_kb = 0, peak_kb = -1;
};
[[maybe_unused]] LoadCost load_cost(const std::string& dir) {
  LoadCost cost;
  trim_heap();
  const int64_t before = status_kb("VmRSS");
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";  // VmHWM := VmRSS
  }
  const bool peak_reset = status_kb("VmHWM") <= before + 1024;
  cost.model = Model::load(dir);
  trim_heap();
  cost.added_kb = status_kb("VmRSS") - before;
  if (peak_reset) cost.peak_kb = status_kb("VmHWM") - before;
  return cost;
}

// A served f32 model (loaded from its directory, as `lockstep serve` does) adds about its weight
// bytes to the process, and loading peaks there too: not the mapped file plus a flat copy plus
// the panels.
TEST(Resident, LoadingAnF32ModelPeaksNearOneCopyOfItsWeights) {
#ifdef LOCKSTEP_UNDER_SANITIZER
  GTEST_SKIP() << "resident set sizes mean nothing under a sanitizer";
#else
  if (status_kb("VmHWM") < 0) {
    GTEST_SKIP() << "no /proc/self/status here";
  }
  const ModelConfig c = rss_config();
  test::TempDir tmp;
  write_model(tmp / "m", c, "float32");
  const LoadCost cost = load_cost(tmp / "m");
  const int64_t weights_kb = static_cast<int64_t>(weight_bytes(c) / 1024);
  // Slack: the panels' padding and shared edge pages, the largest matrix (packed before its f32
  // pages go), the rope tables and the allocator's and the loader's small change.
  const int64_t largest = static_cast<int64_t>(2 * c.d_model * c.d_ff) * 4 / 1024;
  const int64_t slack = static_cast<int64_t>(packing_slack(*cost.model->impl().packed) / 1024) + largest + 4 * 1024;
  EXPECT_LE(cost.added_kb, weights_kb + slack) << "weights " << weights_kb << " kB";
  EXPECT_LE(static_cast<int64_t>(cost.model->impl().resident_weight_bytes() / 1024), weights_kb + slack);
  if (cost.peak_kb >= 0) {
    EXPECT_LE(cost.peak_kb, weights_kb + slack) << "weights " << weights_kb << " kB";
  }
#endif
}

// A q8 or q4 model never holds the f32 copy of its packed matrices, not even while loading: it
// peaks near its packed bytes plus the f32 embedding (the file's values of a matrix go as its
// panels are made; one matrix at a time is expanded to f32 for the digest), and then holds its
// panels and the embedding.
TEST(Resident, LoadingAPackedModelNeverHoldsItsF32Matrices) {
#ifdef LOCKSTEP_UNDER_SANITIZER
  GTEST_SKIP() << "resident set sizes mean nothing under a sanitizer";
#else
  if (status_kb("VmHWM") < 0) {
    GTEST_SKIP() << "no /proc/self/status here";
  }
  const ModelConfig c = rss_config();
  for (const std::string storage : {"q8", "q4"}) {
    test::TempDir tmp;
    write_model(tmp / "m", c, storage);
    const LoadCost cost = load_cost(tmp / "m");
    const Model::Impl& m = cost.model->impl();
    size_t packed = m.packed->head.bytes();
    for (const auto& L : m.packed->layers)
      packed += L.qkv.bytes() + L.wo.bytes() + L.gate_up.bytes() + L.w_down.bytes();
    const int64_t embed_kb = static_cast<int64_t>(c.vocab_size) * c.d_model * 4 / 1024;
    const int64_t packed_kb = static_cast<int64_t>(packed / 1024), slack = 4 * 1024;
    EXPECT_LE(cost.added_kb, packed_kb + embed_kb + slack) << storage;
    EXPECT_LE(static_cast<int64_t>(m.resident_weight_bytes() / 1024), packed_kb + embed_kb + slack) << storage;
    const int64_t largest_f32_kb = static_cast<int64_t>(c.vocab_size) * c.d_model * 4 / 1024;  // the head
    // The panels' arena lies on huge pages where the system gives them: the one being filled is
    // resident whole, up to 2 MiB before its panels are written.
    const int64_t filling_kb = 2048;
    if (cost.peak_kb >= 0) {
      EXPECT_LE(cost.peak_kb, packed_kb + embed_kb + largest_f32_kb + filling_kb + slack)
          << storage << ": f32 weights " << weight_bytes(c) / 1024 << " kB";
    }
    // And the expansion on demand still gives the written model's values.
    EXPECT_EQ(sha256_f32_le(cost.model->parameters()), cost.model->parameters_sha256()) << storage;
  }
#endif
}

}  // namespace
}  // namespace lockstep
