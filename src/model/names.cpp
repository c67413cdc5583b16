// The names of the devices, which the public API parses and prints (those of the arithmetic
// profile and the precisions, which model.json records, are format/config.cpp's).
#include "kernels/cuda/device.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "reference") return Device::reference;
  if (name == "cuda" && cuda::compiled_in()) return Device::cuda;
  if (name == "cuda" || name == "metal")
    throw Error(ErrorKind::unsupported, "device '" + std::string(name) +
                                            "' is not built into this lockstep; it runs on 'cpu' "
                                            "and 'reference'");
  throw Error(ErrorKind::invalid_argument,
              "unknown device '" + std::string(name) + "'; expected cpu, reference, cuda or metal");
}

const char* device_name(Device device) noexcept {
  switch (device) {
    case Device::reference: return "reference";
    case Device::cuda: return "cuda";
    case Device::cpu: break;
  }
  return "cpu";
}

}  // namespace lockstep
