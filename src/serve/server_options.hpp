// The Server's options checked, and what the Server derives from them before it serves
// (server.cpp holds the Server itself).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "lockstep/model.hpp"
#include "lockstep/server.hpp"
#include "serve/http_guard.hpp"

namespace lockstep::serve {

// `o`, once every field is checked; throws Error naming the first that is wrong.
const ServerOptions& checked(const ServerOptions& o);
// The model's name in the HTTP API: `given`, else the model directory's name.
std::string model_name(const Model& model, const std::string& given);

// HTTP connections beyond --max-connections while every open one is busy get a limited session:
// /health answered, anything else 503 (http_session.hpp). Past this many of those too, the 503
// (busy_response) is written as soon as the connection is accepted, without reading a request.
inline constexpr size_t kLimitedHttpSessions = 64;
// That 503, whole: head and body.
std::string busy_response(const std::string& replica);
// The Host names the HTTP API takes (http_guard.hpp): --allowed-host's, lowercase, and the
// addresses the listeners are bound to.
HostRules host_rules(const std::vector<std::string>& allowed, const std::vector<boost::asio::ip::tcp::endpoint>& bound);

}  // namespace lockstep::serve
