// Golden values: the SHA-256 of the logits of fixed inputs and the bits of the loss of a fixed
// batch, for models initialised from fixed seeds. A change to any of these is a new arithmetic
// profile (docs/ARITHMETIC.md, "Versions"), never a silent edit of the numbers below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

struct Golden {
  const char* name;
  ModelConfig config;
  uint64_t seed;
  Precision precision;
  const char* logits_sha256;   // of the logits of kText, [1, len(kText), vocab]
  uint32_t loss_bits;          // of random_ids(batch * (length + 1), vocab, 2026)
};

constexpr char kText[] = "Lockstep promises the same bits on every path: reference, SIMD, threads.";

ModelConfig gqa_default() {
  ModelConfig c;  // the default shape with grouped-query attention
  c.n_kv_heads = 2;
  return c;
}

const Golden kGolden[] = {
    {"default", ModelConfig{}, 1, Precision::f32,
     "08be3a14ac59de2fb984dc0070676030dead9870eb378c4c0237b36d3f091142", 0x40b259d0u},
    {"default-gqa", gqa_default(), 2, Precision::f32,
     "b4abe10ceef8059befcf1baa05921eae3137b94d894125284884df158cefe6be", 0x40b23135u},
    {"default-bf16", ModelConfig{}, 1, Precision::bf16,
     "b5dea082ea88e91ca2d30ed96569847fafd70ac27c9a203ee787e7d59a519aa3", 0x40b259e0u},
};

std::vector<int32_t> text_ids() {
  std::vector<int32_t> ids;
  for (const char* p = kText; *p; ++p) ids.push_back(static_cast<unsigned char>(*p));
  return ids;
}

// On every SIMD target this machine runs (each named in the output), so that a build for another
// ISA (README, "Running on Arm") shows each of its targets gives x86's hashes.
// LOCKSTEP_GOLDEN_MODELS (comma-separated names, e.g. "default") checks those models alone and
// prints the ones left out: the Arm stage's SVE lengths check one model each (README, "Running on
// Arm"); a name that is not one of kGolden fails.
TEST(Golden, LogitsAndLossBitsArePinned) {
  const char* only = std::getenv("LOCKSTEP_GOLDEN_MODELS");
  std::vector<std::string> wanted;
  if (only) {
    std::stringstream list(only);
    for (std::string name; std::getline(list, name, ',');) wanted.push_back(name);
  }
  const auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  std::vector<std::string> known;
  for (const Golden& g : kGolden) {
    known.emplace_back(g.name);
    if (!wanted.empty() && !listed(wanted, g.name)) {
      std::printf("LOCKSTEP_GOLDEN_MODELS=%s: not checking %s in this run\n", only, g.name);
      continue;
    }
    const auto params = init_parameters(g.config, g.seed);
    const auto ids = text_ids();
    const int64_t T = static_cast<int64_t>(ids.size());
    ModelOptions ref_options;
    ref_options.precision = g.precision;
    const auto ref = Model::from_parameters(g.config, params, ref_options)
                         ->logits({ids.data(), 1, T}, {}, {Device::reference, std::nullopt});
    for (const std::string& target : test::targets_under_test()) {
      ModelOptions options = ref_options;
      options.simd_target = target;
      const auto model = Model::from_parameters(g.config, params, options);
      const std::string what = std::string(g.name) + " on " + target;
      const auto fast = model->logits({ids.data(), 1, T}, {}, {Device::cpu, 2});
      ASSERT_TRUE(test::same_bits(fast, ref)) << what;
      EXPECT_EQ(test::sha256_of(fast), g.logits_sha256) << what;
      const ModelConfig& c = g.config;
      const auto batch = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 2026);
      const uint32_t bits = model->loss_bits({batch.data(), c.batch, c.length + 1}, {Device::cpu, 2});
      EXPECT_EQ(bits, g.loss_bits) << what << " loss " << std::bit_cast<float>(bits) << " bits 0x"
                                   << std::hex << bits;
      std::printf("golden logits and loss checked: %s\n", what.c_str());
    }
  }
  for (const std::string& name : wanted)
    EXPECT_TRUE(listed(known, name)) << "LOCKSTEP_GOLDEN_MODELS names no golden model " << name;
}

// Greedy text from the shipped demo model (examples/models/fortunes), byte for byte, on both
// devices and through a session: the model file and the whole forward pass are pinned together.
TEST(Golden, TheShippedModelsGreedyTextIsPinned) {
  const auto model = Model::load(std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes");
  EXPECT_EQ(model->parameters_sha256(), "d37d17ce1fad9b8808e813918a6c5463171764ca2d113b3fbec45b929f9a2bda");
  const std::string want = "The Comple the start the start the start";
  for (Device device : {Device::cpu, Device::reference}) {
    std::vector<int32_t> ids = {'T', 'h', 'e', ' '};
    while (ids.size() < want.size())
      ids.push_back(model->next_bytes({ids.data(), 1, static_cast<int64_t>(ids.size())}, {}, {device, 2})[0]);
    EXPECT_EQ(std::string(ids.begin(), ids.end()), want) << device_name(device);
  }
}

}  // namespace
}  // namespace lockstep
