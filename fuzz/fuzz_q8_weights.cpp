// libFuzzer target: any bytes as the q8 weights file (params.safetensors with "weights": "q8",
// docs/FORMAT.md "Packed weights") of one small fixed configuration. read_weights_bytes must
// either refuse them with a format Error naming the file, or, once told the SHA-256 its first
// refusal named, return exactly the expansion the file defines: every matrix element
// float(q) * scale bit for bit, every vector the file's f32 values, all finite.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/sha256.hpp"
#include "format/safetensors.hpp"
#include "format/weights.hpp"
#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

namespace {

const std::string kWhat = "fuzz/params.safetensors";
const std::string kSha = "parameters' SHA-256 is ";

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the q8 weights reader broke a promise: %s\n", promise);
  __builtin_trap();
}

// vocab 8, one layer, grouped-query attention (wk, wv [4, 2]), d_ff 6: every kind of tensor,
// matrices of three shapes, in a file of under 1 KiB.
lockstep::ModelConfig fuzz_config() {
  lockstep::ModelConfig c;
  c.vocab_size = 8;
  c.length = 4;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 6;
  c.batch = 1;
  return c;
}

void check_refusal(const lockstep::Error& e) {
  const std::string message = e.what();
  if (e.kind() != lockstep::ErrorKind::format || message.rfind(kWhat + ": ", 0) != 0)
    broken("a refusal is a format error that starts with the file");
}

// The values the file defines, read independently of the reader: header entries by name.
void check_values(std::span<const uint8_t> bytes, const lockstep::ModelConfig& config,
                  const std::vector<float>& values) {
  using namespace lockstep::format;
  const SafetensorsHeader header = parse_safetensors(bytes, kWhat);
  const lockstep::ParameterRegistry registry(config);
  if (static_cast<int64_t>(values.size()) != registry.total()) broken("one value per parameter");
  auto entry = [&](const std::string& name) -> const TensorEntry& {
    for (const auto& t : header.tensors)
      if (t.name == name) return t;
    broken("every parameter of an accepted file is in it");
  };
  const uint8_t* data = bytes.data() + header.data_offset;
  for (const auto& e : registry.entries()) {
    const TensorEntry& t = entry(e.name);
    for (int64_t i = 0; i < e.count; ++i) {
      float want;
      if (e.shape.size() == 2) {
        const TensorEntry& s = entry(e.name + kQ8ScaleSuffix);
        float scale;
        std::memcpy(&scale, data + s.begin + 4 * static_cast<uint64_t>(i % e.shape[1]), 4);
        want = static_cast<float>(static_cast<int8_t>(data[t.begin + static_cast<uint64_t>(i)])) * scale;
      } else {
        std::memcpy(&want, data + t.begin + 4 * static_cast<uint64_t>(i), 4);
      }
      const float got = values[static_cast<size_t>(e.offset + i)];
      if (!std::isfinite(got)) broken("accepted values are finite");
      if (std::memcmp(&got, &want, 4) != 0) broken("a value is the file's, expanded exactly");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const lockstep::ModelConfig config = fuzz_config();
  const std::span<const uint8_t> bytes(data, size);
  std::string sha;
  try {
    lockstep::format::read_weights_bytes(bytes, kWhat, config, std::string(64, '0'), {}, "q8");
    broken("a SHA-256 of zeros is refused");
  } catch (const lockstep::Error& e) {
    check_refusal(e);
    // A file that passed every other check: its refusal names the SHA-256 of what it expands to.
    // The whole message must be that refusal: other refusals may quote the file's own text, which
    // can hold the same words.
    const std::string message = e.what(), head = kWhat + ": " + kSha;
    if (message.rfind(head, 0) != 0) return 0;
    sha = message.substr(head.size(), 64);
    if (message != head + sha + " but model.json says " + std::string(64, '0')) return 0;
  }
  std::vector<float> values;
  try {
    values = lockstep::format::read_weights_bytes(bytes, kWhat, config, sha, {}, "q8");
  } catch (const lockstep::Error& e) {
    broken("a file whose only fault was its SHA-256 is accepted with the right one");
  }
  if (lockstep::sha256_f32_le(values) != sha) broken("the SHA-256 is the values'");
  check_values(bytes, config, values);
  return 0;
}
