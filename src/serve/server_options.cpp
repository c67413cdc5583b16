// The Server's options checked, and what it derives from them (server_options.hpp).
#include "serve/server_options.hpp"

#include "lockstep/error.hpp"
#include "serve/http_api.hpp"
#include "serve/http_session.hpp"

namespace lockstep::serve {

std::string model_name(const Model& model, const std::string& given) {
  if (!given.empty()) return given;
  std::string dir = model.source().directory;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  return base.empty() ? "lockstep" : base;
}

const ServerOptions& checked(const ServerOptions& o) {
  if (o.batch < 1 || o.batch > max_server_batch)
    throw Error(ErrorKind::invalid_argument, "batch must be in [1, " + std::to_string(max_server_batch) +
                                                 "], got " + std::to_string(o.batch));
  if (o.socket_mode > 0777)
    throw Error(ErrorKind::invalid_argument, "socket mode must be in 0..0777");
  if (o.max_connections < 1 || o.max_connections > max_server_connections)
    throw Error(ErrorKind::invalid_argument, "max connections must be in [1, " +
                                                 std::to_string(max_server_connections) + "], got " +
                                                 std::to_string(o.max_connections));
  if (o.idle_timeout.count() < 0 || o.idle_close.count() < 0)
    throw Error(ErrorKind::invalid_argument, "idle timeouts must be 0 (none) or positive");
  if (!o.replica.empty()) check_replica_name(o.replica);
  if (o.socket_path.empty() && o.listen.empty() && o.http.empty())
    throw Error(ErrorKind::invalid_argument, "the server needs somewhere to listen: a Unix socket, a TCP address or an HTTP address");
  const HttpOptions& h = o.http_options;
  if (h.max_active < 1 || h.max_active > max_server_batch)
    throw Error(ErrorKind::invalid_argument, "HTTP batch must be in [1, " + std::to_string(max_server_batch) + "]");
  if (h.max_queue < 0) throw Error(ErrorKind::invalid_argument, "the HTTP queue limit must be >= 0");
  if (h.max_body < 1) throw Error(ErrorKind::invalid_argument, "the HTTP body limit must be >= 1 byte");
  for (const std::string& name : h.allowed_hosts)
    if (name.empty() || name.size() > 255 || name.find_first_of(" \t\r\n/,\"'\\") != std::string::npos)
      throw Error(ErrorKind::invalid_argument, "--allowed-host must be a host name or address as a Host header "
                                               "gives it (without a port), or *; got '" + name + "'");
  return o;
}

std::string busy_response(const std::string& replica) {
  const std::string body = error_json(kTooManyConnections, "server_error", {}, "too_many_connections");
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nX-Lockstep-Replica: " + replica +
         "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
}

HostRules host_rules(const std::vector<std::string>& allowed, const std::vector<boost::asio::ip::tcp::endpoint>& bound) {
  HostRules rules;
  for (std::string name : allowed) {
    for (char& c : name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    rules.allowed.push_back(name);
  }
  for (const auto& e : bound) {
    if (e.address().is_unspecified()) rules.any_address = true;
    else rules.listening.push_back(e.address().to_string());
  }
  return rules;
}

}  // namespace lockstep::serve
