// The CUDA device: the kernels of kernels/cuda/*.hpp as __global__ functions (each calls the same
// bodies the host runs in the tests, with __syncthreads between the phases), the forward plan's
// launches on a stream, and the weights' arena on the GPU. The runtime is linked statically and
// finds the driver when first asked, so lockstep starts on machines without one; a call then
// says what is missing in one line.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "kernels/cuda/device.hpp"
#include "kernels/cuda/forward_plan.hpp"
#include "lockstep/error.hpp"

namespace lockstep::cuda {
namespace {

__device__ inline ThreadAt here() {
  return {static_cast<int64_t>(blockIdx.x), static_cast<int32_t>(blockIdx.y), static_cast<int32_t>(threadIdx.x)};
}

__global__ void __launch_bounds__(kEmbedThreads) embed_kernel(EmbedArgs a) { embed_body(a, here()); }

__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(RmsNormArgs a) {
  __shared__ RmsNormShared shared;
  rmsnorm_phase_scale(a, here(), shared);
  __syncthreads();
  rmsnorm_phase_apply(a, here(), shared);
}

__global__ void __launch_bounds__(kMatmulThreads) matmul_kernel(MatmulArgs a) {
  __shared__ MatmulShared shared;
  MatmulAccumulators acc;
  matmul_begin(acc);
  const int64_t tiles = matmul_k_tiles(a);
  for (int64_t kt = 0; kt < tiles; ++kt) {
    matmul_load(a, here(), kt, shared);
    __syncthreads();
    matmul_step(a, here(), kt, shared, acc);
    __syncthreads();
  }
  matmul_store(a, here(), acc);
}

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(RopeArgs a) { rope_body(a, here()); }

__global__ void __launch_bounds__(kAttentionThreads) attention_kernel(AttentionArgs a) {
  __shared__ AttentionShared shared;
  attention_phase_query(a, here(), shared);
  __syncthreads();
  attention_phase_scores(a, here(), shared);
  __syncthreads();
  attention_phase_max(a, here(), shared);
  __syncthreads();
  attention_phase_exp(a, here(), shared);
  __syncthreads();
  attention_phase_sum(a, here());
}

__global__ void __launch_bounds__(kSwigluThreads) swiglu_kernel(SwigluArgs a) { swiglu_body(a, here()); }

// A CUDA failure as an Error naming what was being done.
void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(ErrorKind::internal,
              std::string("device 'cuda': ") + what + " failed: " + cudaGetErrorString(status));
}

// The grid of a launch: x up to 2^31 - 1 blocks, y up to 65535.
dim3 grid_of(int64_t x, int64_t y = 1) { return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), 1); }

struct DeviceLaunch {
  cudaStream_t stream;
  void after(const char* what) { check(cudaGetLastError(), what); }
  void embed(const EmbedArgs& a) {
    embed_kernel<<<grid_of(embed_blocks(a)), kEmbedThreads, 0, stream>>>(a);
    after("the embedding kernel");
  }
  void rmsnorm(const RmsNormArgs& a) {
    rmsnorm_kernel<<<grid_of(a.rows), kNormThreads, 0, stream>>>(a);
    after("the RMSNorm kernel");
  }
  void matmul(const MatmulArgs& a) {
    matmul_kernel<<<grid_of(matmul_blocks_x(a), matmul_blocks_y(a)), kMatmulThreads, 0, stream>>>(a);
    after("the matmul kernel");
  }
  void rope(const RopeArgs& a) {
    rope_kernel<<<grid_of(rope_blocks(a)), kRopeThreads, 0, stream>>>(a);
    after("the RoPE kernel");
  }
  void attention(const AttentionArgs& a) {
    attention_kernel<<<grid_of(a.rows, a.n_heads), kAttentionThreads, 0, stream>>>(a);
    after("the attention kernel");
  }
  void swiglu(const SwigluArgs& a) {
    swiglu_kernel<<<grid_of(swiglu_blocks(a)), kSwigluThreads, 0, stream>>>(a);
    after("the SwiGLU kernel");
  }
};

// Device memory owned by one object, freed when it goes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes == 0) return;
    const cudaError_t status = cudaMalloc(&data_, bytes);
    if (status != cudaSuccess)
      throw Error(ErrorKind::internal, "device 'cuda': cannot allocate " + std::to_string(bytes) +
                                           " bytes of GPU memory: " + cudaGetErrorString(status));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_) { o.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    return *this;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
};

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& v, cudaStream_t stream) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) check(cudaMemcpyAsync(b.as<T>(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream), "copying to the GPU");
  return b;
}

}  // namespace

std::string gpu_unavailable() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return "";
  cudaGetLastError();  // clear the status of the failed query
  return status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device is visible";
}

namespace {

// The one-line refusal when no GPU can run: no driver, no device, or a driver too old.
void require_gpu() {
  const std::string why = gpu_unavailable();
  if (!why.empty()) throw Error(ErrorKind::unsupported, "device 'cuda': no usable NVIDIA GPU on this machine (" + why + ")");
}

}  // namespace

struct DeviceModel::State {
  ForwardShape shape;
  WeightArena arena;  // the layout; its values are on the GPU, not here
  DeviceBuffer weights;
  std::string name;
};

bool compiled_in() noexcept { return true; }

std::shared_ptr<const DeviceModel> DeviceModel::upload(const ModelView& model) {
  require_gpu();
  const ForwardShape& s = model.shape;
  if (s.head_dim > kMaxHeadDim || s.head_dim % 2 != 0)
    throw Error(ErrorKind::unsupported, "device 'cuda' runs heads of an even head_dim up to " +
                                            std::to_string(kMaxHeadDim) + "; this model's is " + std::to_string(s.head_dim));
  auto state = std::make_unique<State>();
  state->shape = s;
  state->arena = arrange_weights(model);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "reading the GPU's properties");
  state->name = prop.name;
  state->weights = DeviceBuffer(state->arena.values.size() * sizeof(float));
  check(cudaMemcpy(state->weights.as<float>(), state->arena.values.data(), state->arena.values.size() * sizeof(float),
                   cudaMemcpyHostToDevice),
        "copying the weights to the GPU");
  state->arena.values.clear();
  state->arena.values.shrink_to_fit();
  return std::shared_ptr<const DeviceModel>(new DeviceModel(std::move(state)));
}

DeviceModel::DeviceModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceModel::~DeviceModel() = default;

const char* DeviceModel::device_name() const { return state_->name.c_str(); }

void DeviceModel::forward(std::span<const RowSpec> rows) const {
  const ForwardShape& s = state_->shape;
  const BatchLayout batch = arrange_batch(rows);
  const int64_t R = batch.rows(), O = batch.n_outputs();
  if (R == 0) return;
  const int64_t attention_rows = attention_rows_for(s, R, batch.max_positions);
  const ForwardSizes n = forward_sizes(s, R, O, attention_rows, batch.max_positions, batch.any_logits);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  const DeviceBuffer ids = upload_vector(batch.ids, stream), pos = upload_vector(batch.pos, stream),
                     outputs = upload_vector(batch.outputs, stream);
  const DeviceBuffer x(n.x * 4), xn(n.x * 4), qkv(n.qkv * 4), att(n.att * 4), gate_up(n.gate_up * 4), h(n.h * 4),
      scores(n.scores * 4), hidden(n.hidden * 4), logits(n.logits * 4);
  const ForwardBuffers b{ids.as<int32_t>(), pos.as<int32_t>(), outputs.as<int32_t>(), x.as<float>(), xn.as<float>(),
                         qkv.as<float>(), att.as<float>(), gate_up.as<float>(), h.as<float>(), scores.as<float>(),
                         hidden.as<float>(), batch.any_logits ? logits.as<float>() : nullptr, R, O, attention_rows,
                         batch.max_positions};
  DeviceLaunch launch{stream};
  run_forward(launch, s, state_->arena, state_->weights.as<float>(), b);
  std::vector<float> host_logits(static_cast<size_t>(n.logits)), host_hidden(static_cast<size_t>(n.hidden));
  if (n.logits)
    check(cudaMemcpyAsync(host_logits.data(), b.logits, n.logits * 4, cudaMemcpyDeviceToHost, stream), "copying logits back");
  if (batch.any_hidden)
    check(cudaMemcpyAsync(host_hidden.data(), b.hidden, n.hidden * 4, cudaMemcpyDeviceToHost, stream), "copying hidden states back");
  check(cudaStreamSynchronize(stream), "the forward pass");
  scatter_outputs(rows, s, host_logits.data(), host_hidden.data());
}

}  // namespace lockstep::cuda
