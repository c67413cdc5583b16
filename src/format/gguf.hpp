// GGUF files (version 3), the format llama.cpp and the tools around it read: a header, typed
// key-value pairs, tensor infos, then every tensor's data aligned. Lockstep only writes them
// (docs/FORMAT.md, "GGUF export"); this is the generic writer and the two conversions it offers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/half.hpp"
#include "lockstep/config.hpp"

namespace lockstep::format {

// GGUF's metadata value types, with the format's numbers (the writer uses the first ten).
namespace gguf_value {
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};
}  // namespace gguf_value

// ggml's tensor types that lockstep writes, with ggml's numbers.
// Q4_0, Q5_0 and the K-quants are written only as an int8dot model's blocks, as they were read.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q5_0 = 6, q8_0 = 8, q4_k = 12, q5_k = 13, q6_k = 14 };

// ggml's Q8_0 block: 32 values share one f16 scale `d`; 34 bytes (d, then 32 int8).
inline constexpr int kQ8Block = 32;
inline constexpr int kQ8BlockBytes = 34;
// Packs one row of n values (n a multiple of 32) as ggml's reference quantizer defines the
// format: per block, amax = max |x|, d = amax / 127 (f32), id = d != 0 ? 1 / d : 0, stored
// scale f16(d), q[j] = round-half-away-from-zero(x[j] * id). Appends n / 32 * 34 bytes.
// Throws Error(invalid_argument) naming `what` when a scale overflows f16.
void append_q8_0_row(std::span<const float> row, std::vector<uint8_t>& out, const std::string& what);

// A GGUF file built in memory and written atomically. Keys keep the order they are added in;
// tensors too, each at the next offset aligned to `alignment`.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  void add_u32(std::string_view key, uint32_t value);
  void add_i32(std::string_view key, int32_t value);
  void add_f32(std::string_view key, float value);
  void add_bool(std::string_view key, bool value);
  void add_string(std::string_view key, std::string_view value);
  void add_string_array(std::string_view key, std::span<const std::string> values);
  void add_i32_array(std::string_view key, std::span<const int32_t> values);
  void add_f32_array(std::string_view key, std::span<const float> values);

  // `ne` in ggml's order: ne[0] is the contiguous dimension. `data` holds the tensor's bytes in
  // `type`'s layout.
  void add_tensor(std::string_view name, std::vector<uint64_t> ne, GgmlType type, std::vector<uint8_t> data);

  // Writes the file under a temporary name beside `path` and renames it into place (replacing
  // a file there). Returns the bytes written.
  uint64_t write(const std::string& path) const;

  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    GgmlType type;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_;
  uint64_t kv_count_ = 0;
  std::string kv_;  // the key-value section's bytes
  std::vector<Tensor> tensors_;
};

// The `<arch>.*` keys of a configuration (`llama.*`, or `qwen2.*`), in this order: vocab_size,
// context_length (the window), embedding_length, block_count, feed_forward_length,
// attention.head_count, head_count_kv, rope.dimension_count (u32), rope.freq_base,
// attention.layer_norm_rms_epsilon (f32).
void add_llama_config(GgufWriter& w, const ModelConfig& config, const std::string& arch = "llama");

}  // namespace lockstep::format
