// The TCP address helpers (serve/endpoint.hpp) and the HTTP listeners that answer 503 while the
// model loads (include/lockstep/server.hpp, HttpLoadingListeners).
//
// While loading, one thread runs a small Asio loop of its own: each connection gets one request
// read (bounded in size and time) and one 503 answer, then closes. The Server takes the
// listening sockets over when it is built: connections that arrive from then on wait in the
// listen backlog until the Server's loop accepts them, so no connection is refused.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "lockstep/error.hpp"
#include "lockstep/server.hpp"
#include "serve/http_api.hpp"
#include "serve/loading.hpp"

namespace lockstep {
namespace serve {

namespace asio = boost::asio;

asio::ip::tcp::endpoint parse_endpoint(const std::string& text, const char* flag, bool any) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw Error(ErrorKind::invalid_argument, std::string(flag) + " wants HOST:PORT such as 127.0.0.1:8080, got '" + text + "'");
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  unsigned long port = 0;
  bool ok = port_text.size() <= 5;
  for (char c : port_text) {
    ok = ok && c >= '0' && c <= '9';
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  if (!ok || port > 65535)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": port '" + port_text + "' is not in 0..65535");
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": '" + host +
                                                 "' is not a numeric IP address (names are not resolved; localhost is 127.0.0.1)");
  if (!any && !address.is_loopback())
    throw Error(ErrorKind::invalid_argument,
                std::string(flag) + " " + text + " is not a loopback address; nothing authenticates the frame " +
                    "protocol (and HTTP only with --api-key-file), so other addresses need --listen-any");
  return {address, static_cast<unsigned short>(port)};
}

std::string endpoint_text(const asio::ip::tcp::endpoint& e) {
  const std::string host = e.address().is_v6() ? "[" + e.address().to_string() + "]" : e.address().to_string();
  return host + ":" + std::to_string(e.port());
}

void listen_on(TcpAcceptor& acceptor, const asio::ip::tcp::endpoint& e, const char* flag) {
  boost::system::error_code ec;
  acceptor.open(e.protocol(), ec);
  if (!ec) ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(e, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(ErrorKind::io, std::string(flag) + " " + endpoint_text(e) + ": cannot listen: " + ec.message());
}

std::string default_replica_name(const std::vector<std::string>& endpoints, const std::string& socket_path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  for (const char* scheme : {"http://", "tcp:"})
    for (const std::string& e : endpoints)
      if (e.rfind(scheme, 0) == 0) return std::string(host) + e.substr(e.rfind(':'));
  return std::string(host) + ":" + socket_path;
}

}  // namespace serve

void check_replica_name(const std::string& name) {
  constexpr size_t kMax = 128;
  const bool ok = !name.empty() && name.size() <= kMax && std::all_of(name.begin(), name.end(), [](char c) {
    return c > ' ' && c <= '~' && c != '"' && c != '\\';
  });
  if (ok) return;
  std::string shown;  // the name as given, its control bytes escaped so that the error is one line
  for (const unsigned char c : name.substr(0, 2 * kMax)) {
    static constexpr char hex[] = "0123456789abcdef";
    if (c >= ' ' && c <= '~') shown += static_cast<char>(c);
    else shown += {'\\', 'x', hex[c >> 4], hex[c & 15]};
  }
  throw Error(ErrorKind::invalid_argument,
              "--name must be 1 to " + std::to_string(kMax) +
                  " printable ASCII characters other than space, '\"' and '\\' (it is sent in every HTTP "
                  "response's X-Lockstep-Replica header and in every /metrics label); got '" + shown + "' (" +
                  std::to_string(name.size()) + " bytes)");
}

namespace serve {

namespace http = boost::beast::http;

// One connection while loading: reads a request, answers 503, closes.
class LoadingConnection : public std::enable_shared_from_this<LoadingConnection> {
 public:
  LoadingConnection(asio::ip::tcp::socket socket, size_t max_body, std::chrono::milliseconds timeout,
                    const std::string& replica, const std::vector<std::string>& cors_origins)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), timeout_(timeout), replica_(replica),
        cors_origins_(cors_origins) {
    parser_.body_limit(max_body);
    parser_.header_limit(16 * 1024);
  }

  void start() {
    if (timeout_.count() > 0) {
      timer_.expires_after(timeout_);
      timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) self->close();
      });
    }
    http::async_read_header(socket_, buffer_, parser_,
                            [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                              self->on_header(ec);
                            });
  }

 private:
  // A client that sent `Expect: 100-continue` holds its body until told to continue; a final
  // answer tells it not to send it, so the 503 goes at once (else curl waits a second). Any other
  // body is read first: closing on unread bytes would reset the connection, and the client could
  // lose the 503.
  void on_header(const boost::system::error_code& ec) {
    if (ec) return answer(ec);
    const boost::beast::string_view expect = parser_.get()[http::field::expect];
    if (parser_.is_done() || boost::beast::iequals(expect, "100-continue")) return answer(ec);
    http::async_read(socket_, buffer_, parser_, [self = shared_from_this()](const boost::system::error_code& e, size_t) {
      self->answer(e);
    });
  }

  void answer(const boost::system::error_code& ec) {
    if (ec && ec != http::error::body_limit) return close();  // gone, or not HTTP: nothing to answer
    const auto& request = parser_.get();
    std::string path(request.target());
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const auto field = [&](http::field f) {
      const boost::beast::string_view v = request[f];
      return std::string_view(v.data(), v.size());
    };
    const std::string cors = cors_header_lines(cors_origins_, field(http::field::origin));
    // A named origin's preflight is answered as the server will answer it, so that the request
    // after it gets its 503 (with Retry-After) rather than the browser's refusal.
    if (request.method() == http::verb::options && !cors.empty() &&
        request.find(http::field::access_control_request_method) != request.end()) {
      response_ = "HTTP/1.1 204 No Content\r\nX-Lockstep-Replica: " + replica_ + "\r\n" + cors;
      for (const auto& [k, v] : cors_preflight_headers("GET, HEAD, POST, OPTIONS",
                                                       field(http::field::access_control_request_headers)))
        response_ += k + ": " + v + "\r\n";
      response_ += "Connection: close\r\n\r\n";
      return asio::async_write(socket_, asio::buffer(response_),
                               [self = shared_from_this()](const boost::system::error_code&, size_t) { self->close(); });
    }
    const bool health = path == "/health";
    const std::string body = health ? nlohmann::ordered_json{{"status", "loading"}, {"replica", replica_}}.dump(
                                          -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                                    : error_json("the server is loading its model; try again shortly", "server_error",
                                                 "", "loading");
    response_ = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\nX-Lockstep-Replica: " + replica_ +
                "\r\n" + cors + "Retry-After: 1\r\nConnection: close\r\n\r\n";
    if (request.method() != http::verb::head) response_ += body;
    asio::async_write(socket_, asio::buffer(response_),
                      [self = shared_from_this()](const boost::system::error_code&, size_t) { self->close(); });
  }

 public:
  void close() {
    boost::system::error_code ec;
    timer_.cancel();
    socket_.shutdown(asio::socket_base::shutdown_both, ec);
    socket_.close(ec);
  }

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  std::chrono::milliseconds timeout_;
  const std::string& replica_;  // the listeners' (HttpLoadingListeners::Impl::replica), which outlive this
  const std::vector<std::string>& cors_origins_;  // the listeners' too
  boost::beast::flat_buffer buffer_;
  http::request_parser<http::string_body> parser_;
  std::string response_;
};

}  // namespace serve

namespace asio = boost::asio;

void HttpLoadingListeners::Impl::accept(serve::TcpAcceptor& acceptor) {
  acceptor.async_accept(io, [this, &acceptor](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (!ec) {
      ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
      try {
        std::erase_if(connections, [](const auto& c) { return c.expired(); });
        auto connection = std::make_shared<serve::LoadingConnection>(std::move(socket), max_body, timeout, replica,
                                                                   cors_origins);
        connections.push_back(connection);
        connection->start();
      } catch (const std::exception&) {
        // No memory for this connection: it alone is dropped.
      }
    }
    accept(acceptor);  // an error (a connection aborted, no file descriptors) drops one connection
  });
}

std::vector<int> HttpLoadingListeners::Impl::take() {
  std::vector<int> fds;
  end(&fds);
  return fds;
}

void HttpLoadingListeners::Impl::stop() { end(nullptr); }

void HttpLoadingListeners::Impl::end(std::vector<int>* fds) {
  if (!thread.joinable()) return;
  // On the loop's thread: with the acceptors released (or closed) and the connections closed,
  // every handler left ends with an error and the loop runs out of work.
  asio::post(io, [this, fds] {
    for (auto& a : acceptors) {
      boost::system::error_code ec;
      if (fds) fds->push_back(a->release(ec));
      else a->close(ec);
    }
    for (auto& c : connections)
      if (auto connection = c.lock()) connection->close();
    connections.clear();
  });
  thread.join();
  acceptors.clear();
}

HttpLoadingListeners::HttpLoadingListeners(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.max_body = options.http_options.max_body;
  m.timeout = options.http_options.read_timeout;
  m.cors_origins = options.http_options.cors_origins;
  if (!options.replica.empty()) check_replica_name(options.replica);
  std::vector<asio::ip::tcp::endpoint> web;
  for (const std::string& a : options.http) web.push_back(serve::parse_endpoint(a, "--http", options.listen_any));
  for (const auto& e : web) {
    auto acceptor = std::make_unique<serve::TcpAcceptor>(m.io.get_executor());
    serve::listen_on(*acceptor, e, "--http");
    m.names.push_back("http://" + serve::endpoint_text(acceptor->local_endpoint()));
    m.acceptors.push_back(std::move(acceptor));
  }
  m.replica = options.replica.empty() ? serve::default_replica_name(m.names, "") : options.replica;
  for (auto& a : m.acceptors) m.accept(*a);
  m.thread = std::thread([&m] {
    for (;;) {
      try {
        m.io.run();
        return;
      } catch (const std::exception&) {
        // A handler ran out of memory: that connection is lost, the others go on.
      }
    }
  });
}

HttpLoadingListeners::~HttpLoadingListeners() { impl_->stop(); }

std::vector<std::string> HttpLoadingListeners::endpoints() const { return impl_->names; }

}  // namespace lockstep
