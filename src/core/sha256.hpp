// SHA-256 through OpenSSL's EVP interface.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace lockstep {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, size_t size);
  // Lower-case hex of the digest; the object cannot be updated afterwards.
  std::string hex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(const void* data, size_t size);
// SHA-256 of floats as little-endian bytes (the parameters' digest in model.json).
std::string sha256_f32_le(std::span<const float> values);
// Adds floats to `h` as little-endian bytes: over consecutive spans, the digest of their whole.
void sha256_update_f32_le(Sha256& h, std::span<const float> values);

}  // namespace lockstep
