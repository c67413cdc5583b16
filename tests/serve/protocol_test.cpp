// End to end: the handshake, calls with and without --at and --output, and bad calls, against the
// real `lockstep serve` process.
#include <gtest/gtest.h>
#include <signal.h>

#include <sys/stat.h>

#include <climits>
#include <cstring>

#include "kernels/cuda/device.hpp"
#include "lockstep/format.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

class ServeProtocol : public ::testing::Test {
 protected:
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir);
  const std::string sock = dir / "s.sock";
};

nlohmann::json spec(const std::string& name, std::vector<int64_t> shape, const std::string& dtype) {
  return {{"name", name}, {"shape", shape}, {"dtype", dtype}};
}

std::string status_of(const std::string& answer) { return answer.substr(0, 1); }
std::string text_of(const std::string& answer) { return answer.substr(1); }

TEST_F(ServeProtocol, BannerAndHandshakeDescribeTheModelAsServed) {
  ServerProcess server({model_dir, "--socket", sock, "--batch", "4"});
  ASSERT_TRUE(server.running()) << server.err();
  EXPECT_EQ(server.out(), "serving " + model_dir + " on " + sock + ", up to 4 calls a run\n"
                          "  inputs  inputs [1, 32] i32\n"
                          "  outputs logits [1, 32, 256] f32\n"
                          "          hidden [1, 32, 16] f32\n");
  RawClient client(sock);
  const nlohmann::json expected = {
      {"protocol", 1},
      {"checkpoint", model_dir},
      {"step", nullptr},
      {"slug", nullptr},
      {"precision", "f32"},
      {"inputs", {spec("inputs", {1, 32}, "i32")}},
      {"outputs", {spec("logits", {1, 32, 256}, "f32"), spec("hidden", {1, 32, 16}, "f32")}},
      {"replica", host_name() + ":" + sock}};
  EXPECT_EQ(client.handshake(), expected);
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
}

TEST_F(ServeProtocol, FlagsShapeTheHandshake) {
  ServerProcess server({"--output", "hidden", model_dir, "--socket", sock, "--at", "--precision", "bf16"});
  ASSERT_TRUE(server.running()) << server.err();
  EXPECT_NE(server.out().find("up to 1 call a run\n"
                              "  inputs  inputs [1, 32] i32\n"
                              "          at [1] i32\n"
                              "  outputs hidden [1, 1, 16] f32\n"),
            std::string::npos)
      << server.out();
  RawClient client(sock);
  const nlohmann::json& h = client.handshake();
  EXPECT_EQ(h["precision"], "bf16");
  EXPECT_EQ(h["inputs"], nlohmann::json({spec("inputs", {1, 32}, "i32"), spec("at", {1}, "i32")}));
  EXPECT_EQ(h["outputs"], nlohmann::json({spec("hidden", {1, 1, 16}, "f32")}));
}

TEST_F(ServeProtocol, TheHandshakeNamesTheReplica) {
  ServerProcess named({model_dir, "--socket", sock, "--name", "replica-a"});
  ASSERT_TRUE(named.running()) << named.err();
  EXPECT_EQ(RawClient(sock).handshake()["replica"], "replica-a");
  EXPECT_EQ(named.stop(SIGTERM), 128 + SIGTERM);
  // Unnamed over TCP: the host name and the bound port.
  ServerProcess tcp({model_dir, "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(tcp.running()) << tcp.err();
  const std::string out = tcp.out();
  const size_t at = out.find("tcp:127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string port = out.substr(at + 14, out.find_first_not_of("0123456789", at + 14) - (at + 14));
  const nlohmann::json h = RawClient("127.0.0.1", std::stoi(port)).handshake();
  EXPECT_EQ(h["replica"], host_name() + ":" + port);
}

TEST_F(ServeProtocol, ACheckpointLocationServesItsNewestStep) {
  const std::string location = dir / "run";
  const ModelConfig config = Model::load(model_dir)->config();
  ModelMetadata meta;
  meta.source.step = 20;
  meta.source.slug = "tiny-run";
  const std::vector<float> params = init_parameters(config, 9);
  ASSERT_EQ(::mkdir(location.c_str(), 0700), 0);
  write_model_directory(location + "/" + step_directory_name(10), config, params, {});
  write_model_directory(location + "/" + step_directory_name(20), config, params, meta);
  ServerProcess server({location, "--socket", sock, "--trained"});
  ASSERT_TRUE(server.running()) << server.err();
  const std::string step_dir = location + "/step-00000020";
  EXPECT_EQ(server.out().rfind("serving " + step_dir + " on " + sock + ", up to 1 call a run\n", 0), 0u)
      << server.out();
  RawClient client(sock);
  EXPECT_EQ(client.handshake()["checkpoint"], step_dir);
  EXPECT_EQ(client.handshake()["step"], 20);
  EXPECT_EQ(client.handshake()["slug"], "tiny-run");
}

TEST_F(ServeProtocol, RefusesAtStartWhatItCannotServe) {
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--output", "logit"}, "unknown output 'logit'; the model's outputs are logits, hidden"},
      {{"--output", "hidden", "--output", "hidden"}, "output 'hidden' is asked for twice"},
      {{"--trained"}, "is a model directory, not a checkpoint"},
      {{"--device", "cuda"}, cuda::compiled_in() ? "serve does not run on device 'cuda' yet"
                                                 : "device 'cuda' is not built into this lockstep"},
      {{"--batch", "0"}, "--batch must be in [1, 1024], got 0"},
      {{"--precision", "f16"}, "unknown precision 'f16'"},
      {{"--socket-mode", "0999"}, "--socket-mode must be octal permission bits"},
      {{"--cpu-cores", "0x"}, "--cpu-cores"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {model_dir, "--socket", sock};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ServerProcess server(args);
    EXPECT_NE(server.stop(0, 10), 0) << c.message;
    EXPECT_NE(server.err().find(c.message), std::string::npos) << server.err();
    EXPECT_FALSE(path_exists(sock)) << c.message;
  }
  const std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>> envs = {
      {{{"LOCKSTEP_DEVICE", "metal"}}, "device 'metal' is not built into this lockstep"},
      {{{"LOCKSTEP_CPU_CORES", "2000"}}, "--cpu-cores must be in [1, 1024], got 2000"},
  };
  for (const auto& [env, message] : envs) {
    ServerProcess server({model_dir, "--socket", sock}, env);
    EXPECT_EQ(server.stop(0, 10), 1) << message;
    EXPECT_NE(server.err().find(message), std::string::npos) << server.err();
  }
  ServerProcess missing({dir / "nowhere", "--socket", sock});
  EXPECT_EQ(missing.stop(0, 10), 1);
  EXPECT_NE(missing.err().find("no such file or directory"), std::string::npos) << missing.err();
}

TEST_F(ServeProtocol, CallsWithoutAtAnswerEveryOutputAsRunAlone) {
  ServerProcess server({model_dir, "--socket", sock, "--batch", "2"});
  ASSERT_TRUE(server.running()) << server.err();
  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {}, false);
  RawClient client(sock);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    const std::string input = call_input(random_ids(32, 256, seed));
    const std::string answer = client.call(input);
    ASSERT_EQ(answer.size(), 1 + (32 * 256 + 32 * 16) * 4u);
    EXPECT_EQ(answer, answer_alone(*model, layout, input)) << "seed " << seed;
  }
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(stop_counts(server.out(), "SIGTERM"), std::make_pair(int64_t{5}, int64_t{5}));
}

TEST_F(ServeProtocol, CallsWithAtAndOutputsAnswerOnlyWhatWasAsked) {
  ServerProcess server({model_dir, "--socket", sock, "--at", "--output", "hidden", "--output", "logits"});
  ASSERT_TRUE(server.running()) << server.err();
  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {"hidden", "logits"}, true);
  const CallLayout full(model->config(), {}, false);
  RawClient client(sock);
  for (int32_t at : {0, 7, 31}) {
    const std::vector<int32_t> ids = random_ids(32, 256, 100 + static_cast<uint64_t>(at));
    const std::string answer = client.call(call_input(ids, at));
    ASSERT_EQ(answer.size(), 1 + (16 + 256) * 4u);
    EXPECT_EQ(answer, answer_alone(*model, layout, call_input(ids, at)));
    // The same bits as position `at` of the full window: hidden first, then logits, as asked.
    const std::string whole = answer_alone(*model, full, call_input(ids));
    const size_t logits = 1, hidden = 1 + 32 * 256 * 4;
    EXPECT_EQ(answer.substr(1, 16 * 4), whole.substr(hidden + static_cast<size_t>(at) * 16 * 4, 16 * 4));
    EXPECT_EQ(answer.substr(1 + 16 * 4), whole.substr(logits + static_cast<size_t>(at) * 256 * 4, 256 * 4));
  }
}

TEST_F(ServeProtocol, EveryDeviceAndPrecisionAnswersAsRunAlone) {
  for (const char* precision : {"f32", "bf16"}) {
    LoadOptions options;
    options.precision = parse_precision(precision);
    const auto model = Model::load(model_dir, options);
    const CallLayout layout(model->config(), {"logits"}, true);
    for (const char* device : {"cpu", "reference"}) {
      ServerProcess server({model_dir, "--socket", sock, "--at", "--output", "logits", "--precision",
                            precision, "--device", device, "--cpu-cores", "2"});
      ASSERT_TRUE(server.running()) << server.err();
      RawClient client(sock);
      EXPECT_EQ(client.handshake()["precision"], precision);
      const std::string input = call_input(random_ids(32, 256, 7), 20);
      EXPECT_EQ(client.call(input), answer_alone(*model, layout, input)) << precision << " " << device;
      EXPECT_EQ(server.stop(SIGINT), 128 + SIGINT);
    }
  }
}

TEST_F(ServeProtocol, AFrameOfTheWrongLengthIsAnsweredThenClosed) {
  ServerProcess server({model_dir, "--socket", sock, "--at"});
  ASSERT_TRUE(server.running()) << server.err();
  const uint64_t right = 32 * 4 + 4;
  for (uint64_t length : {uint64_t{0}, uint64_t{1}, right - 1, right + 1, right * 2, uint64_t{1} << 40,
                          uint64_t{1} << 63, ~uint64_t{0}}) {
    RawClient client(sock);
    std::string frame(8, '\0');
    for (int i = 0; i < 8; ++i) frame[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
    frame += std::string(std::min<uint64_t>(length, 64), 'x');  // some of the body, never all of a huge one
    ASSERT_TRUE(client.send_raw(frame));
    const auto answer = client.read_frame();
    ASSERT_TRUE(answer) << length;
    EXPECT_EQ(status_of(*answer), std::string(1, '\1'));
    EXPECT_EQ(text_of(*answer), "a call frame holds 132 bytes (inputs [1, 32] i32 + at [1] i32), this one "
                                "announced " + std::to_string(length) + "; closing the connection");
    EXPECT_TRUE(client.closed_by_server()) << length;
  }
  // A body the server refused mid-send: the client's send fails, the answer is still there.
  {
    RawClient client(sock);
    std::string frame(8, '\0');
    const uint64_t length = 64 << 20;
    for (int i = 0; i < 8; ++i) frame[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
    EXPECT_FALSE(client.send_raw(frame + std::string(length, 'x')));
    const auto answer = client.read_frame();
    ASSERT_TRUE(answer);
    EXPECT_EQ(status_of(*answer), std::string(1, '\1'));
  }
  RawClient good(sock);
  EXPECT_EQ(status_of(good.call(call_input(random_ids(32, 256, 1), 3))), std::string(1, '\0'));
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(stop_counts(server.out(), "SIGTERM"), std::make_pair(int64_t{10}, int64_t{1}));
}

TEST_F(ServeProtocol, BadIdsAndAtAnswerErrorsAndKeepTheConnection) {
  ServerProcess server({model_dir, "--socket", sock, "--at", "--output", "logits"});
  ASSERT_TRUE(server.running()) << server.err();
  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {"logits"}, true);
  RawClient client(sock);
  struct Case {
    std::vector<int32_t> ids;
    int32_t at;
    std::string message;
  };
  std::vector<int32_t> high = random_ids(32, 256, 5), negative = high;
  high[5] = 256;
  negative[0] = -1;
  const std::vector<Case> cases = {
      {high, 9, "inputs must be token ids in [0, 256); got 256 at position 5"},
      {negative, 0, "inputs must be token ids in [0, 256); got -1 at position 0"},
      {random_ids(32, 256, 6), -1, "at = -1 is outside the window [0, 32)"},
      {random_ids(32, 256, 6), 32, "at = 32 is outside the window [0, 32)"},
      {random_ids(32, 256, 6), INT_MIN, "at = -2147483648 is outside the window [0, 32)"},
  };
  const std::string good = call_input(random_ids(32, 256, 8), 12);
  for (const Case& c : cases) {
    const std::string answer = client.call(call_input(c.ids, c.at));
    EXPECT_EQ(answer, "\1" + c.message);
    EXPECT_EQ(client.call(good), answer_alone(*model, layout, good)) << "after: " << c.message;
  }
  EXPECT_EQ(server.stop(SIGHUP), 128 + SIGHUP);
  // Ten calls answered; only the good ones ran the model.
  EXPECT_EQ(stop_counts(server.out(), "SIGHUP"), std::make_pair(int64_t{10}, int64_t{5}));
}

TEST_F(ServeProtocol, ClientsThatVanishAffectNoOneElse) {
  ServerProcess server({model_dir, "--socket", sock, "--batch", "4"});
  ASSERT_TRUE(server.running()) << server.err();
  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {}, false);
  const std::string input = call_input(random_ids(32, 256, 11));
  const std::string expected = answer_alone(*model, layout, input);
  RawClient steady(sock);
  EXPECT_EQ(steady.call(input), expected);
  {  // gone before reading the handshake
    RawClient c(sock);
  }
  {  // gone mid-prefix
    RawClient c(sock);
    c.send_raw(std::string(3, '\0'));
  }
  {  // gone mid-frame
    RawClient c(sock);
    std::string frame(8, '\0');
    frame[0] = static_cast<char>(128);
    c.send_raw(frame + input.substr(0, 50));
  }
  EXPECT_EQ(steady.call(input), expected);
  {  // gone mid-answer: 40 pipelined calls of 35 KB answers, none read
    RawClient c(sock);
    std::string frames;
    for (int i = 0; i < 40; ++i) {
      std::string f(8, '\0');
      f[0] = static_cast<char>(128);
      frames += f + input;
    }
    c.send_raw(frames);
    ASSERT_TRUE(c.read_frame());  // at least one answer is on its way
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(steady.call(input), expected);
  RawClient late(sock);
  EXPECT_EQ(late.call(input), expected);
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_NE(stop_counts(server.out(), "SIGTERM").first, -1) << server.out();
}

}  // namespace
}  // namespace lockstep::test
