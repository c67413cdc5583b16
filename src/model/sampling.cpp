#include "lockstep/sampling.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/fpenv.hpp"
#include "core/rng.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "model/sampling_impl.hpp"

namespace lockstep {

namespace {

// Sorts keys whose upper 32 bits are the order and whose lower 32 bits are the id, the ids
// increasing: by the upper 32 bits, least significant digit first (radix sort). Each pass is
// stable, so equal upper halves keep the ids' increasing order, and the result is the one sorted
// order of the distinct keys, whatever the machine; a pass whose digit is the same in every key
// moves nothing. 8 bits a pass for small vocabularies (fewer buckets to clear and sum), 11 for
// large ones (three passes over the keys instead of four).
//
// Not Highway's vqsort (hwy::Sorter), which Debian's Highway 1.0.3 gets wrong on SVE vectors of
// 1024 bits and more (issue 42; README, "Running on Arm"): its Sort caps its vectors at 512 bits,
// but the base case's sorting network takes 16 u64 lanes there, and its 64-bit traits'
// OddEvenQuads and SwapAdjacentQuads (ConcatUpperLower, ConcatLowerUpper) then move halves of 8
// lanes instead of groups of 4, so more than 64 keys came back unsorted, some repeated. On
// x86 (bench/README.md): sample_token at a vocabulary of 256 took 3.0 µs against vqsort's 2.8;
// the sort alone at 151,936 keys 1.6 ms against 1.5; std::sort took six to eight times as long.
template <int kBits, int kPasses>
void radix_sort_upper_halves(std::vector<uint64_t>& keys, std::vector<uint64_t>& scratch) {
  constexpr size_t kBuckets = size_t{1} << kBits;
  static_assert(kBits * kPasses >= 32, "the passes must cover the upper 32 bits");
  const size_t n = keys.size();
  std::vector<uint32_t> counts(kPasses * kBuckets, 0);  // every pass's histogram, from one read
  for (const uint64_t key : keys)
    for (int p = 0; p < kPasses; ++p) ++counts[p * kBuckets + ((key >> (32 + p * kBits)) & (kBuckets - 1))];
  scratch.resize(n);
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* const count = counts.data() + p * kBuckets;
    const int shift = 32 + p * kBits;
    if (n == 0 || count[(keys[0] >> shift) & (kBuckets - 1)] == n) continue;
    uint32_t start = 0;  // each bucket's first place in the pass's output
    for (size_t b = 0; b < kBuckets; ++b) {
      const uint32_t in_bucket = count[b];
      count[b] = start;
      start += in_bucket;
    }
    for (const uint64_t key : keys) scratch[count[(key >> shift) & (kBuckets - 1)]++] = key;
    keys.swap(scratch);
  }
}

// The ids whose logit is not NaN, by logit, highest first, ties to the lower id: sorted as one
// integer each, the logit's bits mapped so that a higher logit is a smaller key (with -0 as +0,
// which compare equal), then the id.
std::vector<int32_t> candidates_by_logit(std::span<const float> logits) {
  // Branch-free: a decode's logits change every step, so branches on their signs mispredict.
  std::vector<uint64_t> keys(logits.size());
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float z = logits[i];
    const uint32_t bits = std::bit_cast<uint32_t>(z) & (z == 0.0f ? 0u : ~0u);
    const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31);
    const uint32_t ascending = bits ^ (negative | 0x80000000u);
    keys[n] = static_cast<uint64_t>(~ascending) << 32 | static_cast<uint32_t>(i);
    n += z == z;
  }
  keys.resize(n);
  std::vector<uint64_t> scratch;
  if (n < 4096) {
    radix_sort_upper_halves<8, 4>(keys, scratch);
  } else {
    radix_sort_upper_halves<11, 3>(keys, scratch);
  }
  std::vector<int32_t> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) order[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
  return order;
}

}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, int64_t step) {
  return sample_token(logits, o, step, nullptr);
}

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, int64_t step, SampleTrace* trace) {
  // Without a model, the best target's exp, looked up once (best_kernels asks the CPU each time).
  static const simd::Kernels& best = simd::best_kernels();
  return sample_token(logits, o, step, trace, best);
}

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, int64_t step, SampleTrace* trace,
                     const simd::Kernels& kernels) {
  o.validate();
  const FloatEnvScope env;  // exp_f32 must see subnormals as they are
  if (trace) *trace = SampleTrace{};
  if (o.temperature == 0.0f) return greedy_choice(logits);
  std::vector<int32_t> order = candidates_by_logit(logits);
  if (order.empty()) throw Error(ErrorKind::invalid_argument, "every logit is NaN; no token can be chosen");
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < order.size()) order.resize(static_cast<size_t>(o.top_k));
  // Weights exp((z - max) / T) in f32 with the profile's exp; sums in f64, in candidate order.
  // A logit equal to the highest weighs exactly 1 (z - max is taken as 0, so that infinite
  // logits give weights, not NaN): the total is at least 1 and every sum below is finite.
  // Each weight depends on its own logit only, so they are computed for every id at once in id
  // order with the kernels' exp (ref::exp_f32's bits on every target: exactness_test) and read
  // in candidate order.
  const float max = logits[static_cast<size_t>(order[0])];
  std::vector<float> scaled(logits.size()), by_id(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float z = logits[i];
    scaled[i] = (z == max ? 0.0f : z - max) / o.temperature;
  }
  kernels.exp(scaled.data(), by_id.data(), static_cast<int64_t>(by_id.size()));
  std::vector<float> weight(order.size());
  double total = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    weight[i] = by_id[static_cast<size_t>(order[i])];
    total = total + static_cast<double>(weight[i]);
  }
  if (o.top_p < 1.0f) {
    const double keep = static_cast<double>(o.top_p) * total;
    double mass = 0.0;
    size_t n = 0;
    while (n < order.size() && mass < keep) mass = mass + static_cast<double>(weight[n++]);
    order.resize(n);
    weight.resize(n);
    total = mass;
  }
  const double target = random_open01(o.seed, 0x73616d70ull /* "samp" */, static_cast<uint64_t>(step)) * total;
  if (trace) *trace = SampleTrace{order, weight, total, target};
  double acc = 0.0;
  size_t last = 0;  // the last candidate with a weight: where a target rounded up to the total lands
  for (size_t i = 0; i < order.size(); ++i) {
    acc = acc + static_cast<double>(weight[i]);
    if (target < acc) return order[i];
    if (weight[i] > 0.0f) last = i;
  }
  return order[last];
}

}  // namespace lockstep
