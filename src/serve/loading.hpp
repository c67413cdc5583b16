// The insides of HttpLoadingListeners (include/lockstep/server.hpp), for loading.cpp and the
// Server that takes their sockets over.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "lockstep/server.hpp"
#include "serve/endpoint.hpp"

namespace lockstep {
namespace serve {
class LoadingConnection;
}

struct HttpLoadingListeners::Impl {
  boost::asio::io_context io{1};  // run by `thread` alone
  std::vector<std::unique_ptr<serve::TcpAcceptor>> acceptors;
  std::vector<std::string> names;
  std::string replica;  // in /health and the X-Lockstep-Replica header, as the Server will name itself
  size_t max_body = 0;
  std::chrono::milliseconds timeout{0};  // a connection's request must arrive within it (0: never)
  std::vector<std::string> cors_origins;  // --cors-origin: named origins get CORS headers
  std::vector<std::weak_ptr<serve::LoadingConnection>> connections;  // on the loop's thread
  std::thread thread;                    // last

  // Accepts on `acceptor` until it closes; each connection gets its 503.
  void accept(serve::TcpAcceptor& acceptor);
  // Stops answering (the connections still open are closed, the loop ends, its thread is
  // joined) and returns the listening sockets, still open, in options.http's order.
  std::vector<int> take();
  // The same, closing the listening sockets too.
  void stop();

 private:
  void end(std::vector<int>* fds);
};

}  // namespace lockstep
