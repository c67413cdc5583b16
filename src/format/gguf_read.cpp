// The GGUF reader (gguf_read.hpp). Layout as gguf.cpp's writer describes it; version 2 is
// version 3 with the same 64-bit counts (version 1's 32-bit counts are refused).
#include "format/gguf_read.hpp"

#include <algorithm>
#include <cstring>

#include "format/format_error.hpp"
#include "format/gguf.hpp"

namespace lockstep::format {
namespace {

using namespace gguf_value;

constexpr uint64_t kMaxString = uint64_t{1} << 24;  // 16 MiB: longer than any key or token
constexpr uint32_t kMaxDims = 4;

// Reads forward through the file, refusing any read past its end.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& what) : bytes_(bytes), what_(what) {}
  uint64_t at() const { return at_; }
  uint64_t left() const { return bytes_.size() - at_; }
  template <typename T>
  T get(const char* field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string string(const std::string& field) {
    const uint64_t n = get<uint64_t>(field.c_str());
    if (n > kMaxString) refuse(what_, field + ": a string of " + std::to_string(n) + " bytes (over 16 MiB)");
    need(n, field.c_str());
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<size_t>(n));
    at_ += n;
    return s;
  }
  void need(uint64_t n, const std::string& field) const {
    if (n > left())
      refuse(what_, "truncated: " + field + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(at_) +
                        ", but the file has " + std::to_string(left()) + " left");
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& what_;
  uint64_t at_ = 0;
};

// Bytes of one scalar of `type` (0 for strings and arrays, which have their own).
uint64_t scalar_bytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

// One scalar into v (number, and u64/i64 for integers).
void read_scalar(Cursor& in, uint32_t type, GgufValue& v, const std::string& key) {
  const char* f = key.c_str();
  switch (type) {
    case kU8: v.u64 = in.get<uint8_t>(f); v.i64 = static_cast<int64_t>(v.u64); v.number = static_cast<double>(v.u64); break;
    case kBool: {
      const uint8_t b = in.get<uint8_t>(f);
      v.u64 = b != 0;
      v.number = b != 0;
      break;
    }
    case kI8: v.i64 = in.get<int8_t>(f); v.number = static_cast<double>(v.i64); break;
    case kU16: v.u64 = in.get<uint16_t>(f); v.i64 = static_cast<int64_t>(v.u64); v.number = static_cast<double>(v.u64); break;
    case kI16: v.i64 = in.get<int16_t>(f); v.number = static_cast<double>(v.i64); break;
    case kU32: v.u64 = in.get<uint32_t>(f); v.i64 = static_cast<int64_t>(v.u64); v.number = static_cast<double>(v.u64); break;
    case kI32: v.i64 = in.get<int32_t>(f); v.number = static_cast<double>(v.i64); break;
    case kF32: v.number = in.get<float>(f); break;
    case kU64: v.u64 = in.get<uint64_t>(f); v.i64 = v.u64 >> 63 ? -1 : static_cast<int64_t>(v.u64); v.number = static_cast<double>(v.u64); break;
    case kI64: v.i64 = in.get<int64_t>(f); v.number = static_cast<double>(v.i64); break;
    case kF64: v.number = in.get<double>(f); break;
    default: break;
  }
  if (type == kI8 || type == kI16 || type == kI32 || type == kI64) v.u64 = v.i64 < 0 ? 0 : static_cast<uint64_t>(v.i64);
}

GgufValue read_value(Cursor& in, const std::string& key, const std::string& what) {
  GgufValue v;
  v.type = in.get<uint32_t>(key.c_str());
  if (v.type == kString) {
    v.text = in.string(key);
  } else if (v.type == kArray) {
    v.array_type = in.get<uint32_t>(key.c_str());
    const uint64_t count = in.get<uint64_t>(key.c_str());
    if (v.array_type == kString) {
      // Each string takes at least its 8-byte length: a count past that cannot be in the file.
      if (count > in.left() / 8) refuse(what, "truncated: array '" + key + "' claims " + std::to_string(count) + " strings");
      v.strings.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) v.strings.push_back(in.string(key));
    } else if (const uint64_t width = scalar_bytes(v.array_type); width != 0) {
      if (count > in.left() / width)
        refuse(what, "truncated: array '" + key + "' claims " + std::to_string(count) + " values");
      v.numbers.reserve(static_cast<size_t>(count));
      GgufValue element;
      for (uint64_t i = 0; i < count; ++i) {
        read_scalar(in, v.array_type, element, key);
        v.numbers.push_back(element.number);
      }
    } else if (v.array_type == kArray) {
      refuse(what, "key '" + key + "' is an array of arrays, which lockstep does not read");
    } else {
      refuse(what, "key '" + key + "' is an array of value type " + std::to_string(v.array_type) +
                       ", which GGUF does not define");
    }
  } else if (scalar_bytes(v.type) != 0) {
    read_scalar(in, v.type, v, key);
  } else {
    refuse(what, "key '" + key + "' has value type " + std::to_string(v.type) + ", which GGUF does not define");
  }
  return v;
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  static const char* const names[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "type 4", "type 5", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (type < sizeof(names) / sizeof(names[0])) return names[type];
  if (type == 34) return "TQ1_0";
  if (type == 35) return "TQ2_0";
  return "type " + std::to_string(type);
}

std::optional<std::pair<uint64_t, uint64_t>> ggml_block_size(uint32_t type) {
  switch (type) {
    case 0: return std::pair<uint64_t, uint64_t>{1, 4};    // F32
    case 1: return std::pair<uint64_t, uint64_t>{1, 2};    // F16
    case 30: return std::pair<uint64_t, uint64_t>{1, 2};   // BF16
    case 2: return std::pair<uint64_t, uint64_t>{32, 18};  // Q4_0
    case 6: return std::pair<uint64_t, uint64_t>{32, 22};  // Q5_0
    case 8: return std::pair<uint64_t, uint64_t>{32, 34};  // Q8_0
    case 12: return std::pair<uint64_t, uint64_t>{256, 144};  // Q4_K
    case 13: return std::pair<uint64_t, uint64_t>{256, 176};  // Q5_K
    case 14: return std::pair<uint64_t, uint64_t>{256, 210};  // Q6_K
    default: return std::nullopt;
  }
}

GgufFile parse_gguf(std::span<const uint8_t> bytes, const std::string& what) {
  Cursor in(bytes, what);
  in.need(4, "the magic");
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) refuse(what, "not a GGUF file (it does not start with 'GGUF')");
  (void)in.get<uint32_t>("the magic");
  GgufFile file;
  file.version = in.get<uint32_t>("the version");
  if (file.version != 2 && file.version != 3)
    refuse(what, "GGUF version " + std::to_string(file.version) + " is not supported (lockstep reads 2 and 3)");
  const uint64_t n_tensors = in.get<uint64_t>("the tensor count");
  const uint64_t n_values = in.get<uint64_t>("the key-value count");
  // A pair takes at least 12 bytes (an empty key's length and a type), a tensor info 24.
  if (n_values > in.left() / 12) refuse(what, "truncated: the file claims " + std::to_string(n_values) + " key-value pairs");
  if (n_tensors > in.left() / 24) refuse(what, "truncated: the file claims " + std::to_string(n_tensors) + " tensors");
  for (uint64_t i = 0; i < n_values; ++i) {
    std::string key = in.string("key " + std::to_string(i));
    GgufValue v = read_value(in, key, what);
    if (!file.values.emplace(key, std::move(v)).second) refuse(what, "key '" + key + "' appears twice");
  }
  if (const GgufValue* a = file.find("general.alignment")) {
    if (a->type != kU32 || a->u64 == 0 || (a->u64 & (a->u64 - 1)) != 0 || a->u64 > 65536)
      refuse(what, "general.alignment is not a u32 power of two up to 65536");
    file.alignment = static_cast<uint32_t>(a->u64);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = in.string("tensor name " + std::to_string(i));
    if (t.name.empty()) refuse(what, "tensor " + std::to_string(i) + " has an empty name");
    for (const GgufTensor& other : file.tensors)
      if (other.name == t.name) refuse(what, "tensor '" + t.name + "' appears twice");
    const uint32_t dims = in.get<uint32_t>(t.name.c_str());
    if (dims == 0 || dims > kMaxDims)
      refuse(what, "tensor '" + t.name + "' has " + std::to_string(dims) + " dimensions (1 to 4)");
    for (uint32_t d = 0; d < dims; ++d) t.ne.push_back(in.get<uint64_t>(t.name.c_str()));
    t.type = in.get<uint32_t>(t.name.c_str());
    t.offset = in.get<uint64_t>(t.name.c_str());
    const auto block = ggml_block_size(t.type);
    if (!block)
      refuse(what, "tensor '" + t.name + "' is of type " + ggml_type_name(t.type) +
                       ", which lockstep does not read (it reads F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K)");
    if (t.ne[0] % block->first != 0)
      refuse(what, "tensor '" + t.name + "' has rows of " + std::to_string(t.ne[0]) + " values, not a whole number of " +
                       ggml_type_name(t.type) + " blocks of " + std::to_string(block->first));
    unsigned __int128 size = t.ne[0] / block->first * block->second;
    for (uint32_t d = 1; d < dims; ++d) {
      size *= t.ne[d];
      if (size > bytes.size()) break;
    }
    if (size > bytes.size())
      refuse(what, "tensor '" + t.name + "' needs more bytes than the " + std::to_string(bytes.size()) + "-byte file holds");
    t.bytes = static_cast<uint64_t>(size);
    if (t.offset % file.alignment != 0)
      refuse(what, "tensor '" + t.name + "' starts at offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
                       std::to_string(file.alignment));
    file.tensors.push_back(std::move(t));
  }
  file.data_offset = (in.at() + file.alignment - 1) / file.alignment * file.alignment;
  const uint64_t data_size = file.data_offset <= bytes.size() ? bytes.size() - file.data_offset : 0;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : file.tensors) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      refuse(what, "tensor '" + t.name + "' (bytes " + std::to_string(t.offset) + " to " +
                       std::to_string(t.offset + t.bytes) + " of the data section) runs past the end of the file (" +
                       std::to_string(data_size) + " bytes of data)");
    t.data = bytes.data() + file.data_offset + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      refuse(what, "tensor '" + by_offset[i]->name + "' overlaps tensor '" + by_offset[i - 1]->name + "'");
  return file;
}

}  // namespace lockstep::format
