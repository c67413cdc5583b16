#include "format/format_error.hpp"
#include "format/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "lockstep/error.hpp"

namespace lockstep::format {
namespace {

using nlohmann::json;

struct DTypeName {
  DType dtype;
  const char* name;
  int width;
};
constexpr DTypeName kDTypes[] = {
    {DType::boolean, "BOOL", 1}, {DType::u8, "U8", 1},    {DType::i8, "I8", 1},
    {DType::i16, "I16", 2},      {DType::u16, "U16", 2},  {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},    {DType::i32, "I32", 4},  {DType::u32, "U32", 4},
    {DType::f32, "F32", 4},      {DType::f64, "F64", 8},  {DType::i64, "I64", 8},
    {DType::u64, "U64", 8},
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

TensorEntry parse_entry(const std::string& what, const std::string& name, const json& v) {
  const std::string where = "tensor " + quote_name(name);
  if (!v.is_object()) refuse(what, where + " is not a JSON object");
  for (const auto& [key, _] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      refuse(what, where + " has an unknown field " + quote_name(key));
  }
  TensorEntry e;
  e.name = name;
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) refuse(what, where + " has no dtype string");
  const auto parsed = parse_dtype(dt->get<std::string>());
  if (!parsed) refuse(what, where + " has an unknown dtype " + quote_name(dt->get<std::string>()));
  e.dtype = *parsed;
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array()) refuse(what, where + " has no shape list");
  if (shape->size() > 8) refuse(what, where + " has " + std::to_string(shape->size()) + " dimensions");
  // Bound the byte count, not only the element count: elements x width must not wrap, or a
  // huge shape could match a small span.
  const uint64_t width = static_cast<uint64_t>(dtype_width(e.dtype));
  const uint64_t max_elements = (uint64_t{1} << 62) / width;
  uint64_t elements = 1;
  for (const auto& d : *shape) {
    const auto n = as_count(d);
    if (!n) refuse(what, where + " has a shape entry that is not a non-negative integer");
    if (*n > max_elements || (*n != 0 && elements > max_elements / *n))
      refuse(what, where + " has a shape too large to address");
    elements *= *n;
    e.shape.push_back(static_cast<int64_t>(*n));
  }
  const auto offs = v.find("data_offsets");
  if (offs == v.end() || !offs->is_array() || offs->size() != 2)
    refuse(what, where + " has no data_offsets pair");
  const auto b = as_count((*offs)[0]), en = as_count((*offs)[1]);
  if (!b || !en) refuse(what, where + " has data_offsets that are not non-negative integers");
  if (*b > *en) refuse(what, where + " has data_offsets that end before they begin");
  e.begin = *b;
  e.end = *en;
  const uint64_t bytes = elements * width;
  if (bytes != e.end - e.begin)
    refuse(what, where + ": shape x dtype width is " + std::to_string(bytes) +
                     " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

const char* dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

int dtype_width(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.width;
  return 0;
}

SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, const std::string& what) {
  if (file.size() < 8)
    refuse(what, "truncated: " + std::to_string(file.size()) +
                     " bytes, fewer than the 8-byte header length");
  const uint64_t header_len = read_u64_le(file.data());
  if (header_len > kMaxHeaderBytes)
    refuse(what, "header length " + std::to_string(header_len) + " is over the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > file.size() - 8)
    refuse(what, "header length " + std::to_string(header_len) + " runs past the end of the " +
                     std::to_string(file.size()) + "-byte file");
  if (header_len < 2) refuse(what, "header of " + std::to_string(header_len) + " bytes is not a JSON object");
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  if (text[0] != '{') refuse(what, "header does not start with a JSON object");

  // Names must be unique: nlohmann keeps the last of duplicate keys, so watch for them.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t watch = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  check_json_depth(std::string_view(text, header_len), what + ": header");
  json header;
  try {
    header = json::parse(text, text + header_len, watch);
  } catch (const json::exception& e) {
    refuse(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) refuse(what, "tensor name " + quote_name(duplicate) + " appears twice");
  if (!header.is_object()) refuse(what, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  out.data_size = file.size() - out.data_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) refuse(what, "__metadata__ is not a JSON object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) refuse(what, "__metadata__ value " + quote_name(k) + " is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (name.empty()) refuse(what, "a tensor has an empty name");
    out.tensors.push_back(parse_entry(what, name, value));
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const auto& t : out.tensors) {
    if (t.end > out.data_size)
      refuse(what, "tensor " + quote_name(t.name) + " ends at byte " + std::to_string(t.end) +
                       ", past the " + std::to_string(out.data_size) + "-byte data section");
    if (t.begin < cursor)
      refuse(what, "tensor " + quote_name(t.name) + " overlaps the tensor before it (begins at " +
                       std::to_string(t.begin) + ", before " + std::to_string(cursor) + ")");
    if (t.begin > cursor)
      refuse(what, "gap of " + std::to_string(t.begin - cursor) + " bytes before tensor " +
                       quote_name(t.name) + " at byte " + std::to_string(cursor));
    cursor = t.end;
  }
  if (cursor != out.data_size)
    refuse(what, std::to_string(out.data_size - cursor) +
                     " bytes after the last tensor belong to none");
  return out;
}

void write_safetensors(const std::string& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    const uint64_t bytes = elements * static_cast<uint64_t>(dtype_width(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so that the data begins 64-byte aligned.
  while ((8 + text.size()) % 64 != 0) text.push_back(' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  FileWriter w(path);
  w.write(len, 8);
  w.write(text);
  for (const auto& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    w.write(t.data, elements * static_cast<uint64_t>(dtype_width(t.dtype)));
  }
  w.finish();
}

}  // namespace lockstep::format
