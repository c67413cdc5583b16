// Who may call the HTTP API (src/serve/http_guard.hpp; issue 35, items 7d and 8): the API key's
// comparison, the Host rules and a browser's cross-site marks, as functions alone. The server
// applying them is tests/serve/http/test_http_guard.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "serve/http_guard.hpp"

namespace lockstep::test {
namespace {

using serve::bearer_matches;
using serve::cross_site_reason;
using serve::host_allowed;
using serve::HostRules;
using serve::RequestSite;

TEST(HttpGuard, BearerMatchesOnlyTheKeyUnderTheBearerScheme) {
  EXPECT_TRUE(bearer_matches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(bearer_matches("bearer s3cret", "s3cret"));
  EXPECT_TRUE(bearer_matches("BEARER s3cret", "s3cret"));
  for (const char* wrong : {"Bearer s3cre", "Bearer s3crett", "Bearer S3cret", "Basic s3cret", "s3cret", "Bearer",
                            "Bearer ", "", "Bearers3cret", "Bearer  s3cret"})
    EXPECT_FALSE(bearer_matches(wrong, "s3cret")) << wrong;
  EXPECT_FALSE(bearer_matches("Bearer ", ""));  // no key matches nothing
}

// The shortest time of `batches` batches of `calls` comparisons of `value`, in nanoseconds.
double fastest_batch(const std::string& value, const std::string& key, int batches, int calls) {
  double best = 1e30;
  int matched = 0;
  for (int b = 0; b < batches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) matched += bearer_matches(value, key) ? 1 : 0;
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  EXPECT_EQ(matched, 0);
  return best;
}

// The comparison returned at once when the lengths differed, so how long a refusal took told a
// client the key's length (4 KiB keys: about a thousand times faster). Now a wrong key of the
// key's length and one a byte longer take the same time, within noise.
TEST(HttpGuard, BearerMatchesTakesAsLongWhateverTheLengthOfAWrongKey) {
  const std::string key(4000, 'k');
  const std::string same_length = "Bearer " + std::string(4000, 'x');
  const std::string one_longer = "Bearer " + std::string(4001, 'x');
  double same = 0, longer = 0;
  for (int round = 0; round < 3; ++round) {  // interleaved, so a slow moment of the machine hits both
    same = std::max(same, fastest_batch(same_length, key, 20, 50));
    longer = std::max(longer, fastest_batch(one_longer, key, 20, 50));
  }
  const double ratio = longer / same;
  EXPECT_GT(ratio, 0.5) << same << " ns a batch for a wrong key of the key's length, " << longer << " one byte longer";
  EXPECT_LT(ratio, 2.0) << same << " ns a batch for a wrong key of the key's length, " << longer << " one byte longer";
}

TEST(HttpGuard, LoopbackHostsAreAllowedWithAnyPort) {
  const HostRules none;
  for (const char* host : {"localhost", "LOCALHOST", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "127.255.0.9:65535",
                           "[::1]", "[::1]:8080", "[0:0:0:0:0:0:0:1]:80", "[::ffff:127.0.0.1]:80"})
    EXPECT_TRUE(host_allowed(host, none)) << host;
  for (const char* host : {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", "10.0.0.1",
                           "[::2]", "::1", "[::1", "[::1]x", "localhost:http", "localhost:123456", "0x7f000001", "127.1",
                           "", ":80"})
    EXPECT_FALSE(host_allowed(host, none)) << host;
}

TEST(HttpGuard, BoundAddressesAndAllowedNamesAreAllowed) {
  HostRules rules;
  rules.listening = {"10.0.0.5", "fd00::5"};
  rules.allowed = {"api.example.com"};
  for (const char* host : {"10.0.0.5", "10.0.0.5:8080", "[fd00::5]:80", "api.example.com", "API.Example.Com:443"})
    EXPECT_TRUE(host_allowed(host, rules)) << host;
  for (const char* host : {"10.0.0.6", "example.com", "x.api.example.com"}) EXPECT_FALSE(host_allowed(host, rules)) << host;
  rules.any_address = true;  // bound to 0.0.0.0: any address, still no other name
  EXPECT_TRUE(host_allowed("192.168.1.20:8080", rules));
  EXPECT_FALSE(host_allowed("evil.example", rules));
  rules.allowed = {"*"};
  EXPECT_TRUE(host_allowed("evil.example", rules));
}

TEST(HttpGuard, CrossSiteRequestsAreThoseABrowserSendsFromAnotherOrigin) {
  const std::vector<std::string> none, app = {"http://app.example:3000"}, any = {"*"};
  const auto site = [](std::string_view origin, std::string_view fetch_site = {}, std::string_view mode = {},
                       bool get = false) { return RequestSite{origin, fetch_site, mode, "127.0.0.1:8080", get}; };
  // Not a browser, or the server's own page: fine.
  EXPECT_EQ(cross_site_reason(site(""), none), "");
  EXPECT_EQ(cross_site_reason(site("http://127.0.0.1:8080", "same-origin"), none), "");
  EXPECT_EQ(cross_site_reason(site("https://127.0.0.1:8080"), none), "");
  EXPECT_EQ(cross_site_reason(site("", "none"), none), "");
  EXPECT_EQ(cross_site_reason(site("", "same-site"), none), "");
  EXPECT_EQ(cross_site_reason(site("", "cross-site", "navigate", true), none), "");  // a link to the playground
  // Another origin, unless --cors-origin names it.
  EXPECT_NE(cross_site_reason(site("http://evil.example"), none), "");
  EXPECT_NE(cross_site_reason(site("null"), none), "");
  EXPECT_NE(cross_site_reason(site("http://127.0.0.1:8081"), none), "");
  EXPECT_NE(cross_site_reason(site("", "cross-site", "no-cors"), none), "");
  EXPECT_NE(cross_site_reason(site("", "cross-site", "navigate", false), none), "");  // a form posted
  EXPECT_EQ(cross_site_reason(site("http://app.example:3000", "cross-site", "cors"), app), "");
  EXPECT_NE(cross_site_reason(site("http://evil.example", "cross-site", "cors"), app), "");
  EXPECT_EQ(cross_site_reason(site("http://evil.example", "cross-site", "cors"), any), "");
  EXPECT_NE(cross_site_reason(site("http://evil.example"), none).find("--cors-origin"), std::string::npos);
}

}  // namespace
}  // namespace lockstep::test
