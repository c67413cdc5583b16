// The HTTP connection (http_session.hpp): reading a request's head and body under the read
// timeout, writing responses one write at a time under the write timeout, keep-alive, closing.
// Routing is http_routes.cpp; each endpoint family has its own file.
#include "serve/http_session.hpp"

#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "serve/http_wire.hpp"

namespace lockstep::serve {

HttpSession::HttpSession(StreamSocket socket, const HttpContext& context, Closed on_closed)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), context_(context), on_closed_(std::move(on_closed)) {}

void HttpSession::start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpSession::stop() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->stopping_ = true;
    if (!self->in_request_) self->close();
  });
}

void HttpSession::arm(std::chrono::milliseconds after) {
  const uint64_t generation = ++timer_generation_;
  if (after.count() <= 0) return;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), generation](const boost::system::error_code& ec) {
    if (!ec && generation == self->timer_generation_) self->close();
  });
}

void HttpSession::read_request() {
  if (stopping_ || closed_) return close();
  parser_.emplace();
  parser_->body_limit(context_.max_body);
  parser_->header_limit(16 * 1024);
  arm(context_.read_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(const boost::system::error_code& ec) {
  // Errors (a body past --max-body is known from Content-Length already) are answered as a whole
  // request's are, without reading the body.
  if (ec || closed_) return on_request(ec);
  const auto read_body = [self = shared_from_this()] {
    http::async_read(self->socket_, self->buffer_, *self->parser_,
                     [self](const boost::system::error_code& e, size_t) { self->on_request(e); });
  };
  const auto& header = parser_->get();
  const auto expect = header.find(http::field::expect);
  if (header.version() < 11 || expect == header.end() || !beast::iequals(expect->value(), "100-continue"))
    return read_body();
  // The client waits for this before sending the body (curl past 1 MiB, older libcurl past 1 KiB;
  // without it they wait a second, RFC 9110 section 10.1.1). The read timeout still runs.
  static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  asio::async_write(socket_, asio::buffer(kContinue, sizeof kContinue - 1),
                    [self = shared_from_this(), read_body](const boost::system::error_code& e, size_t) {
                      if (e) return self->on_request(e);
                      read_body();
                    });
}

void HttpSession::on_request(const boost::system::error_code& ec) {
  ++timer_generation_;
  if (closed_) return;
  in_request_ = true;
  endpoint_ = "other";
  keep_alive_ = false;
  request_ = {};
  if (ec == http::error::body_limit) {
    return respond_error(413, "the request body is larger than the server's limit of " +
                                  std::to_string(context_.max_body) + " bytes (--max-body)");
  }
  if (ec == http::error::header_limit) return respond_error(431, "the request's headers are too large");
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == asio::error::bad_descriptor) {
    in_request_ = false;
    return close();
  }
  if (ec) return respond_error(400, "the request is not valid HTTP/1.1: " + ec.message());
  request_ = parser_->release();
  keep_alive_ = request_.keep_alive();
  try {
    route();
  } catch (const ApiError& e) {
    respond_error(e.status, e.what(), e.param, e.type, e.code);
  } catch (const std::exception& e) {
    respond_error(500, std::string("the server failed: ") + e.what(), {}, "server_error");
  }
}

void HttpSession::respond(int status, const std::string& content_type, const std::string& body,
                          const std::vector<std::pair<std::string, std::string>>& headers) {
  context_.metrics.count_request(endpoint_, status);
  const bool close_after = !keep_alive_ || stopping_ || status == 413 || (status == 400 && !parser_->is_done());
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " +
                     std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
  if (status != 204) text += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  text += "X-Lockstep-Replica: " + context_.replica + "\r\n" + cors_headers();
  for (const auto& [k, v] : headers) text += k + ": " + v + "\r\n";
  text += close_after ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  if (request_.method() != http::verb::head) text += body;
  response_done_ = true;
  send(std::move(text), close_after);
}

std::string HttpSession::cors_headers() const {
  if (context_.cors_origins.empty()) return {};
  const beast::string_view origin = request_[http::field::origin];  // empty when absent: no headers
  return cors_header_lines(context_.cors_origins, std::string_view(origin.data(), origin.size()));
}

void HttpSession::respond_error(int status, const std::string& message, const std::string& param,
                                const std::string& type, const std::string& code) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 405) {
    for (const char* p : {"/", "/health", "/metrics", "/v1/models"})
      if (endpoint_ == p) headers.emplace_back("Allow", "GET, HEAD");
    if (headers.empty()) headers.emplace_back("Allow", "POST");
  }
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  respond(status, "application/json", error_json(message, type, param, code), headers);
}

void HttpSession::send(std::string bytes, bool close_after) {
  if (closed_) return;
  if (close_after) close_after_writes_ = true;
  queued_bytes_ += bytes.size();
  if (!bytes.empty()) writes_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void HttpSession::write_next() {
  if (closed_) return;
  if (writes_.empty()) {
    writing_ = false;
    ++timer_generation_;
    if (!response_done_) return;  // a stream waiting for tokens
    response_done_ = false;
    in_request_ = false;
    if (std::exchange(trim_after_response_, false)) give_memory_back();
    if (close_after_writes_) return close();
    return read_request();
  }
  writing_ = true;
  arm(context_.write_timeout);
  asio::async_write(socket_, asio::buffer(writes_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      if (ec) return self->close();
                      self->queued_bytes_ -= self->writes_.front().size();
                      self->writes_.pop_front();
                      self->give_back_tokens();
                      self->write_next();
                    });
}

void HttpSession::close() noexcept {
  if (closed_) return;
  closed_ = true;
  cancel_generation();
  ++timer_generation_;
  boost::system::error_code ec;
  timer_.cancel();
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
  try {
    if (on_closed_) on_closed_(this);
  } catch (...) {
  }
}

void HttpSession::give_back_tokens() {
  if (queued_bytes_ > kMaxQueuedBytes) return;  // write_next gives them back as the writes go
  for (Choice& c : choices_) {
    if (c.owed > 0 && c.job) context_.engine.consumed(*c.job, c.owed);
    c.owed = 0;
  }
}

}  // namespace lockstep::serve
