// GET /health (a balancer's check: 200 while serving, 503 while draining) and GET /metrics
// (Prometheus text, metrics.cpp).
#include "serve/http_session.hpp"
#include "serve/http_wire.hpp"

namespace lockstep::serve {

using nlohmann::json;

void HttpSession::answer_health() {
  if (context_.draining.load())
    return respond(503, "application/json", json_body(json{{"status", "draining"}, {"replica", context_.replica}}));
  respond(200, "application/json",
          json_body(json{{"status", "ok"}, {"model", context_.model_name}, {"replica", context_.replica}}));
}

void HttpSession::answer_metrics() {
  const auto [reused, computed] = context_.cache_rows();
  respond(200, "text/plain; version=0.0.4; charset=utf-8",
          context_.metrics.text(context_.replica, context_.model_name, context_.model->profile(),
                                context_.model->parameters_sha256(), reused, computed));
}

}  // namespace lockstep::serve
