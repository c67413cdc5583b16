// The API key and the Host and Origin checks (http_guard.hpp).
#include "serve/http_guard.hpp"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace lockstep::serve {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x + 32 : x) == (y >= 'A' && y <= 'Z' ? y + 32 : y);
         });
}

std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(std::string_view bytes) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return digest;
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return out;
}

// A host's name without its port: "name:port" -> "name", "[v6]:port" -> "v6"; "" when the port
// is not digits or the brackets do not close (not a Host a client sends).
std::string host_name_of(std::string_view host) {
  std::string_view name = host, port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return {};
    name = host.substr(1, close - 1);
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return {};
    if (!rest.empty()) port = rest.substr(1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (name.find(':') != std::string_view::npos) return {};  // an IPv6 address must be bracketed
  }
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) || port.size() > 5) return {};
  return lowercase(name);
}

// The address `name` spells (a dotted IPv4 or an IPv6 address), as 16 bytes (IPv4 mapped), or
// false when it is a name.
bool parse_address(const std::string& name, std::array<unsigned char, 16>& address) {
  address.fill(0);
  in_addr v4{};
  if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    address[10] = address[11] = 0xff;
    std::memcpy(address.data() + 12, &v4, 4);
    return true;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    std::memcpy(address.data(), &v6, 16);
    return true;
  }
  return false;
}

bool loopback(const std::array<unsigned char, 16>& a) {
  static constexpr std::array<unsigned char, 12> mapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(mapped.begin(), mapped.end(), a.begin())) return a[12] == 127;  // 127.0.0.0/8
  return std::all_of(a.begin(), a.end() - 1, [](unsigned char b) { return b == 0; }) && a[15] == 1;  // ::1
}

}  // namespace

bool bearer_matches(std::string_view value, std::string_view key) {
  constexpr std::string_view scheme = "bearer ";
  const bool scheme_ok = value.size() >= scheme.size() && iequals(value.substr(0, scheme.size()), scheme);
  const std::string_view given = scheme_ok ? value.substr(scheme.size()) : value;
  // Digests of equal length whatever the lengths: no early return tells the key's length.
  const auto a = sha256(given), b = sha256(key);
  const bool same = CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
  return scheme_ok && same && !key.empty();
}

bool host_allowed(std::string_view host, const HostRules& rules) {
  if (std::find(rules.allowed.begin(), rules.allowed.end(), "*") != rules.allowed.end()) return true;
  const std::string name = host_name_of(host);
  if (name.empty()) return false;
  if (name == "localhost") return true;
  if (std::find(rules.allowed.begin(), rules.allowed.end(), name) != rules.allowed.end()) return true;
  std::array<unsigned char, 16> address{};
  if (!parse_address(name, address)) return false;
  if (loopback(address) || rules.any_address) return true;
  for (const std::string& bound : rules.listening) {
    std::array<unsigned char, 16> other{};
    if (parse_address(bound, other) && other == address) return true;
  }
  return false;
}

std::string cross_site_reason(const RequestSite& site, const std::vector<std::string>& cors_origins) {
  if (!site.origin.empty()) {
    const bool named = std::find(cors_origins.begin(), cors_origins.end(), "*") != cors_origins.end() ||
                       std::find(cors_origins.begin(), cors_origins.end(), site.origin) != cors_origins.end();
    if (named) return {};
    // The server's own origin: a page it served (the playground), whatever the scheme a proxy
    // in front of it speaks. The Host was checked already, so this is not a rebound name.
    const std::string origin = lowercase(site.origin), host = lowercase(site.host);
    if (!host.empty() && (origin == "http://" + host || origin == "https://" + host)) return {};
    return "a page on the origin '" + std::string(site.origin) +
           "' may not call this server; start it with --cors-origin naming that origin to allow it";
  }
  if (iequals(site.sec_fetch_site, "cross-site") && !(site.get_or_head && iequals(site.sec_fetch_mode, "navigate")))
    return "a request the browser marks as cross-site (Sec-Fetch-Site: cross-site) may not call this server";
  return {};
}

}  // namespace lockstep::serve
