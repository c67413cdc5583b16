// The CUDA device in a build without CUDA (LOCKSTEP_CUDA off): parse_device refuses "cuda" with
// the message of every device not built in, so nothing reaches these but a direct call.
#include "kernels/cuda/device.hpp"

#include "lockstep/error.hpp"

namespace lockstep::cuda {

struct DeviceModel::State {};

bool compiled_in() noexcept { return false; }
std::string gpu_unavailable() { return "this lockstep is built without CUDA (LOCKSTEP_CUDA off)"; }

std::shared_ptr<const DeviceModel> DeviceModel::upload(const ModelView&) {
  throw Error(ErrorKind::unsupported, "device 'cuda' is not built into this lockstep; it runs on 'cpu' and 'reference'");
}

DeviceModel::DeviceModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceModel::~DeviceModel() = default;
void DeviceModel::forward(std::span<const RowSpec>) const {}
const char* DeviceModel::device_name() const { return ""; }

}  // namespace lockstep::cuda
