// The GGUF writer (gguf.hpp). Layout, all little-endian:
//   "GGUF", u32 version 3, u64 tensor count, u64 key-value count,
//   key-value pairs: string key, u32 value type, value (arrays: u32 element type, u64 count, elements),
//   tensor infos: string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset,
//   zero padding to the alignment, then each tensor's data at its offset (a multiple of the
//   alignment, from the start of the data section), zero padding between tensors.
// Strings are a u64 byte length and the bytes (UTF-8, no terminator).
#include "format/gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/atomic_write.hpp"
#include "lockstep/error.hpp"

namespace lockstep::format {
namespace {

using namespace gguf_value;

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

uint64_t type_row_bytes(GgmlType type, uint64_t ne0) {
  switch (type) {
    case GgmlType::f32: return ne0 * 4;
    case GgmlType::f16: return ne0 * 2;
    case GgmlType::q8_0: return ne0 / kQ8Block * kQ8BlockBytes;
    case GgmlType::q4_0: return ne0 / 32 * 18;
    case GgmlType::q5_0: return ne0 / 32 * 22;
    case GgmlType::q4_k: return ne0 / 256 * 144;
    case GgmlType::q5_k: return ne0 / 256 * 176;
    case GgmlType::q6_k: return ne0 / 256 * 210;
  }
  return 0;
}

}  // namespace

uint16_t f16_bits_from_f32(float value) {
  uint32_t x = 0;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (abs >= 0x38800000u) {  // a normal f16 (>= 2^-14): drop 13 mantissa bits, ties to even
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  // A subnormal f16: the value in units of 2^-24, rounded to nearest, ties to even.
  const uint32_t e = abs >> 23;
  if (e == 0) return static_cast<uint16_t>(sign);  // f32 subnormals are far below 2^-25
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // value = mant * 2^(e - 150)
  const uint32_t shift = 126u - e;                      // units of 2^-24: mant >> shift
  if (shift >= 25) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

void append_q8_0_row(std::span<const float> row, std::vector<uint8_t>& out, const std::string& what) {
  if (row.size() % kQ8Block != 0)
    throw Error(ErrorKind::internal, what + ": a q8_0 row of " + std::to_string(row.size()) + " values");
  for (size_t b = 0; b < row.size(); b += kQ8Block) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(row[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f16_bits_from_f32(d);
    if ((d16 & 0x7c00u) == 0x7c00u)
      throw Error(ErrorKind::invalid_argument,
                  what + ": the q8_0 scale of the block at element " + std::to_string(b) + " (" +
                      std::to_string(d) + ") is past f16's range; export with --type f32");
    out.push_back(static_cast<uint8_t>(d16 & 0xff));
    out.push_back(static_cast<uint8_t>(d16 >> 8));
    for (int j = 0; j < kQ8Block; ++j) {
      const float scaled = row[b + j] * id;  // |scaled| <= 127 (plus rounding), so the cast is safe
      const float q = std::round(scaled);    // half away from zero, as C's roundf
      out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f))));
    }
  }
}

void GgufWriter::add_u32(std::string_view key, uint32_t value) {
  put_string(kv_, key), put<uint32_t>(kv_, kU32), put<uint32_t>(kv_, value), ++kv_count_;
}
void GgufWriter::add_i32(std::string_view key, int32_t value) {
  put_string(kv_, key), put<uint32_t>(kv_, kI32), put<int32_t>(kv_, value), ++kv_count_;
}
void GgufWriter::add_f32(std::string_view key, float value) {
  put_string(kv_, key), put<uint32_t>(kv_, kF32), put<float>(kv_, value), ++kv_count_;
}
void GgufWriter::add_bool(std::string_view key, bool value) {
  put_string(kv_, key), put<uint32_t>(kv_, kBool), put<uint8_t>(kv_, value ? 1 : 0), ++kv_count_;
}
void GgufWriter::add_string(std::string_view key, std::string_view value) {
  put_string(kv_, key), put<uint32_t>(kv_, kString), put_string(kv_, value), ++kv_count_;
}
void GgufWriter::add_string_array(std::string_view key, std::span<const std::string> values) {
  put_string(kv_, key), put<uint32_t>(kv_, kArray), put<uint32_t>(kv_, kString), put<uint64_t>(kv_, values.size());
  for (const std::string& v : values) put_string(kv_, v);
  ++kv_count_;
}
void GgufWriter::add_i32_array(std::string_view key, std::span<const int32_t> values) {
  put_string(kv_, key), put<uint32_t>(kv_, kArray), put<uint32_t>(kv_, kI32), put<uint64_t>(kv_, values.size());
  for (int32_t v : values) put<int32_t>(kv_, v);
  ++kv_count_;
}
void GgufWriter::add_f32_array(std::string_view key, std::span<const float> values) {
  put_string(kv_, key), put<uint32_t>(kv_, kArray), put<uint32_t>(kv_, kF32), put<uint64_t>(kv_, values.size());
  for (float v : values) put<float>(kv_, v);
  ++kv_count_;
}

void GgufWriter::add_tensor(std::string_view name, std::vector<uint64_t> ne, GgmlType type, std::vector<uint8_t> data) {
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  if (ne.empty() || data.size() != rows * type_row_bytes(type, ne[0]))
    throw Error(ErrorKind::internal, "gguf tensor '" + std::string(name) + "' has " + std::to_string(data.size()) +
                                         " bytes, not what its shape and type need");
  tensors_.push_back({std::string(name), std::move(ne), type, std::move(data)});
}

uint64_t GgufWriter::write(const std::string& path) const {
  std::string head;
  head.append("GGUF", 4);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head.append(kv_);
  uint64_t offset = 0;  // into the data section
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) put<uint64_t>(head, n);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = align_up(offset + t.data.size(), alignment_);
  }
  head.resize(align_up(head.size(), alignment_), '\0');

  AtomicFile file(path);
  file.write(head);
  uint64_t written = head.size(), at = 0;
  const std::string zeros(alignment_, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    file.write(zeros.data(), offsets[i] - at);
    file.write(tensors_[i].data.data(), tensors_[i].data.size());
    at = offsets[i] + tensors_[i].data.size();
  }
  file.write(zeros.data(), offset - at);  // the file ends aligned, as ggml's writer leaves it
  written += offset;
  file.commit();
  return written;
}

void add_llama_config(GgufWriter& w, const ModelConfig& c, const std::string& arch) {
  const std::string a = arch + ".";
  w.add_u32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.add_u32(a + "context_length", static_cast<uint32_t>(c.length));
  w.add_u32(a + "embedding_length", static_cast<uint32_t>(c.d_model));
  w.add_u32(a + "block_count", static_cast<uint32_t>(c.n_layers));
  w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(c.d_ff));
  w.add_u32(a + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
  w.add_f32(a + "rope.freq_base", c.rope_theta);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
}

}  // namespace lockstep::format
