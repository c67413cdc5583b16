// The HTTP connection (http_session.hpp): reading a request's head and body under the read
// timeout, writing responses one write at a time under the write timeout, keep-alive, closing.
// Routing is http_routes.cpp; each endpoint family has its own file.
#include "serve/http_session.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

#include "serve/http_wire.hpp"

namespace lockstep::serve {

HttpSession::HttpSession(StreamSocket socket, const HttpContext& context, Closed on_closed, bool limited)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), context_(context), on_closed_(std::move(on_closed)),
      limited_(limited) {
  if (context_.access_log) client_ = peer_text(socket_.native_handle());
}

void HttpSession::start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpSession::evict() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    if (self->idle() && !self->closed_) self->close();
  });
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
  if (buffer_.size() > 0) return read_head();  // a pipelined request is here already
  // Idle until the next request's first byte: the connection limit may close it meanwhile.
  last_active_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  idle_.store(true, std::memory_order_relaxed);
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
    self->idle_.store(false, std::memory_order_relaxed);
    if (ec) return self->close();  // closed (evicted, timed out, stopped) or failed
    self->read_head();
  });
}

void HttpSession::read_head() {
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t) { self->on_header(ec); });
}

namespace {

// Why a request's body length is ambiguous, or "" when it is not (RFC 9112 section 6.3). A
// Transfer-Encoding whose last coding is not chunked has no length at all: Beast takes such a
// request as bodyless, so its body would be read as the next request (request smuggling).
// Transfer-Encoding beside Content-Length is the classic disagreement between a proxy and a
// server; Beast refuses it in one order only. Either is answered 400 and the connection closed.
std::string ambiguous_framing(const http::fields& header) {
  std::string last;  // the last coding, of every Transfer-Encoding line joined (empty elements skipped)
  bool any = false;
  const auto [first, end_of_lines] = header.equal_range(http::field::transfer_encoding);
  for (auto field = first; field != end_of_lines; ++field) {
    any = true;
    const beast::string_view value = field->value();
    size_t begin = 0;
    while (begin <= value.size()) {
      const size_t end = std::min(value.find(',', begin), value.size());
      beast::string_view element = value.substr(begin, end - begin);
      while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) element.remove_prefix(1);
      while (!element.empty() && (element.back() == ' ' || element.back() == '\t')) element.remove_suffix(1);
      if (!element.empty()) last = std::string(element);
      begin = end + 1;
    }
  }
  if (!any) return {};
  if (header.find(http::field::content_length) != header.end())
    return "the request has both Transfer-Encoding and Content-Length; send one (RFC 9112 section 6.3)";
  if (!beast::iequals(last, "chunked"))
    return "the request's Transfer-Encoding does not end with chunked, so its body's length is unknown "
           "(RFC 9112 section 6.3); send Content-Length or Transfer-Encoding: chunked";
  return {};
}

}  // namespace

void HttpSession::on_header(const boost::system::error_code& ec) {
  // Errors (a body past --max-body is known from Content-Length already) are answered as a whole
  // request's are, without reading the body.
  if (context_.access_log) {
    log_time_ = std::chrono::system_clock::now();
    log_start_ = std::chrono::steady_clock::now();
    const bool head = !ec && parser_->is_header_done();
    log_method_ = head ? std::string(parser_->get().method_string()) : "-";
    log_path_ = head ? std::string(parser_->get().target()) : "-";
    if (const size_t q = log_path_.find('?'); q != std::string::npos) log_path_.resize(q);
  }
  if (ec || closed_) return on_request(ec);
  if (const std::string problem = ambiguous_framing(parser_->get()); !problem.empty()) {
    begin_answer();  // keep_alive_ false: the connection closes after the 400
    return respond_error(400, problem);
  }
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

void HttpSession::begin_answer() {
  ++timer_generation_;
  in_request_ = true;
  endpoint_ = "other";
  keep_alive_ = false;
  request_ = {};
}

void HttpSession::on_request(const boost::system::error_code& ec) {
  if (closed_) return;
  begin_answer();
  if (ec == http::error::body_limit) {
    return respond_error(413, "the request body is larger than the server's limit of " +
                                  std::to_string(context_.max_body) + " bytes (--max-body)");
  }
  if (ec == http::error::header_limit) return respond_error(431, "the request's headers are too large");
  // Only a chunked body's trailer fields can fill the buffer (the parser takes the body as it
  // comes, and the head is bounded above): refused at once rather than waited on.
  if (ec == http::error::buffer_overflow)
    return respond_error(431, "the request's chunked trailer fields are larger than " +
                                  std::to_string(kMaxBufferedBytes) + " bytes");
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
  if (status == 405) headers.emplace_back("Allow", allowed_methods(endpoint_));
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  respond(status, "application/json", error_json(message, type, param, code), headers);
}

void HttpSession::send(std::string bytes, bool close_after) {
  if (closed_) return;
  // Every response begins with its status line ("HTTP/1.1 200 OK"), whichever file wrote it.
  if (log_status_ == 0 && bytes.size() >= 12 && bytes.rfind("HTTP/1.1 ", 0) == 0)
    log_status_ = std::atoi(bytes.substr(9, 3).c_str());
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
    log_request();
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
                      self->log_bytes_ += self->writes_.front().size();
                      self->queued_bytes_ -= self->writes_.front().size();
                      self->writes_.pop_front();
                      self->give_back_tokens();
                      self->write_next();
                    });
}

void HttpSession::close() noexcept {
  if (closed_) return;
  closed_ = true;
  log_request();  // a response cut off (the client left, a write timed out) is logged as far as it went
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

void HttpSession::log_request() noexcept {
  if (!context_.access_log || log_status_ == 0) return;
  context_.access_log->write({log_time_, client_, log_method_, log_path_, log_status_, log_bytes_,
                              std::chrono::steady_clock::now() - log_start_, context_.replica});
  log_status_ = 0;
  log_bytes_ = 0;
}

void HttpSession::give_back_tokens() {
  if (queued_bytes_ > kMaxQueuedBytes) return;  // write_next gives them back as the writes go
  for (Choice& c : choices_) {
    if (c.owed > 0 && c.job) context_.engine.consumed(*c.job, c.owed);
    c.owed = 0;
  }
}

}  // namespace lockstep::serve
