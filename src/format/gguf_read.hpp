// Reading GGUF files (versions 2 and 3; the writer is format/gguf.hpp): the header, the typed
// key-value pairs and the tensor infos, every length, count, shape and offset checked against the
// file's size before anything is read or allocated by it, and every tensor's bytes located
// inside the data section without overlap. Outside data: fuzzed (fuzz/fuzz_gguf.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace lockstep::format {

// One metadata value. Scalars keep their GGUF type; arrays hold numbers or strings (an array of
// arrays is refused: no key lockstep reads has one).
struct GgufValue {
  uint32_t type = 0;        // GGUF value type: 0 u8 ... 8 string, 9 array, 10 u64, 11 i64, 12 f64
  uint32_t array_type = 0;  // for arrays: the elements' type
  double number = 0;        // a numeric or bool scalar, as a double (u64/i64 past 2^53 rounded)
  uint64_t u64 = 0;         // an unsigned integer scalar exactly (u8, u16, u32, u64; bool 0/1)
  int64_t i64 = 0;          // a signed integer scalar exactly
  std::string text;                  // a string
  std::vector<double> numbers;       // an array of numbers or bools
  std::vector<std::string> strings;  // an array of strings
  bool is_integer() const { return type <= 5 || type == 10 || type == 11; }
  bool is_array() const { return type == 9; }
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order: ne[0] contiguous
  uint32_t type = 0;         // ggml type number
  uint64_t offset = 0;       // from the data section's start
  uint64_t bytes = 0;        // its data's size
  const uint8_t* data = nullptr;  // inside the bytes given to parse_gguf
};

struct GgufFile {
  uint32_t version = 0;
  uint32_t alignment = 32;
  std::map<std::string, GgufValue> values;
  std::vector<GgufTensor> tensors;  // in the file's order
  uint64_t data_offset = 0;         // where the data section starts
  const GgufValue* find(const std::string& key) const {
    const auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  }
};

// ggml's name of tensor type `type` ("F32", "Q4_K", ...), or "type N" for a number ggml does not
// define.
std::string ggml_type_name(uint32_t type);
// Elements per block and bytes per block of the types lockstep reads (F32, F16, BF16, Q8_0,
// Q4_0, Q5_0); nullopt for any other.
std::optional<std::pair<uint64_t, uint64_t>> ggml_block_size(uint32_t type);

// Parses `bytes` (the whole file; tensor data pointers point into it). Each refusal is an
// Error(format) starting with `what` and naming the problem: a bad magic or version, a length or
// count past the end of the file, a key twice, a value type GGUF does not define, a tensor of a
// type lockstep does not read (naming the tensor and the type), a shape ne[0] not a whole number
// of blocks, a tensor whose offset is not aligned, that runs past the end of the file or that
// overlaps another.
GgufFile parse_gguf(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace lockstep::format
