// libFuzzer target: any bytes as a Hugging Face tokenizer.json (text/hf_tokenizer.cpp). The reader
// must either refuse them with a format Error naming the file, or give a tokenizer that encodes a
// few texts into ids it holds and decodes any ids into valid UTF-8, without a crash or a leak.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/error.hpp"
#include "text/hf.hpp"
#include "text/tokenizer_impl.hpp"

namespace {

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the tokenizer.json reader broke a promise: %s\n", promise);
  __builtin_trap();
}

const std::string kWhat = "fuzz/tokenizer.json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<lockstep::Tokenizer::Impl> t;
  try {
    t = lockstep::text::load_hf_tokenizer(bytes, kWhat);
  } catch (const lockstep::Error& e) {
    if (e.kind() != lockstep::ErrorKind::format) broken("a refusal that is not a format error");
    if (std::string(e.what()).rfind(kWhat, 0) != 0) broken("a refusal that does not name the file");
    return 0;
  }
  for (const char* text : {"", "hello world 123", "<|endoftext|> it's\n\n  e\xCC\x81 \xE6\x88\x91 \xF0\x9F\x98\x80"}) {
    std::vector<int32_t> ids;
    try {
      ids = t->encode(text, true);
    } catch (const lockstep::Error&) {
      continue;  // a regex past Oniguruma's limits: refused, not cut
    }
    for (int32_t id : ids)
      if (id < 0 || id >= t->size()) broken("an id outside the tokenizer");
    if (!lockstep::text::hf::valid_utf8(t->decode(ids))) broken("a decoding that is not UTF-8");
  }
  std::vector<int32_t> any;
  for (size_t i = 0; i + 1 < size && i < 64; i += 2) any.push_back((data[i] << 8 | data[i + 1]) % (t->size() + 1));
  if (!lockstep::text::hf::valid_utf8(t->decode(any))) broken("a decoding that is not UTF-8");
  return 0;
}
