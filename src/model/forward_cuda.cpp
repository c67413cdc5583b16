// The forward pass on the cuda device: the model handed to kernels/cuda as a ModelView (flat
// parameters, registry offsets, RoPE tables), its weights copied to the GPU once, and each call's
// rows run there (kernels/cuda/device.hpp; docs/CUDA.md).
#include "kernels/cuda/device.hpp"
#include "model/model_impl.hpp"

namespace lockstep {

cuda::ModelView cuda_view(const Model::Impl& m) {
  const ModelConfig& c = m.config;
  cuda::ModelView v;
  v.shape = {c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim(), c.d_ff, c.length,
             c.norm_eps, m.attention_scale, c.qkv_bias, c.o_bias, m.precision == Precision::bf16};
  v.params = m.full_parameters().data();
  v.matmul_params = m.matmul_weights();
  v.embed = m.registry.embed();
  v.final_norm = m.registry.final_norm();
  v.head = m.registry.head();
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const ParameterRegistry::Layer& w = m.registry.layer(l);
    v.layers.push_back({w.attn_norm, w.wq, w.wk, w.wv, w.wo, w.mlp_norm, w.w_gate, w.w_up, w.w_down, w.bq, w.bk,
                        w.bv, w.bo});
  }
  v.rope_cos = m.rope_cos.data();
  v.rope_sin = m.rope_sin.data();
  return v;
}

void Model::Impl::refuse_cuda_for_blocks(const char* profile) {
  throw Error(ErrorKind::unsupported, std::string("device 'cuda' computes profile ") + profile_name() +
                                          " alone; this model's is " + profile +
                                          " (matrices in GGUF blocks, computed in integers): run it with --device cpu "
                                          "or reference");
}

const cuda::DeviceModel& Model::Impl::on_cuda() const {
  std::lock_guard lock(cuda_mutex);
  if (!cuda_model) cuda_model = cuda::DeviceModel::upload(cuda_view(*this));
  return *cuda_model;
}

void forward_cuda(const Model::Impl& model, std::span<const RowRequest> rows) {
  std::vector<cuda::RowSpec> specs;
  specs.reserve(rows.size());
  for (const RowRequest& r : rows) specs.push_back({r.ids.data(), r.out_begin, r.out_end, r.logits, r.hidden});
  model.on_cuda().forward(specs);
}

}  // namespace lockstep
