// Where no GPU runs, the cuda device is refused in one line, saying why; a build without CUDA
// refuses the name as it refuses every device not built in (docs/CUDA.md).
#include <gtest/gtest.h>

#include <functional>

#include "kernels/cuda/device.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaRefusal, WithoutGpuTheDeviceIsRefusedInOneLine) {
  const ModelConfig c = test::tiny_config(8);
  ModelOptions options;
  if (!cuda::compiled_in()) {
    EXPECT_NE(error_of([] { parse_device("cuda"); }).find("device 'cuda' is not built into this lockstep"),
              std::string::npos);
    return;
  }
  ASSERT_EQ(parse_device("cuda"), Device::cuda);
  EXPECT_STREQ(device_name(Device::cuda), "cuda");
  if (cuda::gpu_unavailable().empty()) GTEST_SKIP() << "a GPU is here: test_cuda checks the device itself";
  options.device = Device::cuda;
  const std::string at_load = error_of([&] { Model::from_parameters(c, init_parameters(c, 1), options); });
  EXPECT_NE(at_load.find("device 'cuda': no usable NVIDIA GPU on this machine ("), std::string::npos) << at_load;
  EXPECT_EQ(at_load.find('\n'), std::string::npos) << at_load;
  const auto model = Model::from_parameters(c, init_parameters(c, 1));
  const std::vector<int32_t> ids = {1, 2, 3};
  const std::string at_call = error_of([&] { model->logits({ids.data(), 1, 3}, {}, {Device::cuda, std::nullopt}); });
  EXPECT_EQ(at_call, at_load);
}

TEST(CudaRefusal, CommandSaysWhyInOneLine) {
  test::TempDir dir;
  const std::string m = dir / "m";
  ASSERT_EQ(test::run_command({LOCKSTEP_BINARY, "init", "--seed", "1", "-o", m, "--d-model", "16", "--n-layers",
                               "1", "--n-heads", "2", "--length", "8"}).status, 0);
  const std::vector<int32_t> ids(8, 65);
  const std::string input(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  const auto r = test::run_command({LOCKSTEP_BINARY, "call", m, "--device", "cuda"}, input);
  if (cuda::compiled_in() && cuda::gpu_unavailable().empty()) {
    EXPECT_EQ(r.status, 0) << r.err;
    return;
  }
  EXPECT_EQ(r.status, 1) << r.err;
  const std::string want = cuda::compiled_in() ? "device 'cuda': no usable NVIDIA GPU on this machine ("
                                               : "device 'cuda' is not built into this lockstep";
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
}

}  // namespace
}  // namespace lockstep
