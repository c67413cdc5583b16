// Which endpoint answers a request: the path and method table, a browser's CORS preflight, the
// drain, and the API key; then the endpoint family's own file (http_health.cpp, http_models.cpp,
// http_completions.cpp, the playground).
#include <openssl/crypto.h>

#include <boost/beast/core/string.hpp>

#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"
#include "serve/playground.hpp"

namespace lockstep::serve {
namespace {

// Whether an Authorization value is "Bearer KEY" for `key`: the scheme in any case (RFC 9110
// section 11.1), the key compared in constant time, so its bytes cannot be guessed from how long
// a refusal takes.
bool bearer_matches(beast::string_view value, const std::string& key) {
  constexpr beast::string_view scheme = "bearer ";
  if (value.size() != scheme.size() + key.size() || !beast::iequals(value.substr(0, scheme.size()), scheme))
    return false;
  return CRYPTO_memcmp(value.data() + scheme.size(), key.data(), key.size()) == 0;
}

struct Route {
  const char* path;
  http::verb method;
};
constexpr Route kRoutes[] = {{"/", http::verb::get},
                             {"/health", http::verb::get},
                             {"/metrics", http::verb::get},
                             {"/v1/models", http::verb::get},
                             {"/v1/completions", http::verb::post},
                             {"/v1/chat/completions", http::verb::post},
                             {"/tokenize", http::verb::post},
                             {"/detokenize", http::verb::post},
                             {"/tokenizer_info", http::verb::get}};
// GET /v1/models/{id} (the OpenAI clients' models.retrieve) is routed as /v1/models.
constexpr std::string_view kModelsPrefix = "/v1/models/";

const char* methods_of(const Route& route) { return route.method == http::verb::get ? "GET, HEAD" : "POST"; }

}  // namespace

std::string allowed_methods(const std::string& endpoint) {
  for (const Route& r : kRoutes)
    if (endpoint == r.path) return methods_of(r);
  return "GET, HEAD";  // not reached: a 405 is answered only on a route's path
}

void HttpSession::route() {
  std::string path(request_.target());
  if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
  const http::verb method = request_.method();
  const Route* route = nullptr;
  for (const Route& r : kRoutes)
    if (path == r.path) route = &r;
  const bool one_model = !route && path.size() > kModelsPrefix.size() && path.rfind(kModelsPrefix, 0) == 0;
  if (one_model) route = &kRoutes[3];
  if (!route) return respond_error(404, "no such endpoint: " + path, {}, "invalid_request_error", "not_found");
  endpoint_ = route->path;
  // A browser's CORS preflight, before any authentication (it carries no credentials).
  if (method == http::verb::options && request_.find(http::field::access_control_request_method) != request_.end() &&
      !cors_headers().empty()) {
    const beast::string_view asked = request_[http::field::access_control_request_headers];
    return respond(204, "", "",
                   cors_preflight_headers(route->method == http::verb::get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS",
                                          std::string_view(asked.data(), asked.size())));
  }
  const bool head = method == http::verb::head && route->method == http::verb::get;
  if (method != route->method && !head)
    return respond_error(405, std::string("method ") + std::string(request_.method_string()) + " is not allowed on " +
                                  path + "; use " + std::string(http::to_string(route->method)),
                         {}, "invalid_request_error", "method_not_allowed");
  if (path == "/health") return answer_health();
  if (context_.draining.load())
    return respond_error(503, "the server is shutting down", {}, "server_error", "draining");
  // The key guards the API: /v1/ and the tokenizer endpoints (the page, /health and /metrics stay open).
  const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" ||
                       path == "/tokenizer_info";
  if (!context_.api_key.empty() && guarded) {
    const auto auth = request_.find(http::field::authorization);
    if (auth == request_.end() || !bearer_matches(auth->value(), context_.api_key))
      return respond_error(401, "a valid API key is required: send 'Authorization: Bearer KEY'", {},
                           "invalid_request_error", "invalid_api_key");
  }
  if (path == "/") return respond(200, "text/html; charset=utf-8", std::string(playground_html()));
  if (path == "/metrics") return answer_metrics();
  if (path == "/tokenizer_info" || path == "/tokenize" || path == "/detokenize") return answer_tokenizer(path);
  if (one_model) return answer_model(percent_decoded(path.substr(kModelsPrefix.size())));
  if (path == "/v1/models") return answer_models();
  completion(path == "/v1/chat/completions");
}

}  // namespace lockstep::serve
