// A GGUF writer of the tests' own, from the specification (ggml's docs/gguf.md: little-endian
// header "GGUF", version, tensor and key-value counts; typed key-value pairs; tensor infos of
// name, dimensions, ne, type and offset; the data aligned to 32), so that the reader is tested
// against files it did not write itself, bad ones included.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "format/gguf_read.hpp"

namespace lockstep::test {

// ggml's type numbers.
enum : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14 };

template <typename T>
inline void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
inline void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

struct TestTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  std::string data;
};

struct TestGguf {
  uint32_t version = 3;
  std::string kv;
  uint64_t n_kv = 0;
  std::vector<TestTensor> tensors;
  std::map<std::string, uint64_t> offset_override;  // a tensor's offset, as a bad file states it

  void u32(const std::string& key, uint32_t v) { put_str(kv, key), put<uint32_t>(kv, 4), put(kv, v), ++n_kv; }
  void f32(const std::string& key, float v) { put_str(kv, key), put<uint32_t>(kv, 6), put(kv, v), ++n_kv; }
  void str(const std::string& key, const std::string& v) { put_str(kv, key), put<uint32_t>(kv, 8), put_str(kv, v), ++n_kv; }
  template <typename T>
  void numbers(const std::string& key, uint32_t type, const std::vector<T>& v) {
    put_str(kv, key), put<uint32_t>(kv, 9), put<uint32_t>(kv, type), put<uint64_t>(kv, v.size());
    for (T x : v) put(kv, x);
    ++n_kv;
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    put_str(kv, key), put<uint32_t>(kv, 9), put<uint32_t>(kv, 8), put<uint64_t>(kv, v.size());
    for (const std::string& s : v) put_str(kv, s);
    ++n_kv;
  }
  std::string bytes() const {
    std::string out = "GGUF";
    put(out, version);
    put<uint64_t>(out, tensors.size());
    put<uint64_t>(out, n_kv);
    out += kv;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const TestTensor& t : tensors) {
      put_str(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) put(out, n);
      put(out, t.type);
      const auto o = offset_override.find(t.name);
      put<uint64_t>(out, o != offset_override.end() ? o->second : offset);
      offsets.push_back(offset);
      offset = (offset + t.data.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, '\0');
    const size_t data = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.resize(data + offsets[i], '\0');
      out += tensors[i].data;
    }
    return out;
  }
};

// `bytes` read as a GGUF file (named `what`), after checking that it holds each of `tensors` with
// its name, ne, type and data byte for byte (what export-gguf must give back of an imported file).
inline format::GgufFile expect_holds_tensors(const std::string& bytes, const std::vector<TestTensor>& tensors,
                                             const std::string& what) {
  format::GgufFile f =
      format::parse_gguf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), what);
  for (const TestTensor& t : tensors) {
    const auto it = std::find_if(f.tensors.begin(), f.tensors.end(), [&](const format::GgufTensor& g) { return g.name == t.name; });
    if (it == f.tensors.end()) {
      ADD_FAILURE() << what << " has no tensor " << t.name;
      continue;
    }
    EXPECT_EQ(it->type, t.type) << t.name;
    EXPECT_EQ(it->ne, t.ne) << t.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(it->data), it->bytes), t.data) << t.name;
  }
  return f;
}

}  // namespace lockstep::test
