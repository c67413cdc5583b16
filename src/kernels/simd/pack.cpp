// Repacking weight matrices into the matmul kernel's panel layout (kernels.hpp, PackedMatrix).
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/ref/math.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/weight_arena.hpp"
#include "quant/q4.hpp"

namespace lockstep::simd {

namespace {

// Floats a packed [K, N] matrix's data and scales take in `storage`, as pack_*_concat allocate
// them: f32 panels, their 16-bit halves, int8 panels and a scale per column, or 4-bit panels
// (rows in pairs) and a scale per 32 rows per column.
std::pair<size_t, size_t> packed_floats(int32_t NR, PanelStorage storage, int64_t K, int64_t N) {
  const int64_t panels = (N + NR - 1) / NR;
  const auto elements = static_cast<size_t>(panels * K * NR);
  switch (storage) {
    case PanelStorage::bf16: return {(elements + 1) / 2, 0};
    case PanelStorage::q8: return {(elements + 3) / 4, static_cast<size_t>(panels * NR)};
    case PanelStorage::q4:
      return {(static_cast<size_t>(panels * ((K + 1) / 2) * NR) + 3) / 4,
              static_cast<size_t>(panels * quant::q4_groups(K) * NR)};
    case PanelStorage::f32: break;
  }
  return {elements, 0};
}

}  // namespace

size_t arena_bytes(const Kernels& kernels, PanelStorage storage, int64_t K, int64_t N) {
  const auto [data, scales] = packed_floats(kernels.panel_width, storage, K, N);
  return WeightArena::bytes_for(data) + WeightArena::bytes_for(scales);
}

AlignedFloats aligned_floats(size_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = n * sizeof(float);
  const size_t align = bytes >= 2 * kHuge ? kHuge : 64;
  const size_t rounded = std::max(align, ((bytes + align - 1) / align) * align);
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  if (align == kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);
  return AlignedFloats(static_cast<float*>(p));
}

PackedMatrix pack_concat(const Kernels& kernels, const MatrixPart* parts, int n_parts, int64_t K,
                         bool bf16_storage, WeightArena* arena) {
  PackedMatrix out;
  out.K = K;
  for (int i = 0; i < n_parts; ++i) out.N += parts[i].N;
  out.panel = kernels.panel_width;
  out.panels = (out.N + out.panel - 1) / out.panel;
  out.bf16 = bf16_storage;
  const PanelStorage storage = bf16_storage ? PanelStorage::bf16 : PanelStorage::f32;
  const size_t floats = packed_floats(out.panel, storage, K, out.N).first;
  out.data = floats_from(arena, floats);
  std::fill_n(out.data.get(), floats, 0.0f);
  uint16_t* const half = reinterpret_cast<uint16_t*>(out.data.get());
  // Row by row: each source row is read once, in order; each panel row written is contiguous.
  for (int64_t k = 0; k < K; ++k) {
    int64_t col = 0;
    for (int i = 0; i < n_parts; ++i) {
      const float* src = parts[i].w + k * parts[i].N;
      for (int64_t j = 0; j < parts[i].N; ++j, ++col) {
        const size_t at = static_cast<size_t>((col / out.panel) * K * out.panel + k * out.panel + col % out.panel);
        if (bf16_storage) {
          half[at] = static_cast<uint16_t>(std::bit_cast<uint32_t>(ref::round_bf16(src[j])) >> 16);
        } else {
          out.data[at] = src[j];
        }
      }
    }
  }
  return out;
}

PackedMatrix pack_q8_concat(const Kernels& kernels, const Q8Part* parts, int n_parts, int64_t K,
                            WeightArena* arena) {
  PackedMatrix out;
  out.K = K;
  for (int i = 0; i < n_parts; ++i) out.N += parts[i].N;
  out.panel = kernels.panel_width;
  out.panels = (out.N + out.panel - 1) / out.panel;
  out.q8 = true;
  const auto [floats, columns] = packed_floats(out.panel, PanelStorage::q8, K, out.N);
  out.data = floats_from(arena, floats);
  std::fill_n(out.data.get(), floats, 0.0f);
  out.scales = floats_from(arena, columns);
  std::fill_n(out.scales.get(), columns, 0.0f);
  int8_t* const bytes = reinterpret_cast<int8_t*>(out.data.get());
  int64_t col0 = 0;
  for (int i = 0; i < n_parts; ++i) {
    std::copy_n(parts[i].scale, parts[i].N, out.scales.get() + col0);
    col0 += parts[i].N;
  }
  for (int64_t k = 0; k < K; ++k) {
    int64_t col = 0;
    for (int i = 0; i < n_parts; ++i) {
      const int8_t* src = parts[i].q + k * parts[i].N;
      for (int64_t j = 0; j < parts[i].N; ++j, ++col)
        bytes[static_cast<size_t>((col / out.panel) * K * out.panel + k * out.panel + col % out.panel)] = src[j];
    }
  }
  return out;
}

PackedMatrix pack_q4_concat(const Kernels& kernels, const Q4Part* parts, int n_parts, int64_t K,
                            WeightArena* arena) {
  PackedMatrix out;
  out.K = K;
  for (int i = 0; i < n_parts; ++i) out.N += parts[i].N;
  out.panel = kernels.panel_width;
  out.panels = (out.N + out.panel - 1) / out.panel;
  out.q4 = true;
  out.groups = quant::q4_groups(K);
  const int64_t NR = out.panel, pairs = (K + 1) / 2;
  const auto [floats, scale_count] = packed_floats(out.panel, PanelStorage::q4, K, out.N);
  out.data = floats_from(arena, floats);
  std::fill_n(out.data.get(), floats, 0.0f);
  out.scales = floats_from(arena, scale_count);
  std::fill_n(out.scales.get(), scale_count, 0.0f);
  uint8_t* const bytes = reinterpret_cast<uint8_t*>(out.data.get());
  int64_t col = 0;
  for (int i = 0; i < n_parts; ++i) {
    const int64_t N = parts[i].N;
    for (int64_t j = 0; j < N; ++j, ++col) {
      const int64_t p = col / NR, lane = col % NR;
      for (int64_t g = 0; g < out.groups; ++g)
        out.scales[static_cast<size_t>((p * out.groups + g) * NR + lane)] = parts[i].scale[g * N + j];
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t nibble = static_cast<uint8_t>(quant::q4_value(parts[i].packed, N, k, j) & 0xF);
        bytes[static_cast<size_t>(p * pairs * NR + (k / 2) * NR + lane)] |=
            static_cast<uint8_t>(k % 2 == 0 ? nibble : nibble << 4);
      }
    }
  }
  return out;
}

PackedMatrix allocate_packed(const Kernels& kernels, int64_t K, int64_t N) {
  PackedMatrix out;
  out.K = K;
  out.N = N;
  out.panel = kernels.panel_width;
  out.panels = (N + out.panel - 1) / out.panel;
  const size_t total = static_cast<size_t>(out.panels * K * out.panel);
  out.data = aligned_floats(total);
  std::fill_n(out.data.get(), total, 0.0f);
  return out;
}

namespace {

float maybe_round(float v, bool bf16) { return bf16 ? ref::round_bf16(v) : v; }

}  // namespace

void pack_panels(const MatrixPart* parts, int n_parts, PackedMatrix& out, int64_t p0, int64_t p1, bool bf16) {
  const int64_t NR = out.panel, K = out.K;
  int64_t part_begin = 0;
  for (int i = 0; i < n_parts; ++i) {
    const int64_t N = parts[i].N, part_end = part_begin + N;
    for (int64_t p = std::max(p0, part_begin / NR); p < p1 && p * NR < part_end; ++p) {
      // The columns of panel p that belong to this part: one contiguous run per source row.
      const int64_t lo = std::max(p * NR, part_begin), hi = std::min((p + 1) * NR, part_end);
      const float* src = parts[i].w + (lo - part_begin);
      float* dst = out.data.get() + p * K * NR + (lo - p * NR);
      const int64_t run = hi - lo;
      for (int64_t k = 0; k < K; ++k, src += N, dst += NR) {
        if (bf16) {
          for (int64_t j = 0; j < run; ++j) dst[j] = ref::round_bf16(src[j]);
        } else {
          std::memcpy(dst, src, static_cast<size_t>(run) * sizeof(float));
        }
      }
    }
    part_begin = part_end;
  }
}

namespace {

// pack_rows for a panel width known at compile time (kWidth, or 0: NR), so that a whole panel row
// is a fixed-size copy the compiler writes inline rather than a call.
template <int64_t kWidth>
void pack_rows_of(const float* x, int64_t N, int64_t r_begin, int64_t r_end, float* data, int64_t K, int64_t NR) {
  const int64_t panels = (N + NR - 1) / NR, whole = N / NR;
  // A block of rows at a time, panel by panel: each panel gets the block's rows as one run of
  // kRowBlock * NR floats. Row by row, every store of a row fell a panel (K * NR floats, a
  // multiple of 4 KB) apart, all in one L1 set.
  constexpr int64_t kRowBlock = 8;
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowBlock) {
    const int64_t r1 = std::min(r_end, r0 + kRowBlock);
    for (int64_t p = 0; p < panels; ++p) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* src = x + r * N + p * NR;
        float* dst = data + (p * K + r) * NR;
        if (kWidth > 0 && p < whole) {
          std::memcpy(dst, src, static_cast<size_t>(kWidth) * sizeof(float));
        } else {
          std::memcpy(dst, src, static_cast<size_t>(std::min(NR, N - p * NR)) * sizeof(float));
        }
      }
    }
  }
}

}  // namespace

void pack_rows(const float* x, int64_t N, int64_t r_begin, int64_t r_end, float* data, int64_t K, int32_t NR) {
  switch (NR) {
    case 16: return pack_rows_of<16>(x, N, r_begin, r_end, data, K, NR);
    case 32: return pack_rows_of<32>(x, N, r_begin, r_end, data, K, NR);
    case 64: return pack_rows_of<64>(x, N, r_begin, r_end, data, K, NR);
    default: return pack_rows_of<0>(x, N, r_begin, r_end, data, K, NR);
  }
}

void pack_transposed_panels(const MatrixPart* parts, int n_parts, PackedMatrix& out, int64_t p0, int64_t p1, bool bf16) {
  // out is [Ksum, Kw] with Ksum = sum N_i the reduction and Kw (the parts' K) the columns: panel p
  // holds rows [p NR, (p + 1) NR) of every part, lane = row, one panel row per part column.
  const int64_t NR = out.panel, Ksum = out.K, Kw = out.N;
  constexpr int64_t kBlock = 64;  // part columns per pass, so the panel rows written stay in L1
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r0 = p * NR, lanes = std::min(NR, Kw - r0);
    float* panel = out.data.get() + p * Ksum * NR;
    int64_t row_begin = 0;
    for (int i = 0; i < n_parts; ++i) {
      const int64_t N = parts[i].N;
      for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
        const int64_t j1 = std::min(N, j0 + kBlock);
        for (int64_t lane = 0; lane < lanes; ++lane) {
          const float* src = parts[i].w + (r0 + lane) * N;
          float* dst = panel + (row_begin) * NR + lane;
          for (int64_t j = j0; j < j1; ++j) dst[j * NR] = maybe_round(src[j], bf16);
        }
      }
      row_begin += N;
    }
  }
}

PackedMatrix pack_matrix(const Kernels& kernels, const float* w, int64_t K, int64_t N, int64_t ldw,
                         bool bf16_storage) {
  if (ldw == N) {
    const MatrixPart part{w, N};
    return pack_concat(kernels, &part, 1, K, bf16_storage);
  }
  std::vector<float> dense(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k) std::copy_n(w + k * ldw, N, dense.data() + k * N);
  const MatrixPart part{dense.data(), N};
  return pack_concat(kernels, &part, 1, K, bf16_storage);
}

}  // namespace lockstep::simd
