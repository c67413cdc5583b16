// Which endpoint answers a request: the path and method table, who may ask (the Host, a
// browser's Origin, the API key: http_guard.hpp), a browser's CORS preflight, the drain; then the
// endpoint family's own file (http_health.cpp, http_models.cpp, http_completions.cpp, the
// playground).
#include <boost/beast/core/string.hpp>

#include "serve/http_guard.hpp"
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"
#include "serve/playground.hpp"

namespace lockstep::serve {
namespace {

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

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

bool HttpSession::request_from_here() {
  // Two of either would leave which one counts to each reader of the request (a proxy may check
  // the first, the server the last).
  for (const http::field f : {http::field::authorization, http::field::host})
    if (request_.count(f) > 1) {
      respond_error(400, "the request has more than one " + std::string(http::to_string(f)) + " header; send one");
      return false;
    }
  const std::string_view host = view(request_[http::field::host]);  // absent: not a browser
  if (!host.empty() && !host_allowed(host, context_.hosts)) {
    respond_error(403,
                  "the Host '" + std::string(host) + "' is not this server's: a name other than localhost needs "
                  "--allowed-host (a page whose name was rebound to this address sends its own name)",
                  {}, "invalid_request_error", "forbidden_host");
    return false;
  }
  const RequestSite site{view(request_[http::field::origin]), view(request_["Sec-Fetch-Site"]),
                         view(request_["Sec-Fetch-Mode"]), host,
                         request_.method() == http::verb::get || request_.method() == http::verb::head};
  if (const std::string reason = cross_site_reason(site, context_.cors_origins); !reason.empty()) {
    respond_error(403, reason, {}, "invalid_request_error", "cross_site_request");
    return false;
  }
  return true;
}

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
  if (!request_from_here()) return;
  if (limited_) {  // one answer, then the connection closes (http_session.hpp)
    keep_alive_ = false;
    if (path != "/health")
      return respond_error(503, kTooManyConnections, {}, "server_error", "too_many_connections");
  }
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
    if (auth == request_.end() || !bearer_matches(view(auth->value()), context_.api_key))
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
