#include "format/format_error.hpp"
#include "format/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "core/pages.hpp"
#include "core/sha256.hpp"
#include "format/mapped_file.hpp"
#include "format/safetensors.hpp"
#include "lockstep/error.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"

namespace lockstep::format {
namespace {


std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// What the packed writers (q8, q4) need of the flat parameters: the registry's count, all finite.
void check_packable(const std::string& path, const ParameterRegistry& registry, std::span<const float> parameters,
                    const char* writer) {
  if (static_cast<int64_t>(parameters.size()) != registry.total())
    throw Error(ErrorKind::invalid_argument, writer + (": " + std::to_string(parameters.size())) + " values for " +
                                                 std::to_string(registry.total()) + " parameters");
  for (size_t i = 0; i < parameters.size(); ++i)
    if (!std::isfinite(parameters[i]))
      throw Error(ErrorKind::invalid_argument, path + ": a parameter is not finite at element " + std::to_string(i));
}

}  // namespace

std::vector<float> read_weights(const std::string& path, const ModelConfig& config,
                                const std::string& expected_sha256,
                                std::span<const LoadedTensor> loaded,
                                const std::string& weight_format, quant::Q8Matrices* q8_out,
                                quant::Q4Matrices* q4_out, bool give_back_packed) {
  if (weight_format != kQ8Format && weight_format != kQ4Format && weight_format != "float32")
    refuse(path, "weight format '" + weight_format + "' is not one this lockstep reads (float32, q8, q4)");
  const MappedFile file(path);
  return read_weights_bytes(file.bytes(), path, config, expected_sha256, loaded, weight_format, q8_out, q4_out,
                            &file, give_back_packed);
}

std::vector<float> read_weights_bytes(std::span<const uint8_t> bytes, const std::string& path,
                                      const ModelConfig& config, const std::string& expected_sha256,
                                      std::span<const LoadedTensor> loaded,
                                      const std::string& weight_format, quant::Q8Matrices* q8_out,
                                      quant::Q4Matrices* q4_out, const MappedFile* mapped, bool give_back_packed) {
  const bool q4 = weight_format == kQ4Format;
  const bool q8 = weight_format == kQ8Format || q4;  // matrices packed, with `.scale` tensors
  if (!q8 && weight_format != "float32")
    refuse(path, "weight format '" + weight_format + "' is not one this lockstep reads (float32, q8, q4)");
  const SafetensorsHeader header = parse_safetensors(bytes, path);
  const ParameterRegistry registry(config);
  std::unordered_map<std::string, const TensorEntry*> by_name;
  for (const auto& t : header.tensors) by_name[t.name] = &t;
  const std::string suffix = kQ8ScaleSuffix;
  for (const auto& t : header.tensors) {
    std::string name = t.name;
    if (q8 && name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
    const int64_t index = registry.find(name);
    if (index < 0 || (name != t.name && registry.entries()[static_cast<size_t>(index)].shape.size() != 2))
      refuse(path, "tensor " + quote_name(t.name) + " is not a parameter of this model");
  }
  std::unordered_map<std::string, const LoadedTensor*> loaded_by_name;
  for (const LoadedTensor& l : loaded) {
    if (by_name.count(l.name))
      refuse(path, "parameter '" + l.name +
                       "' is in the file, but model.json says it is loaded from '" + l.file + "'");
    loaded_by_name[l.name] = &l;
  }

  // What each parameter's tensors must be in this format: the values' dtype and shape (q4: two
  // columns a byte), and for a packed matrix its scale tensor's shape (q8: one per column; q4: one
  // per group of 32 inputs per column).
  struct Expected {
    DType dtype;
    std::vector<int64_t> shape, scale_shape;  // scale_shape empty: no scale tensor
    uint64_t bytes() const {
      uint64_t n = dtype == DType::f32 ? 4 : 1, s = 4;
      for (int64_t d : shape) n *= static_cast<uint64_t>(d);
      for (int64_t d : scale_shape) s *= static_cast<uint64_t>(d);
      return n + (scale_shape.empty() ? 0 : s);
    }
  };
  auto expected = [&](const ParameterInfo& e) {
    if (!(q8 && e.shape.size() == 2)) return Expected{DType::f32, e.shape, {}};
    if (q4)
      return Expected{DType::u8, {e.shape[0], quant::q4_row_bytes(e.shape[1])},
                      {quant::q4_groups(e.shape[0]), e.shape[1]}};
    return Expected{DType::i8, e.shape, {e.shape[1]}};
  };

  // Every tensor checked against the configuration before anything the size of the
  // configuration is allocated, so that a model.json claiming a larger model than its file holds
  // costs nothing: past this loop the parameters read from this file fit in it. When the file's
  // data is not the size the configuration implies, a refusal says both sizes.
  uint64_t need = 0;  // the data bytes the configuration implies for this file
  for (const auto& e : registry.entries())
    if (!loaded_by_name.count(e.name)) need += expected(e).bytes();
  auto mismatch = [&](const std::string& problem) {
    if (need == header.data_size) refuse(path, problem);
    refuse(path, problem + " (model.json's configuration, " + std::to_string(registry.total()) +
                     " parameters, needs " + std::to_string(need) + " bytes of " +
                     (q4 ? "q4" : q8 ? "q8" : "f32") + " tensor data here; the file holds " +
                     std::to_string(header.data_size) + ")");
  };
  for (const auto& e : registry.entries()) {
    if (loaded_by_name.count(e.name)) continue;
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) mismatch("parameter '" + e.name + "' is missing");
    const TensorEntry& t = *it->second;
    const Expected want = expected(e);
    if (t.dtype != want.dtype)
      mismatch("parameter '" + e.name + "' is " + dtype_name(t.dtype) + ", expected " + dtype_name(want.dtype));
    if (t.shape != want.shape)
      mismatch("parameter '" + e.name + "' has shape " + shape_text(t.shape) + ", expected " +
               shape_text(want.shape));
    if (!want.scale_shape.empty()) {
      const auto sc = by_name.find(e.name + suffix);
      if (sc == by_name.end()) mismatch("parameter '" + e.name + "' has no scale tensor '" + e.name + suffix + "'");
      const TensorEntry& st = *sc->second;
      if (st.dtype != DType::f32 || st.shape != want.scale_shape)
        mismatch("tensor '" + e.name + suffix + "' must be F32 " + shape_text(want.scale_shape));
    }
  }
  // Every tensor of the file is a parameter (or its scale) checked above, and the tensors fill
  // the data section without overlap (parse_safetensors): the sizes now agree.
  if (need != header.data_size) mismatch("the tensors' sizes do not add up");

  // Frozen parameters from their own files (each bounded by its file's size), then the flat
  // vector, whose size the checks above bound by the files'.
  std::vector<std::vector<float>> loaded_values(registry.entries().size());
  for (size_t p = 0; p < registry.entries().size(); ++p) {
    const auto& e = registry.entries()[p];
    if (const auto l = loaded_by_name.find(e.name); l != loaded_by_name.end())
      loaded_values[p] = read_loaded_tensor(*l->second, e.shape);
  }
  // The flat vector grows entry by entry (the registry's entries tile it in order) inside one
  // reservation, so that no page is touched before its entry is read, and its digest too, so
  // that an entry's pages can be given back once it is hashed.
  std::vector<float> flat;
  flat.reserve(static_cast<size_t>(registry.total()));
  const uint8_t* data = bytes.data() + header.data_offset;
  Sha256 digest;
  for (size_t p = 0; p < registry.entries().size(); ++p) {
    const auto& e = registry.entries()[p];
    flat.resize(static_cast<size_t>(e.offset + e.count));
    float* dst = flat.data() + e.offset;
    if (loaded_by_name.count(e.name)) {
      std::copy(loaded_values[p].begin(), loaded_values[p].end(), dst);
      std::vector<float>().swap(loaded_values[p]);
      sha256_update_f32_le(digest, {dst, static_cast<size_t>(e.count)});
      continue;
    }
    const TensorEntry& t = *by_name.at(e.name);
    const Expected want = expected(e);
    if (!want.scale_shape.empty()) {
      const TensorEntry& st = *by_name.at(e.name + suffix);
      std::vector<float> scale(static_cast<size_t>(want.scale_shape[0] * (q4 ? want.scale_shape[1] : 1)));
      std::memcpy(scale.data(), data + st.begin, scale.size() * sizeof(float));
      for (size_t i = 0; i < scale.size(); ++i)
        if (!std::isfinite(scale[i]) || scale[i] < 0.0f)
          refuse(path, "tensor '" + e.name + suffix + "' holds a bad scale (" + std::to_string(scale[i]) + ") at " +
                           (q4 ? "element " : "column ") + std::to_string(i));
      if (q4) {
        const uint8_t* packed_bytes = data + t.begin;
        if (const std::string bad = quant::check_q4(packed_bytes, e.shape[0], e.shape[1]); !bad.empty())
          refuse(path, "parameter '" + e.name + "' (q4) holds a " + bad);
        quant::expand_q4(packed_bytes, scale.data(), e.shape[0], e.shape[1], dst);
        if (q4_out) {
          quant::Q4Matrix& m = (*q4_out)[e.offset];
          m.K = e.shape[0];
          m.N = e.shape[1];
          m.packed.assign(packed_bytes, packed_bytes + e.shape[0] * quant::q4_row_bytes(e.shape[1]));
          m.scale = std::move(scale);
        }
      } else {
        const int8_t* q = reinterpret_cast<const int8_t*>(data + t.begin);
        quant::expand_q8(q, scale.data(), e.shape[0], e.shape[1], dst);
        if (q8_out) {
          quant::Q8Matrix& m = (*q8_out)[e.offset];
          m.K = e.shape[0];
          m.N = e.shape[1];
          m.q.assign(q, q + e.count);
          m.scale = std::move(scale);
        }
      }
    } else {
      std::memcpy(dst, data + t.begin, static_cast<size_t>(e.count) * sizeof(float));
    }
    // Checked before its pages may go (they read as zeros after).
    for (int64_t i = 0; i < e.count; ++i) {
      if (!std::isfinite(dst[i]))
        refuse(path, "parameter '" + e.name + "' holds a non-finite value (" +
                         std::to_string(dst[i]) + ") at element " + std::to_string(i));
    }
    sha256_update_f32_le(digest, {dst, static_cast<size_t>(e.count)});
    // A matrix kept packed (its q8/q4 form handed out) needs no expanded copy: the model packs
    // it from that form and expands it again from the panels when asked. `embed` stays (the
    // fast path looks its rows up).
    if (give_back_packed && !want.scale_shape.empty() && e.offset != registry.embed() &&
        ((q4 && q4_out) || (!q4 && q8_out)))
      release_float_pages(flat.data(), e.offset, e.count);
    if (mapped) {
      mapped->drop({data + t.begin, static_cast<size_t>(t.end - t.begin)});
      if (!want.scale_shape.empty()) {
        const TensorEntry& st = *by_name.at(e.name + suffix);
        mapped->drop({data + st.begin, static_cast<size_t>(st.end - st.begin)});
      }
    }
  }
  const std::string sha = digest.hex();
  if (sha != expected_sha256)
    refuse(path, "parameters' SHA-256 is " + sha + " but model.json says " + expected_sha256);
  return flat;
}

void write_weights(const std::string& path, const ModelConfig& config,
                   std::span<const float> parameters, std::span<const std::string> omit) {
  const ParameterRegistry registry(config);
  if (static_cast<int64_t>(parameters.size()) != registry.total())
    throw Error(ErrorKind::invalid_argument,
                "write_weights: " + std::to_string(parameters.size()) + " values for " +
                    std::to_string(registry.total()) + " parameters");
  // The reader refuses non-finite values, so a writer that accepted them would write a file
  // nothing can load.
  for (const auto& e : registry.entries()) {
    for (int64_t i = 0; i < e.count; ++i) {
      const float v = parameters[static_cast<size_t>(e.offset + i)];
      if (!std::isfinite(v))
        throw Error(ErrorKind::invalid_argument,
                    path + ": parameter '" + e.name + "' holds a non-finite value (" +
                        std::to_string(v) + ") at element " + std::to_string(i));
    }
  }
  std::vector<TensorData> tensors;
  tensors.reserve(registry.entries().size());
  for (const auto& e : registry.entries())
    if (std::find(omit.begin(), omit.end(), e.name) == omit.end())
      tensors.push_back({e.name, DType::f32, e.shape, parameters.data() + e.offset});
  write_safetensors(path, tensors, {{"format", "lockstep"}, {"matrix_layout", "in_out"}});
}

std::vector<float> write_weights_q8(const std::string& path, const ModelConfig& config,
                                    std::span<const float> parameters) {
  const ParameterRegistry registry(config);
  check_packable(path, registry, parameters, "write_weights_q8");
  std::vector<float> expanded(parameters.begin(), parameters.end());
  std::vector<std::vector<int8_t>> q;
  std::vector<std::vector<float>> scales;
  std::vector<std::string> scale_names;
  std::vector<TensorData> tensors;
  q.reserve(registry.entries().size());
  scales.reserve(registry.entries().size());
  scale_names.reserve(registry.entries().size());
  for (const auto& e : registry.entries()) {
    if (e.shape.size() != 2) {
      tensors.push_back({e.name, DType::f32, e.shape, parameters.data() + e.offset});
      continue;
    }
    q.emplace_back(static_cast<size_t>(e.count));
    scales.emplace_back(static_cast<size_t>(e.shape[1]));
    quant::pack_q8(parameters.data() + e.offset, e.shape[0], e.shape[1], q.back().data(), scales.back().data());
    quant::expand_q8(q.back().data(), scales.back().data(), e.shape[0], e.shape[1], expanded.data() + e.offset);
    scale_names.push_back(e.name + kQ8ScaleSuffix);
    tensors.push_back({e.name, DType::i8, e.shape, q.back().data()});
    tensors.push_back({scale_names.back(), DType::f32, {e.shape[1]}, scales.back().data()});
  }
  write_safetensors(path, tensors, {{"format", "lockstep"}, {"matrix_layout", "in_out"}, {"weights", kQ8Format}});
  return expanded;
}

std::vector<float> write_weights_q4(const std::string& path, const ModelConfig& config,
                                    std::span<const float> parameters) {
  const ParameterRegistry registry(config);
  check_packable(path, registry, parameters, "write_weights_q4");
  std::vector<float> expanded(parameters.begin(), parameters.end());
  std::vector<std::vector<uint8_t>> q;
  std::vector<std::vector<float>> scales;
  std::vector<std::string> scale_names;
  std::vector<TensorData> tensors;
  q.reserve(registry.entries().size());
  scales.reserve(registry.entries().size());
  scale_names.reserve(registry.entries().size());
  for (const auto& e : registry.entries()) {
    if (e.shape.size() != 2) {
      tensors.push_back({e.name, DType::f32, e.shape, parameters.data() + e.offset});
      continue;
    }
    const int64_t K = e.shape[0], N = e.shape[1];
    q.emplace_back(static_cast<size_t>(K * quant::q4_row_bytes(N)));
    scales.emplace_back(static_cast<size_t>(quant::q4_groups(K) * N));
    quant::pack_q4(parameters.data() + e.offset, K, N, q.back().data(), scales.back().data());
    quant::expand_q4(q.back().data(), scales.back().data(), K, N, expanded.data() + e.offset);
    scale_names.push_back(e.name + kQ8ScaleSuffix);
    tensors.push_back({e.name, DType::u8, {K, quant::q4_row_bytes(N)}, q.back().data()});
    tensors.push_back({scale_names.back(), DType::f32, {quant::q4_groups(K), N}, scales.back().data()});
  }
  write_safetensors(path, tensors, {{"format", "lockstep"}, {"matrix_layout", "in_out"}, {"weights", kQ4Format}});
  return expanded;
}

namespace {

std::vector<float> tensor_values(const MappedFile& file, const std::string& path,
                                 const std::string& tensor, const std::vector<int64_t>& shape) {
  const SafetensorsHeader header = parse_safetensors(file.bytes(), path);
  const TensorEntry* found = nullptr;
  for (const auto& t : header.tensors)
    if (t.name == tensor) found = &t;
  if (!found) refuse(path, "holds no tensor " + quote_name(tensor));
  if (found->dtype != DType::f32)
    refuse(path,
           "tensor " + quote_name(tensor) + " is " + dtype_name(found->dtype) + ", expected F32");
  if (found->shape != shape)
    refuse(path, "tensor " + quote_name(tensor) + " has shape " + shape_text(found->shape) +
                     ", expected " + shape_text(shape));
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<float> values(static_cast<size_t>(count));
  std::memcpy(values.data(), file.bytes().data() + header.data_offset + found->begin,
              static_cast<size_t>(count) * sizeof(float));
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[static_cast<size_t>(i)]))
      refuse(path, "tensor " + quote_name(tensor) + " holds a non-finite value (" +
                       std::to_string(values[static_cast<size_t>(i)]) + ") at element " +
                       std::to_string(i));
  return values;
}

}  // namespace

TensorFromFile read_tensor_file(const std::string& path, const std::string& tensor,
                                const std::vector<int64_t>& shape) {
  const MappedFile file(path);
  TensorFromFile out;
  out.file_sha256 = sha256_hex(file.bytes().data(), file.bytes().size());
  out.values = tensor_values(file, path, tensor, shape);
  return out;
}

std::vector<float> read_loaded_tensor(const LoadedTensor& loaded,
                                      const std::vector<int64_t>& shape) {
  const std::string what =
      "frozen parameter '" + loaded.name + "' is loaded from '" + loaded.file + "'";
  std::optional<MappedFile> file;
  try {
    file.emplace(loaded.file);
  } catch (const Error& e) {
    throw Error(ErrorKind::io,
                what + ", which cannot be read (" + e.what() + ") [" + code::load_changed + "]",
                code::load_changed);
  }
  const std::string sha = sha256_hex(file->bytes().data(), file->bytes().size());
  if (sha != loaded.sha256)
    throw Error(ErrorKind::format,
                what + ", which has changed: its SHA-256 is " + sha +
                    " but the checkpoint recorded " + loaded.sha256 + "; restore that file [" +
                    code::load_changed + "]",
                code::load_changed);
  return tensor_values(*file, loaded.file, loaded.tensor, shape);
}

}  // namespace lockstep::format
