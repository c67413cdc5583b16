// Building and loading models; the accessors of lockstep/model.hpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

#include "core/cpu_info.hpp"
#include "core/pages.hpp"
#include "core/sha256.hpp"
#include "format/gguf_model.hpp"
#include "format/gguf_read.hpp"
#include "format/mapped_file.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/dispatch.hpp"
#include "lockstep/format.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"

namespace lockstep {

int default_thread_count() { return physical_cores_available(); }

std::shared_ptr<ThreadPool> make_thread_pool(int threads) {
  if (threads < 0 || threads > max_threads)
    throw Error(ErrorKind::invalid_argument,
                "threads must be in [1, " + std::to_string(max_threads) + "], or 0 for one per core");
  return std::make_shared<ThreadPool>(threads == 0 ? default_thread_count() : threads);
}

int thread_pool_size(const ThreadPool& pool) noexcept { return pool.size(); }

std::vector<std::string> simd_targets() {
  std::vector<std::string> out;
  for (const simd::Kernels* k : simd::supported_kernels()) out.emplace_back(k->name);
  return out;
}

namespace {

const simd::Kernels& choose_kernels(const std::string& name) {
  if (name.empty()) return simd::best_kernels();
  std::string known;
  for (const simd::Kernels* k : simd::supported_kernels()) {
    if (name == k->name) return *k;
    known += (known.empty() ? "" : ", ") + std::string(k->name);
  }
  throw Error(ErrorKind::unsupported,
              "SIMD target '" + name + "' is not available here; this CPU runs " + known);
}

void check_threads(int threads, bool zero_ok) {
  if ((threads == 0 && zero_ok) || (threads >= 1 && threads <= max_threads)) return;
  throw Error(ErrorKind::invalid_argument,
              "threads must be in [1, " + std::to_string(max_threads) + "], got " + std::to_string(threads));
}

// An int8dot model's GGUF weights file: its bytes must have model.json's SHA-256, and the
// configuration its keys give (with model.json's window) must be model.json's.
std::unique_ptr<Model::Impl> load_gguf_weights(const std::string& path, const format::ModelDescription& d,
                                               const ModelOptions& options) {
  // The blocks' rows stay in the mapped file (kept by them): the kernels read their own records,
  // and the reference device, parameters() and export-gguf read the rows from the page cache.
  const auto file = std::make_shared<const format::MappedFile>(path);
  const std::string sha = sha256_hex(file->bytes().data(), file->bytes().size());
  if (sha != d.weights.sha256)
    throw Error(ErrorKind::format, path + ": its SHA-256 is " + sha + " but model.json says " + d.weights.sha256);
  const format::GgufFile gguf = format::parse_gguf(file->bytes(), path);
  const bool k_quants = d.profile == int8dot_k_profile_name();
  format::GgufModel m = format::read_gguf_llama(gguf, path, d.config.length, file, k_quants);
  if (k_quants && !quant::has_k_quants(m.blocks))
    throw Error(ErrorKind::format, path + ": model.json names profile " + d.profile +
                                       " but the file has no Q4_K, Q5_K or Q6_K matrix (its profile is " +
                                       int8dot_profile_name() + ")");
  m.config.batch = d.config.batch;
  if (!(m.config == d.config))
    throw Error(ErrorKind::format, path + ": the configuration its keys give is not model.json's");
  auto blocks = std::make_shared<const quant::BlockMatrices>(std::move(m.blocks));
  auto impl = std::make_unique<Model::Impl>(m.config, std::move(m.parameters), options, nullptr, nullptr, &sha,
                                            std::move(blocks));
  file->drop(file->bytes());  // read whole (digest, rows, packing): the pages go back to the file
  return impl;
}

}  // namespace


Model::Impl::Impl(const ModelConfig& c, std::vector<float> params, const ModelOptions& options,
                  quant::Q8Matrices* q8, quant::Q4Matrices* q4, const std::string* read_sha256,
                  std::shared_ptr<const quant::BlockMatrices> block_matrices)
    : config(c), registry(c), parameters(std::move(params)), blocks(std::move(block_matrices)) {
  if (static_cast<int64_t>(parameters.size()) != registry.total())
    throw Error(ErrorKind::invalid_argument, "parameters must be float32 [" +
                                                 std::to_string(registry.total()) + "], got " +
                                                 std::to_string(parameters.size()) + " values");
  if (read_sha256) {
    sha256 = *read_sha256;  // read_weights checked every value and the digest
  } else {
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (!std::isfinite(parameters[i]))
        throw Error(ErrorKind::invalid_argument,
                    "parameters must be finite; element " + std::to_string(i) + " is " +
                        std::to_string(parameters[i]));
    }
    sha256 = sha256_f32_le(parameters);
  }
  check_threads(options.threads, true);
  device = options.device;
  threads = options.threads;
  pool = options.pool;
  if (options.precision) precision = *options.precision;
  if (blocks) {
    // lockstep-int8dot-2 where a K-quant is computed in integers (the loader and import give the
    // K-quants to blocks for that profile alone).
    profile = quant::has_k_quants(*blocks) ? int8dot_k_profile_name() : int8dot_profile_name();
    if (precision != Precision::f32)
      throw Error(ErrorKind::unsupported, std::string("precision bf16 does not apply to a model of profile ") + profile +
                                              " (its matrices are GGUF blocks, computed in integers)");
    if (device == Device::cuda) refuse_cuda_for_blocks(profile);
  }
  const size_t half = static_cast<size_t>(c.head_dim() / 2);
  rope_cos.resize(static_cast<size_t>(c.length) * half);
  rope_sin.resize(static_cast<size_t>(c.length) * half);
  if (c.rope_scaling) {
    const RopeScaling& r = *c.rope_scaling;
    const ref::RopeLlama3 llama3{r.factor, r.low_freq_factor, r.high_freq_factor,
                                 static_cast<double>(r.original_max_position)};
    ref::rope_tables(c.length, c.head_dim(), c.rope_theta, rope_cos.data(), rope_sin.data(), &llama3);
  } else {
    ref::rope_tables(c.length, c.head_dim(), c.rope_theta, rope_cos.data(), rope_sin.data());
  }
  attention_scale = ref::attention_scale<float>(c.head_dim());
  // Each matrix packed gives back the whole pages of its f32 copy at once, before the next is
  // read: loading holds one copy of the weights, not two. bf16 panels hold the values rounded, so
  // their low halves are kept first (Released::low).
  auto release = [&](const simd::PackedMatrix& b, PackedParts parts) {
    if (b.blocks) {
      // The blocks hold the values: the f32 copy's whole pages go (the reader gave them back
      // already; a second call gives the same range), restored from the rows on demand. The
      // embedding is never a packed matrix, so its lookup keeps reading the f32 rows.
      for (const auto& [offset, N] : parts) {
        const auto it = blocks->find(offset);
        if (it == blocks->end()) throw Error(ErrorKind::internal, "a matrix packed from blocks has no rows");
        Released r{0, 0, &b, 0, offset, N, {}, {}, &it->second};
        std::tie(r.begin, r.end) = release_float_pages(parameters.data(), offset, b.K * N);
        if (r.begin < r.end) released.push_back(std::move(r));
      }
      return;
    }
    // Pages given back at read hold zeros: only a matrix packed from its q8/q4 form may be there.
    // (An int8dot model's file gives nothing back at read: its F32/F16/BF16 matrices, beside the
    // blocks, are released here as an f32 model's are.)
    if (read_sha256 && !blocks && !b.q8 && !b.q4)
      throw Error(ErrorKind::internal, "a matrix given back at read was packed from its f32 values");
    int64_t column0 = 0;
    for (const auto& [offset, N] : parts) {
      Released r{0, 0, &b, column0, offset, N, {}, {}};
      if (b.bf16) {  // the low halves first, from the values about to be given back
        const auto [lo, hi] = whole_float_pages(parameters.data(), offset, b.K * N);
        r.low.resize(static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
        for (int64_t i = lo; i < hi; ++i) {
          const uint32_t u = std::bit_cast<uint32_t>(parameters[static_cast<size_t>(i)]);
          r.low[static_cast<size_t>(i - lo)] = static_cast<uint16_t>(u & 0xffffu);
          if ((u & 0xffffu) == 0x8000u && ((u >> 16) & 1u)) r.ties_up.push_back(i);
        }
      }
      std::tie(r.begin, r.end) = release_float_pages(parameters.data(), offset, b.K * N);
      if (r.begin < r.end) released.push_back(std::move(r));
      column0 += N;
      // The file's int8/4-bit values of a part now in panels are needed no more.
      if (b.q8 && q8) q8->erase(offset);
      if (b.q4 && q4) q4->erase(offset);
    }
  };
  const bool bf16 = precision == Precision::bf16;
  packed = pack_weights(config, registry, parameters.data(), &choose_kernels(options.simd_target), bf16,
                              bf16 ? nullptr : q8, bf16 ? nullptr : q4, release, blocks.get());
}

const std::vector<float>& Model::Impl::full_parameters() const {
  if (released.empty()) return parameters;
  std::call_once(restore_once, [this] {
    for (const Released& r : released) {
      if (r.rows) {  // the released range dequantized as the reader would have
        quant::dequantize_range(*r.rows, parameters.data() + r.offset, true, r.begin - r.offset, r.end - r.offset);
        continue;
      }
      const simd::PackedMatrix& b = *r.packed;
      // Row by row: elements [begin, end) are parameters[offset + k N + n], column column0 + n.
      for (int64_t i = r.begin; i < r.end;) {
        const int64_t k = (i - r.offset) / r.N, n0 = (i - r.offset) % r.N;
        const int64_t n1 = std::min(r.N, n0 + (r.end - i));
        float* dst = parameters.data() + i;
        for (int64_t n = n0; n < n1; ++n) dst[n - n0] = b.weight(k, r.column0 + n);
        if (b.bf16) {
          for (int64_t n = n0; n < n1; ++n) {
            const int64_t at = i + (n - n0);
            const uint32_t low = r.low[static_cast<size_t>(at - r.begin)];
            const bool up =
                low > 0x8000u || (low == 0x8000u && std::binary_search(r.ties_up.begin(), r.ties_up.end(), at));
            const uint32_t rounded = std::bit_cast<uint32_t>(dst[n - n0]);
            dst[n - n0] = std::bit_cast<float>(rounded - (up ? 0x10000u : 0u) + low);
          }
        }
        i += n1 - n0;
      }
    }
    restored.store(true, std::memory_order_release);
  });
  return parameters;
}

const std::vector<float>& Model::Impl::bf16_weights() const {
  std::call_once(bf16_once, [this] {
    const std::vector<float>& p = full_parameters();
    bf16_parameters.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) bf16_parameters[i] = ref::round_bf16(p[i]);
    bf16_made.store(true, std::memory_order_release);
  });
  return bf16_parameters;
}

size_t Model::Impl::resident_weight_bytes() const {
  size_t bytes = parameters.size() * sizeof(float);
  if (bf16_made.load(std::memory_order_acquire)) bytes += bf16_parameters.size() * sizeof(float);
  // Released pages hold nothing until full_parameters() restores them.
  for (const Released& r : released) {
    bytes += r.low.size() * sizeof(uint16_t) + r.ties_up.size() * sizeof(int64_t);
    if (!restored.load(std::memory_order_acquire)) bytes -= static_cast<size_t>(r.end - r.begin) * sizeof(float);
  }
  auto add = [&](const simd::PackedMatrix& m) {
    bytes += m.blocks ? m.blocks->data.size() : m.bytes();
  };
  for (const auto& L : packed->layers) {
    add(L.qkv);
    add(L.wo);
    add(L.gate_up);
    add(L.w_down);
  }
  add(packed->head);
  return bytes;
}

ThreadPool& Model::Impl::thread_pool() const {
  std::lock_guard lock(pool_mutex);
  if (!pool) pool = std::make_shared<ThreadPool>(threads > 0 ? threads : default_thread_count());
  return *pool;
}

int Model::Impl::threads_for(const CallOptions& call) const {
  if (call.threads) {
    check_threads(*call.threads, false);
    return *call.threads;
  }
  if (threads > 0) return threads;
  return thread_pool().size();
}

// A model whose device is cuda has its weights copied to the GPU as it loads (and is refused
// there, in one line, where no GPU runs).
Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  if (impl_->device == Device::cuda) impl_->on_cuda();
}
Model::~Model() = default;

std::shared_ptr<const Model> Model::from_parameters(const ModelConfig& config,
                                                    std::span<const float> parameters,
                                                    const ModelOptions& options) {
  config.validate();
  auto impl = std::make_unique<Impl>(config, std::vector<float>(parameters.begin(), parameters.end()),
                                     options);
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

std::shared_ptr<const Model> Model::load(std::string_view path, const LoadOptions& options) {
  const ResolvedPath resolved = resolve_model_path(path);
  const std::string json_path = resolved.model_dir + "/model.json";
  const format::ModelDescription d = format::parse_model_json(
      format::read_text_file(json_path, format::kMaxModelJsonBytes), json_path);
  const format::WeightsFile* weights = &d.weights;
  bool trained = !d.weights_averaged;
  if (options.trained) {
    if (!resolved.checkpoint_step)
      throw Error(ErrorKind::invalid_argument,
                  "'" + resolved.model_dir + "' is a model directory, not a checkpoint: "
                  "trained weights are a checkpoint's alone (export --trained writes them into "
                  "a model directory)");
    if (d.trained) weights = &*d.trained;
    trained = true;
  }
  // A frozen :load parameter is read from the file the run read (relative: from the current
  // directory), refused with LS-LOAD-001 when that file has changed.
  quant::Q8Matrices q8;
  quant::Q4Matrices q4;
  ModelOptions model_options = options;
  if (!model_options.precision) model_options.precision = d.precision;
  // A q8/q4 file computed in f32 with no :load parameters has every matrix packed from its
  // packed form, so its expanded pages can go as soon as they are checked and hashed: loading
  // never holds the f32 copy of the matrices.
  if (weights->format == format::kGgufFormat) {  // profile lockstep-int8dot-1 (model.json checked the pairing)
    std::unique_ptr<Impl> impl = load_gguf_weights(resolved.model_dir + "/" + weights->file, d, model_options);
    impl->source = d.source;
    impl->source.directory = resolved.model_dir;
    impl->weight_format = weights->format;
    impl->eos_token_ids = d.eos_token_ids;
    return std::shared_ptr<const Model>(new Model(std::move(impl)));
  }
  const bool give_back = (weights->format == format::kQ8Format || weights->format == format::kQ4Format) &&
                         *model_options.precision == Precision::f32 && d.loaded.empty();
  std::vector<float> params =
      format::read_weights(resolved.model_dir + "/" + weights->file, d.config, weights->sha256, d.loaded,
                           weights->format, &q8, &q4, give_back);
  auto impl = std::make_unique<Impl>(d.config, std::move(params), model_options, &q8, &q4,
                                     give_back ? &weights->sha256 : nullptr);
  q8.clear();
  q4.clear();
  impl->source = d.source;
  impl->source.directory = resolved.model_dir;
  impl->source.trained_weights = trained;
  if (resolved.step && !impl->source.step) impl->source.step = resolved.step;
  impl->weight_format = weights->format;
  impl->profile = find_profile(d.profile);  // parse_model_json refused any other
  impl->eos_token_ids = d.eos_token_ids;
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const ParameterRegistry& Model::registry() const { return impl_->registry; }
std::span<const float> Model::parameters() const { return impl_->full_parameters(); }
const std::string& Model::parameters_sha256() const { return impl_->sha256; }
Precision Model::precision() const { return impl_->precision; }
const std::string& Model::weight_format() const { return impl_->weight_format; }
const char* Model::profile() const { return impl_->profile; }
const ModelSource& Model::source() const { return impl_->source; }
std::span<const int32_t> Model::eos_token_ids() const { return impl_->eos_token_ids; }
Device Model::default_device() const { return impl_->device; }
int Model::default_threads() const { return impl_->threads; }

std::shared_ptr<ThreadPool> Model::pool() const {
  impl_->thread_pool();
  std::lock_guard lock(impl_->pool_mutex);
  return impl_->pool;
}

}  // namespace lockstep
