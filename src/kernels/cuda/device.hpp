// The CUDA device (docs/CUDA.md): a model's weights on an NVIDIA GPU and the batched forward
// pass there, with the reference's bits. Compiled from device.cu where the build has CUDA
// (LOCKSTEP_CUDA), else from no_cuda/device.cpp, which refuses. Plain C++: the model layer
// includes it without nvcc.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "kernels/cuda/layout.hpp"

namespace lockstep::cuda {

// Whether this build has the CUDA backend.
bool compiled_in() noexcept;
// Why no GPU can run here ("" when one can): the build has no CUDA, no driver, no device. For
// tests that skip, saying why; a call on the device gives the same reason in its error.
std::string gpu_unavailable();

// The weight arena on the GPU, copied there once. Calls may come from several threads at once:
// each runs on its own stream with its own buffers.
class DeviceModel {
 public:
  // Copies the model's weights to device 0. Throws Error(unsupported), one line, when the build
  // has no CUDA, when no driver or no GPU is found, or when the model needs what the kernels lack
  // (naming it); Error(internal) for a CUDA failure (out of memory: naming the bytes).
  static std::shared_ptr<const DeviceModel> upload(const ModelView& model);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // The forward pass of `rows` (RowSpec: ids, outputs wanted, where they go), in host memory.
  void forward(std::span<const RowSpec> rows) const;
  // The GPU's name, as the driver gives it.
  const char* device_name() const;

  struct State;

 private:
  explicit DeviceModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace lockstep::cuda
