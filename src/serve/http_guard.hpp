// Who may ask the HTTP API (docs/HTTP.md, "Who may call the API"): the API key, and where a
// request comes from, by its Host and, from a browser, its Origin and Sec-Fetch-Site. Pure
// functions of the request's header values and the server's options, so that routing
// (http_routes.cpp) applies them in one place and tests can call them alone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lockstep::serve {

// Whether an Authorization value is "Bearer KEY" for `key`: the scheme in any case (RFC 9110
// section 11.1); the key compared as SHA-256 digests with CRYPTO_memcmp, so that the time taken
// depends on neither the key's bytes nor its length (only on the length the client sent).
bool bearer_matches(std::string_view value, std::string_view key);

// The names a request's Host may give (a DNS-rebinding page sends its own name, which is none
// of these): loopback (localhost, 127.x.x.x, [::1]), the addresses the HTTP listeners are bound
// to, and --allowed-host's names. Any port.
struct HostRules {
  std::vector<std::string> allowed;    // --allowed-host, lowercase; "*" allows any Host
  std::vector<std::string> listening;  // the bound addresses' text ("10.0.0.5", "::1")
  // A listener bound to 0.0.0.0 or ::, whose own address can be any of the machine's: then any
  // IP address is taken (an address, unlike a name, cannot be rebound to another machine).
  bool any_address = false;
};

// Whether a Host header's value ("name", "name:port", "[v6]:port") is one `rules` allow.
bool host_allowed(std::string_view host, const HostRules& rules);

// What a browser says about a request, and what the server knows of its own origin.
struct RequestSite {
  std::string_view origin;          // the Origin header; empty when absent
  std::string_view sec_fetch_site;  // "same-origin", "same-site", "cross-site", "none"; empty when absent
  std::string_view sec_fetch_mode;  // "navigate", "cors", "no-cors"...
  std::string_view host;            // the Host header (already allowed)
  bool get_or_head = false;
};

// Why a browser's request comes from another site that neither is the server itself nor is
// named by --cors-origin (`cors_origins`), or "" when it does not. A request without Origin and
// without Sec-Fetch-Site (curl, SDKs, balancers) is never cross-site; a link followed to the
// playground (a GET navigation) is not refused either, since it can neither change nor read
// anything.
std::string cross_site_reason(const RequestSite& site, const std::vector<std::string>& cors_origins);

}  // namespace lockstep::serve
