// The names the public API parses and prints: the arithmetic profile, devices, precisions.
#include "lockstep/model.hpp"

namespace lockstep {

const char* profile_name() noexcept { return "lockstep-f32-1"; }

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "reference") return Device::reference;
  if (name == "cuda" || name == "metal")
    throw Error(ErrorKind::unsupported, "device '" + std::string(name) +
                                            "' is not built into this lockstep; it runs on 'cpu' "
                                            "and 'reference'");
  throw Error(ErrorKind::invalid_argument,
              "unknown device '" + std::string(name) + "'; expected cpu, reference, cuda or metal");
}

const char* device_name(Device device) noexcept {
  return device == Device::reference ? "reference" : "cpu";
}

Precision parse_precision(std::string_view name) {
  if (name == "f32") return Precision::f32;
  if (name == "bf16") return Precision::bf16;
  throw Error(ErrorKind::invalid_argument,
              "unknown precision '" + std::string(name) + "'; expected f32 or bf16");
}

const char* precision_name(Precision precision) noexcept {
  return precision == Precision::bf16 ? "bf16" : "f32";
}

}  // namespace lockstep
