// Embedding a model with the C++ API: load a model, feed it a prompt, print the greedy
// continuation. examples/embed_c does the same with the C API and prints the same bytes.
//
//   embed_cpp MODEL [PROMPT] [N]
//
// MODEL is a model directory, a checkpoint step directory, a checkpoint location or a model.json
// path; PROMPT defaults to "Hello", N (the bytes to generate) to 32.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/model.hpp"

namespace {

// Printable ASCII as itself, every other byte (and `"`, `\`) as \xHH.
std::string escaped(const std::vector<int32_t>& bytes) {
  std::string out;
  for (int32_t b : bytes) {
    if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
      out += static_cast<char>(b);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(b) & 0xffu);
      out += hex;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "Hello";
  const long n = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 32;
  if (prompt.empty() || n < 1 || n > 1000000) {
    std::fprintf(stderr, "embed_cpp: PROMPT must not be empty and N must be in [1, 1000000]\n");
    return 2;
  }
  try {
    // A loaded model is immutable: it could be shared by every thread of a server.
    const std::shared_ptr<const lockstep::Model> model = lockstep::Model::load(argv[1]);
    const int64_t window = model->config().length;

    std::vector<int32_t> text;  // the prompt's bytes, then each byte chosen
    for (unsigned char c : prompt) text.push_back(c);
    std::vector<int32_t> continuation;
    for (long i = 0; i < n; ++i) {
      // One row [1, T]: the newest `window` bytes of the text.
      const int64_t t = std::min<int64_t>(static_cast<int64_t>(text.size()), window);
      const lockstep::IdsView row{text.data() + text.size() - t, 1, t};
      const int32_t next = model->next_bytes(row)[0];
      text.push_back(next);
      continuation.push_back(next);
    }

    std::printf("parameters sha256 %s\n", model->parameters_sha256().c_str());
    std::printf("prompt \"%s\"\n", escaped({text.begin(), text.end() - n}).c_str());
    std::printf("bytes");
    for (int32_t b : continuation) std::printf(" %d", b);
    std::printf("\ntext \"%s\"\n", escaped(continuation).c_str());
    return 0;
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "embed_cpp: %s\n", e.what());
    return 1;
  }
}
