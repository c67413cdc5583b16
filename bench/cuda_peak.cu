// The GPU's FP32 FMA peak, measured: the yardstick for the cuda device's figures
// (tools/cuda_device_check.sh prints the forward pass's share of it). Every thread runs 8
// independent __fmaf_rn chains (enough in flight to fill the FMA pipes), over a grid of many
// blocks per SM; FLOP/s = 2 * fmas / time, the best of 5 timed runs after a warm-up.
//   lockstep_cuda_peak      prints one line: GPU, SMs, TFLOP/s
#include <cuda_runtime.h>

#include <cstdio>

namespace {

constexpr int kChains = 8, kIterations = 1 << 14, kThreads = 256;

__global__ void __launch_bounds__(kThreads) fma_chains(float* out, float a, float b) {
  float v[kChains];
  for (int c = 0; c < kChains; ++c) v[c] = static_cast<float>(threadIdx.x + c);
  for (int i = 0; i < kIterations; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) v[c] = __fmaf_rn(v[c], a, b);
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum = __fadd_rn(sum, v[c]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the chains alive
}

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "lockstep_cuda_peak: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  if (!ok(cudaGetDeviceProperties(&prop, 0), "no usable GPU")) return 1;
  const int blocks = prop.multiProcessorCount * 32;
  float* out = nullptr;
  if (!ok(cudaMalloc(&out, sizeof(float) * blocks * kThreads), "cudaMalloc")) return 1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  fma_chains<<<blocks, kThreads>>>(out, 0.999f, 0.001f);
  if (!ok(cudaDeviceSynchronize(), "warm-up")) return 1;
  float best_ms = 1e30f;
  for (int run = 0; run < 5; ++run) {
    cudaEventRecord(start);
    fma_chains<<<blocks, kThreads>>>(out, 0.999f, 0.001f);
    cudaEventRecord(stop);
    if (!ok(cudaEventSynchronize(stop), "timed run")) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (ms < best_ms) best_ms = ms;
  }
  const double flops = 2.0 * blocks * kThreads * static_cast<double>(kIterations) * kChains;
  std::printf("peak fma: %s, %d SMs: %.2f TFLOP/s f32 (%.3f ms for %.3g FLOP)\n", prop.name, prop.multiProcessorCount,
              flops / (best_ms * 1e-3) / 1e12, best_ms, flops);
  cudaFree(out);
  return 0;
}
