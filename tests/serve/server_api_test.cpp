// The Server through its public header alone, in process: what the command builds on.
#include <gtest/gtest.h>

#include <thread>

#include "format/json_text.hpp"
#include "lockstep/server.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

std::shared_ptr<const Model> tiny_model() {
  const ModelConfig config = tiny_config(16);
  return Model::from_parameters(config, init_parameters(config, 4));
}

TEST(ServerApi, ServesUntilStoppedThenRemovesItsSocket) {
  TempDir dir;
  ServerOptions options;
  options.socket_path = dir / "s.sock";
  options.batch = 4;
  options.at = true;
  options.outputs = {"logits"};
  const auto model = tiny_model();
  Server server(model, options);
  EXPECT_EQ(lockstep::format::parse_json(server.handshake())["outputs"][0]["shape"],
            nlohmann::json({1, 1, 256}));
  ServerStats stats;
  std::thread serving([&] { stats = server.serve(); });
  {
    RawClient client(options.socket_path);
    const std::string input = call_input(random_ids(16, 256, 2), 5);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(client.call(input), answer_alone(*model, server.layout(), input));
    EXPECT_EQ(server.stats().calls, 3u);
    server.stop();
    server.stop();  // any number of times
    EXPECT_TRUE(client.closed_by_server());
  }
  serving.join();
  EXPECT_EQ(stats.calls, 3u);
  EXPECT_EQ(stats.runs, 3u);
  EXPECT_FALSE(path_exists(options.socket_path));
  EXPECT_THROW(server.serve(), Error);  // once
}

TEST(ServerApi, AStopBeforeServeReturnsAtOnceAndOptionsAreChecked) {
  TempDir dir;
  ServerOptions options;
  options.socket_path = dir / "s.sock";
  {
    Server server(tiny_model(), options);
    EXPECT_TRUE(path_exists(options.socket_path));
    server.stop();
    const ServerStats stats = server.serve();
    EXPECT_EQ(stats.calls, 0u);
    EXPECT_FALSE(path_exists(options.socket_path));
  }
  {
    Server never_served(tiny_model(), options);
    EXPECT_TRUE(path_exists(options.socket_path));
  }
  EXPECT_FALSE(path_exists(options.socket_path));  // the destructor removes it too
  ServerOptions bad = options;
  bad.batch = 0;
  EXPECT_THROW(Server(tiny_model(), bad), Error);
  bad = options;
  bad.outputs = {"nope"};
  EXPECT_THROW(Server(tiny_model(), bad), Error);
  EXPECT_THROW(Server(nullptr, options), Error);
  EXPECT_FALSE(path_exists(options.socket_path));
}

}  // namespace
}  // namespace lockstep::test
