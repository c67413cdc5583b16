// libFuzzer target: any bytes as a safetensors file. parse_safetensors must either refuse them
// with a format Error naming the file, or return a header whose every promise holds: tensors in
// data order, contiguous from 0 to the end of the file, each span equal to its shape x width.
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

#include "format/safetensors.hpp"
#include "lockstep/error.hpp"

namespace {

const std::string kWhat = "fuzz.safetensors";

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "parse_safetensors broke a promise: %s\n", promise);
  __builtin_trap();
}

void check(const lockstep::format::SafetensorsHeader& h, size_t size) {
  using lockstep::format::dtype_width;
  if (h.data_offset < 8 || h.data_offset > size || h.data_offset + h.data_size != size)
    broken("the data section is the rest of the file");
  uint64_t cursor = 0;
  std::set<std::string> names;
  for (const auto& t : h.tensors) {
    if (t.name.empty() || !names.insert(t.name).second) broken("names are unique and not empty");
    if (t.begin != cursor || t.end < t.begin) broken("tensors are contiguous, in data order");
    unsigned __int128 bytes = static_cast<unsigned>(dtype_width(t.dtype));
    for (const int64_t d : t.shape) {
      if (d < 0) broken("shape entries are non-negative");
      bytes *= static_cast<uint64_t>(d);
      if (bytes >> 64) broken("a span fits in 64 bits");
    }
    if (bytes != t.end - t.begin) broken("shape x width equals the span");
    cursor = t.end;
  }
  if (cursor != h.data_size) broken("the tensors fill the data section");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check(lockstep::format::parse_safetensors({data, size}, kWhat), size);
  } catch (const lockstep::Error& e) {
    const std::string message = e.what();
    if (e.kind() != lockstep::ErrorKind::format || message.rfind(kWhat + ": ", 0) != 0)
      broken("a refusal is a format error that starts with the file");
  }
  return 0;
}
