// TCP addresses for --listen and --http, shared by the Server and the listeners that answer
// while the model loads (include/lockstep/server.hpp).
#pragma once

#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace lockstep::serve {

using TcpAcceptor = boost::asio::basic_socket_acceptor<boost::asio::ip::tcp, boost::asio::any_io_executor>;

// "HOST:PORT" (HOST numeric, "[v6]" or "localhost") -> an endpoint; loopback only unless `any`.
// Throws Error naming `flag` and what is wrong.
boost::asio::ip::tcp::endpoint parse_endpoint(const std::string& text, const char* flag, bool any);
// "HOST:PORT", "[v6]:PORT".
std::string endpoint_text(const boost::asio::ip::tcp::endpoint& e);
// Opens `acceptor` (close-on-exec, address reuse) listening on `e` (port 0: a free one); throws
// Error naming the flag and the address.
void listen_on(TcpAcceptor& acceptor, const boost::asio::ip::tcp::endpoint& e, const char* flag);
// A server's replica name when none is given: this host's name and the port of the first
// "http://HOST:PORT" endpoint, else of the first "tcp:HOST:PORT", else ":" and the socket path.
std::string default_replica_name(const std::vector<std::string>& endpoints, const std::string& socket_path);

}  // namespace lockstep::serve
