#include "core/sha256.hpp"

#include <openssl/evp.h>

#include <bit>
#include <cstring>
#include <vector>

#include "lockstep/error.hpp"

namespace lockstep {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1)
    throw Error(ErrorKind::internal, "sha256: OpenSSL could not start a digest");
}

Sha256::~Sha256() {
  if (state_) EVP_MD_CTX_free(state_->ctx);  // null once moved from
}
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    if (state_) EVP_MD_CTX_free(state_->ctx);
    state_ = std::move(other.state_);
  }
  return *this;
}

void Sha256::update(const void* data, size_t size) {
  if (size && EVP_DigestUpdate(state_->ctx, data, size) != 1)
    throw Error(ErrorKind::internal, "sha256: OpenSSL digest update failed");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(state_->ctx, digest, &n) != 1)
    throw Error(ErrorKind::internal, "sha256: OpenSSL digest final failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex();
}

void sha256_update_f32_le(Sha256& h, std::span<const float> values) {
  static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big);
  if constexpr (std::endian::native == std::endian::little) {
    h.update(values.data(), values.size_bytes());
  } else {
    std::vector<unsigned char> chunk;
    chunk.reserve(4096);
    for (float v : values) {
      uint32_t u = std::bit_cast<uint32_t>(v);
      for (int b = 0; b < 4; ++b) chunk.push_back(static_cast<unsigned char>(u >> (8 * b)));
      if (chunk.size() >= 4096) {
        h.update(chunk.data(), chunk.size());
        chunk.clear();
      }
    }
    h.update(chunk.data(), chunk.size());
  }
}

std::string sha256_f32_le(std::span<const float> values) {
  Sha256 h;
  sha256_update_f32_le(h, values);
  return h.hex();
}

}  // namespace lockstep
