// Safetensors files: an 8-byte little-endian header length N, N bytes of JSON naming each tensor's
// dtype, shape and [begin, end) byte offsets into the data that follows, then the data. Lockstep
// writes standard files that other tools read, and validates every file before it uses a byte.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace lockstep::format {

enum class DType { boolean, u8, i8, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64 };

// "F32", "BF16", ... as safetensors spells them; nullopt for a name it does not define.
std::optional<DType> parse_dtype(std::string_view name);
const char* dtype_name(DType dtype);
int dtype_width(DType dtype);

// The most header bytes lockstep reads: far above any real model's header, small enough that a
// corrupt length cannot make it allocate gigabytes.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;

struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in data order (by begin offset)
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
  uint64_t data_size = 0;
};

// Checks the structure of a whole file held in memory and returns its header: the length
// against the file size and kMaxHeaderBytes, well-formed JSON, known dtypes, shape x width equal
// to each byte span, offsets in bounds with no overlap and no gap, names unique. Each refusal is
// an Error(format) starting with `what` (the file's path) and naming the problem.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, const std::string& what);

struct TensorData {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // little-endian, row-major, shape x width bytes
};

// Writes a standard safetensors file at `path` (created new; the caller picks a temporary name),
// tensors in the order given, the header padded with spaces so the data starts 64-byte aligned.
void write_safetensors(const std::string& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace lockstep::format
