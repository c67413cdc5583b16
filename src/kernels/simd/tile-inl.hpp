// Register tiles without arrays of vectors. SVE's vectors are sizeless: they cannot be array
// elements or struct members, only locals, parameters and return values (Highway's FAQ). A tile
// of Count accumulators is therefore a pack of by-value lambda parameters, and its loops are
// fold expressions over the pack and a matching index pack, unrolled at compile time: on x86 the
// code is what the former arrays compiled to (the arrays were fully unrolled into registers).
// Each accumulator is one output's chain; the folds run in index order, and the order of
// independent chains changes no bit.
// Included once per Highway target (the include guard toggles with HWY_TARGET_TOGGLE).
// The lambdas of a tile are always inlined: an out-of-line call would pass the tile through memory
// (x86's calling convention passes a pack of 16 vectors on the stack).
#ifndef LOCKSTEP_LAMBDA_INLINE
#define LOCKSTEP_LAMBDA_INLINE __attribute__((always_inline))
#endif

#if defined(LOCKSTEP_SIMD_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOCKSTEP_SIMD_TILE_INL_H_
#undef LOCKSTEP_SIMD_TILE_INL_H_
#else
#define LOCKSTEP_SIMD_TILE_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <type_traits>
#include <utility>

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {

template <size_t... I, class Init, class Body>
HWY_INLINE void WithTileOf(std::index_sequence<I...> seq, const Init& init, const Body& body) {
  body(seq, init(std::integral_constant<size_t, I>())...);
}

// body(std::index_sequence<0, ..., Count - 1>(), init(0), ..., init(Count - 1)), the indices
// passed to init as std::integral_constant<size_t, I>: body takes the tile as `auto... acc`
// (by value, updated in place) beside the index pack, e.g.
//   [&]<size_t... I>(std::index_sequence<I...>, auto... acc) { ((acc = f(I, acc)), ...); }
template <size_t Count, class Init, class Body>
HWY_INLINE void WithTile(const Init& init, const Body& body) {
  WithTileOf(std::make_index_sequence<Count>(), init, body);
}

// The I-th of a pack of references (I a constant), e.g. Nth<u>(m...) for a compile-time u.
template <size_t I, class V, class... Vs>
HWY_INLINE V& Nth(V& first, Vs&... rest) {
  if constexpr (I == 0) {
    return first;
  } else {
    return Nth<I - 1>(rest...);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
