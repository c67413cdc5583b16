// libFuzzer target: any bytes as a GGUF file, read as `lockstep import gguf` and the loader of an
// int8dot model (either profile) read it (format/gguf_read.hpp, format/gguf_model.hpp). Either a format Error
// naming the file, or a file whose every promise holds: each tensor's bytes inside the input, no
// two overlapping, and a model whose parameters and block rows have the registry's sizes. A file
// with tokenizer.ggml.model has its vocabulary converted as import gguf converts it
// (interop/gguf_vocab.hpp; for as many ids as it has tokens, so that no model is needed): an
// Error naming the file, or a tokenizer file lockstep's reader loads (the converter loads it).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "format/gguf_model.hpp"
#include "format/gguf_read.hpp"
#include "interop/gguf_vocab.hpp"
#include "lockstep/error.hpp"

namespace {

const std::string kWhat = "fuzz.gguf";

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the GGUF reader broke a promise: %s\n", promise);
  __builtin_trap();
}

void check(const lockstep::format::GgufFile& f, const uint8_t* data, size_t size) {
  std::vector<std::pair<const uint8_t*, uint64_t>> spans;
  for (const auto& t : f.tensors) {
    if (t.data < data || t.bytes > static_cast<uint64_t>(data + size - t.data)) broken("tensor bytes inside the input");
    spans.emplace_back(t.data, t.bytes);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].first + spans[i - 1].second > spans[i].first) broken("tensors do not overlap");
}

}  // namespace

// The vocabulary's conversion refuses with an Error naming the file (format, or unsupported for
// what lockstep does not convert); it never crashes or hangs.
void convert_vocabulary(const lockstep::format::GgufFile& f) {
  const lockstep::format::GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!f.find("tokenizer.ggml.model") || !tokens || tokens->strings.size() > 4096) return;
  try {
    const auto v = lockstep::interop::convert_gguf_vocabulary(f, kWhat, static_cast<int32_t>(tokens->strings.size()));
    if (!v.file.empty() && v.bytes.empty()) broken("a converted vocabulary has a file's bytes");
  } catch (const lockstep::Error& e) {
    if (std::string(e.what()).rfind(kWhat, 0) != 0) broken("a vocabulary's refusal starts with the file");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const lockstep::format::GgufFile f = lockstep::format::parse_gguf({data, size}, kWhat);
    check(f, data, size);
    convert_vocabulary(f);
    // Read as both int8dot profiles read it: the K-quants widened (-1) and kept in blocks (-2).
    for (const bool k_quant_blocks : {false, true}) {
      const lockstep::format::GgufModel m = lockstep::format::read_gguf_llama(f, kWhat, std::nullopt, nullptr, k_quant_blocks);
      const lockstep::ParameterRegistry reg(m.config);
      if (static_cast<int64_t>(m.parameters.size()) != reg.total()) broken("parameters are the registry's");
      for (const auto& [offset, rows] : m.blocks)
        if (static_cast<int64_t>(rows.rows.size()) != rows.N * lockstep::quant::block_row_bytes(rows.type, rows.K))
          broken("block rows hold N rows of K inputs");
    }
  } catch (const lockstep::Error& e) {
    const std::string message = e.what();
    if (e.kind() != lockstep::ErrorKind::format || message.rfind(kWhat + ": ", 0) != 0)
      broken("a refusal is a format error that starts with the file");
  }
  return 0;
}
