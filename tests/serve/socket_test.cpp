// End to end: the socket's path rules and its mode.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

class ServeSocket : public ::testing::Test {
 protected:
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir);
  const std::string sock = dir / "s.sock";
};

// A socket bound at `path`, listening or not; the file stays when the descriptor closes.
int bind_socket(const std::string& path, bool listening) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  if (listening) {
    EXPECT_EQ(::listen(fd, 4), 0);
  }
  return fd;
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

TEST_F(ServeSocket, ASocketAStoppedProcessLeftIsReplaced) {
  ::close(bind_socket(sock, true));  // closed: nobody listens, the file stays
  ASSERT_TRUE(path_exists(sock));
  ServerProcess server({model_dir, "--socket", sock});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient client(sock);
  EXPECT_EQ(client.handshake()["protocol"], 1);
  // A server killed outright leaves its socket; the next one replaces it.
  EXPECT_EQ(server.stop(SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(path_exists(sock));
  ServerProcess next({model_dir, "--socket", sock});
  ASSERT_TRUE(next.running()) << next.err();
  RawClient again(sock);
  EXPECT_EQ(next.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_FALSE(path_exists(sock));
}

TEST_F(ServeSocket, ASocketAnotherProcessServesIsRefused) {
  ServerProcess first({model_dir, "--socket", sock});
  ASSERT_TRUE(first.running()) << first.err();
  ServerProcess second({model_dir, "--socket", sock});
  EXPECT_EQ(second.stop(0, 10), 1);
  EXPECT_NE(second.err().find("socket '" + sock + "': another process is serving on it"), std::string::npos)
      << second.err();
  // The first is untouched and still serves.
  RawClient client(sock);
  EXPECT_EQ(client.handshake()["protocol"], 1);
  EXPECT_EQ(first.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_FALSE(path_exists(sock));

  // Any listening socket counts, not only a lockstep one.
  const int fd = bind_socket(sock, true);
  ServerProcess third({model_dir, "--socket", sock});
  EXPECT_EQ(third.stop(0, 10), 1);
  EXPECT_NE(third.err().find("another process is serving on it"), std::string::npos) << third.err();
  EXPECT_TRUE(path_exists(sock));
  ::close(fd);
}

TEST_F(ServeSocket, APathHoldingAnythingButASocketIsRefused) {
  write_file(sock, "precious");
  ServerProcess file({model_dir, "--socket", sock});
  EXPECT_EQ(file.stop(0, 10), 1);
  EXPECT_NE(file.err().find("socket '" + sock + "': the path exists and is a regular file"), std::string::npos)
      << file.err();
  EXPECT_EQ(read_file(sock), "precious");

  const std::string sub = dir / "d";
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  ServerProcess directory({model_dir, "--socket", sub});
  EXPECT_EQ(directory.stop(0, 10), 1);
  EXPECT_NE(directory.err().find("is a directory"), std::string::npos) << directory.err();

  // A symbolic link, even to a leftover socket, is not replaced.
  const std::string leftover = dir / "old.sock", link = dir / "link.sock";
  ::close(bind_socket(leftover, false));
  ASSERT_EQ(::symlink(leftover.c_str(), link.c_str()), 0);
  ServerProcess linked({model_dir, "--socket", link});
  EXPECT_EQ(linked.stop(0, 10), 1);
  EXPECT_NE(linked.err().find("is a symbolic link"), std::string::npos) << linked.err();
  EXPECT_TRUE(path_exists(leftover));

  ServerProcess too_long({model_dir, "--socket", dir / std::string(120, 'x')});
  EXPECT_EQ(too_long.stop(0, 10), 1);
  EXPECT_NE(too_long.err().find("a Unix socket path holds at most 107"), std::string::npos) << too_long.err();

  ServerProcess no_dir({model_dir, "--socket", dir / "missing/s.sock"});
  EXPECT_EQ(no_dir.stop(0, 10), 1);
  EXPECT_NE(no_dir.err().find("cannot bind: No such file or directory"), std::string::npos) << no_dir.err();
}

TEST_F(ServeSocket, TheSocketIsOwnerOnlyUnlessAModeIsGiven) {
  {
    ServerProcess server({model_dir, "--socket", sock});
    ASSERT_TRUE(server.running()) << server.err();
    EXPECT_EQ(mode_of(sock), 0600u);
  }
  ::unlink(sock.c_str());
  // 0666 is more than the usual umask (022) lets bind create: the mode is set, not masked.
  const mode_t old = ::umask(022);
  ServerProcess server({model_dir, "--socket", sock, "--socket-mode", "0666"});
  ::umask(old);
  ASSERT_TRUE(server.running()) << server.err();
  EXPECT_EQ(mode_of(sock), 0666u);
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  ServerProcess group({model_dir, "--socket", sock, "--socket-mode", "640"});
  ASSERT_TRUE(group.running()) << group.err();
  EXPECT_EQ(mode_of(sock), 0640u);
}

}  // namespace
}  // namespace lockstep::test
