// A model's packed matrices lie back to back in one block (kernels/simd/weight_arena.hpp), which
// starts on a 2 MiB boundary so that the system can back it with huge pages.
#include "kernels/simd/weight_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <new>

#include "lockstep/model.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"

namespace lockstep {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(WeightArena, TakesAlignedZeroedSlicesInOrderUpToItsSize) {
  simd::WeightArena arena(size_t{3} << 20);
  simd::AlignedFloats a = arena.take(5);
  simd::AlignedFloats b = arena.take(1000);
  EXPECT_EQ(address(a.get()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(address(b.get()), address(a.get()) + 64);  // 5 floats round up to one line
  EXPECT_EQ(arena.used_bytes(), 64u + 4032u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b[i], 0.0f);
  b[999] = 1.0f;
  EXPECT_THROW((void)arena.take(size_t{3} << 20), std::bad_alloc);
  // The slices free nothing: the arena's block goes with the arena.
  a.reset();
  b.reset();
  EXPECT_NO_THROW((void)arena.take(16));
}

TEST(WeightArena, FloatsFromWithoutArenaOwnTheirMemory) {
  simd::AlignedFloats p = simd::floats_from(nullptr, 100);
  EXPECT_TRUE(p.get_deleter().owned);
  EXPECT_EQ(address(p.get()) % 64, 0u);
}

// Every matrix of a packed model (f32, and bf16's 16-bit panels) lies inside its arena, in
// packing order, the first at the arena's 2 MiB-aligned start.
TEST(WeightArena, ModelMatricesLieBackToBackInOneBlock) {
  ModelConfig c;
  c.vocab_size = 300;
  c.length = 16;
  c.d_model = 80;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 200;
  for (const Precision precision : {Precision::f32, Precision::bf16}) {
    ModelOptions options;
    options.precision = precision;
    const auto model = Model::from_parameters(c, init_parameters(c, 5), options);
    const PackedWeights& pw = *model->impl().packed;
    ASSERT_NE(pw.arena, nullptr);
    const uintptr_t base = address(pw.layers[0].qkv.data.get());
    EXPECT_EQ(base % (size_t{2} << 20), 0u);
    uintptr_t next = base;
    size_t bytes = 0;
    auto check = [&](const simd::PackedMatrix& m) {
      EXPECT_EQ(address(m.data.get()), next);
      EXPECT_FALSE(m.data.get_deleter().owned);
      next += (m.bytes() + 63) / 64 * 64;
      bytes += (m.bytes() + 63) / 64 * 64;
    };
    for (const auto& L : pw.layers) {
      check(L.qkv);
      check(L.wo);
      check(L.gate_up);
      check(L.w_down);
    }
    check(pw.head);
    EXPECT_EQ(pw.arena->used_bytes(), bytes);
  }
}

}  // namespace
}  // namespace lockstep
