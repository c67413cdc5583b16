// lockstep._lockstep's packed tensors (python/lockstep/lowbit.py re-exports them): pack a float32
// matrix as q8 with the packer `lockstep export --pack q8` uses (quant/q8.cpp), expand one with
// its expansion, read the packed tensors of a model directory with the reader's checks. Nothing
// here rounds on its own: every value comes from the library's functions.
#include "lowbit.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "arg_types.hpp"
#include "convert.hpp"
#include "format/mapped_file.hpp"
#include "format/model_json.hpp"
#include "format/safetensors.hpp"
#include "format/weights.hpp"
#include "lockstep/format.hpp"
#include "quant/q8.hpp"

namespace lockstep::python {

std::vector<float> PackedTensor::expand() const {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  quant::expand_q8(q.data(), scale.data(), rows, cols, w.data());
  return w;
}

namespace {

// "q8", or a ValueError: q4 is not defined yet.
std::string packed_format(py::handle obj) {
  if (!py::isinstance<py::str>(obj)) throw py::type_error("format must be a str; got " + type_name(obj));
  const std::string f = obj.cast<std::string>();
  if (f == format::kQ8Format) return f;
  if (f == "q4")
    throw py::value_error(
        "format 'q4' is not defined yet (its layout belongs to the packed-weight issue); lockstep packs 'q8'");
  throw py::value_error("format '" + f + "' is not a packed format lockstep defines ('q8')");
}

// Scales as the model reader takes them: finite and >= 0 (format/weights.cpp).
void check_scales(const std::vector<float>& scale, const std::string& what) {
  for (size_t i = 0; i < scale.size(); ++i)
    if (!std::isfinite(scale[i]) || scale[i] < 0.0f)
      throw py::value_error(what + ": scale[" + std::to_string(i) + "] = " +
                            py::repr(py::float_(scale[i])).cast<std::string>() +
                            " is not a finite non-negative float32");
}

PackedTensor make_packed(py::handle q_arg, py::handle scale_arg, py::handle format_arg) {
  PackedTensor t;
  t.format = packed_format(format_arg);
  const py::array q_any = py::isinstance<py::array>(q_arg) ? py::reinterpret_borrow<py::array>(q_arg)
                                                          : py::array(py::reinterpret_borrow<py::object>(q_arg));
  if (q_any.dtype().kind() != 'i' || q_any.dtype().itemsize() != 1)
    throw py::type_error("q must be an int8 array; got " + py::str(q_any.dtype()).cast<std::string>());
  if (q_any.ndim() != 2) throw py::value_error("q must be a matrix [K, N]; got " + std::to_string(q_any.ndim()) + " dimensions");
  const auto q = py::array_t<int8_t, py::array::c_style | py::array::forcecast>::ensure(q_any);
  if (!q) throw py::error_already_set();
  t.rows = q.shape(0);
  t.cols = q.shape(1);
  t.q.assign(q.data(), q.data() + q.size());
  const FloatArray scale = float32_values(scale_arg, "scale");
  if (scale.ndim() != 1 || scale.shape(0) != t.cols)
    throw py::value_error("scale must be float32 [" + std::to_string(t.cols) + "], one per column of q");
  t.scale.assign(scale.data(), scale.data() + scale.size());
  check_scales(t.scale, "PackedTensor");
  return t;
}

PackedTensor pack(py::handle w_arg, py::handle format_arg) {
  PackedTensor t;
  t.format = packed_format(format_arg);
  const FloatArray w = float32_values(w_arg, "w");
  if (w.ndim() != 2) throw py::value_error("w must be a matrix [K, N]; got " + std::to_string(w.ndim()) + " dimensions");
  t.rows = w.shape(0);
  t.cols = w.shape(1);
  const float* p = w.data();
  for (int64_t i = 0; i < t.rows * t.cols; ++i)
    if (!std::isfinite(p[i]))
      throw py::value_error("w[" + std::to_string(i / t.cols) + ", " + std::to_string(i % t.cols) +
                            "] is not finite; only finite matrices are packed");
  t.q.resize(static_cast<size_t>(t.rows * t.cols));
  t.scale.resize(static_cast<size_t>(t.cols));
  py::gil_scoped_release release;
  quant::pack_q8(p, t.rows, t.cols, t.q.data(), t.scale.data());
  return t;
}

py::array_t<float> expanded(const PackedTensor& t) {
  std::vector<float> w;
  {
    py::gil_scoped_release release;
    w = t.expand();
  }
  return to_numpy(std::move(w), {static_cast<py::ssize_t>(t.rows), static_cast<py::ssize_t>(t.cols)});
}

// The model directory's tensors by registry name: a PackedTensor for each packed matrix, a
// float32 array for each vector. Every check of loading is made first (format::read_weights:
// names, dtypes, shapes, scales, finiteness, the SHA-256 of the expanded parameters).
py::dict read_packed(py::handle path_arg) {
  const std::string path = py::module_::import("os").attr("fsdecode")(path_arg).cast<std::string>();
  format::ModelDescription d;
  std::string weights_path;
  std::vector<float> flat;
  std::vector<std::optional<PackedTensor>> by_entry;  // registry order
  {
    py::gil_scoped_release release;
    const ResolvedPath resolved = resolve_model_path(path);
    const std::string json_path = resolved.model_dir + "/model.json";
    d = format::parse_model_json(format::read_text_file(json_path, format::kMaxModelJsonBytes), json_path);
    weights_path = resolved.model_dir + "/" + d.weights.file;
    if (d.weights.format == format::kQ8Format) {
      flat = format::read_weights(weights_path, d.config, d.weights.sha256, d.loaded, d.weights.format);
      const ParameterRegistry registry(d.config);
      by_entry.resize(registry.entries().size());
      const format::MappedFile file(weights_path);
      const format::SafetensorsHeader header = format::parse_safetensors(file.bytes(), weights_path);
      const uint8_t* data = file.bytes().data() + header.data_offset;
      std::map<std::string, const format::TensorEntry*> by_name;
      for (const format::TensorEntry& t : header.tensors) by_name[t.name] = &t;
      for (const format::TensorEntry& t : header.tensors) {
        if (t.dtype != format::DType::i8) continue;  // read_weights checked: a matrix parameter
        const int64_t j = registry.find(t.name);
        const ParameterInfo& e = registry.entries()[static_cast<size_t>(j)];
        PackedTensor p;
        p.format = format::kQ8Format;
        p.rows = e.shape[0];
        p.cols = e.shape[1];
        p.q.resize(static_cast<size_t>(p.rows * p.cols));
        std::memcpy(p.q.data(), data + t.begin, p.q.size());
        const format::TensorEntry& s = *by_name.at(t.name + format::kQ8ScaleSuffix);
        p.scale.resize(static_cast<size_t>(p.cols));
        std::memcpy(p.scale.data(), data + s.begin, p.scale.size() * sizeof(float));
        by_entry[static_cast<size_t>(j)] = std::move(p);
      }
    }
  }
  if (d.weights.format != format::kQ8Format)
    throw py::value_error(weights_path + " holds " + d.weights.format +
                          " weights, not packed ones (`lockstep export --pack q8` writes those); "
                          "LanguageModelInference.from_checkpoint reads it");
  const ParameterRegistry registry(d.config);
  py::dict out;
  for (size_t j = 0; j < registry.entries().size(); ++j) {
    const ParameterInfo& e = registry.entries()[j];
    if (by_entry[j]) {
      out[py::str(e.name)] = py::cast(std::move(*by_entry[j]));
      continue;
    }
    // A vector (or a frozen :load matrix the file leaves out): its float32 values.
    std::vector<float> values(flat.begin() + e.offset, flat.begin() + e.offset + e.count);
    std::vector<py::ssize_t> shape(e.shape.begin(), e.shape.end());
    out[py::str(e.name)] = to_numpy(std::move(values), shape);
  }
  return out;
}

}  // namespace

void bind_lowbit(py::module_& m) {
  py::class_<PackedTensor>(m, "PackedTensor", R"doc(
A matrix [K, N] packed as q8: int8 values q [K, N] and one float32 scale per column [N]
(docs/FORMAT.md, "Packed weights"). It stands for the float32 matrix float(q[k, n]) * scale[n]
(one rounded multiply each), which expand() gives and which LanguageModelInference and
LanguageModelHostTrainer use when it is given in their named-parameter dict. Made by
lockstep.lowbit.pack, read by lockstep.lowbit.read_packed, or built from q and scale.
)doc")
      .def(py::init([](ArrayArg q, ArrayArg scale, StrArg format) { return make_packed(q, scale, format); }),
           py::arg("q"), py::arg("scale"), py::kw_only(), py::arg("format") = "q8")
      .def_readonly("format", &PackedTensor::format, "\"q8\".")
      .def_property_readonly("shape", [](const PackedTensor& t) { return py::make_tuple(t.rows, t.cols); },
                             "(K, N): the shape of the matrix it stands for.")
      .def_property_readonly(
          "q",
          [](const PackedTensor& t) {
            std::vector<int8_t> q = t.q;
            return to_numpy(std::move(q), {static_cast<py::ssize_t>(t.rows), static_cast<py::ssize_t>(t.cols)});
          },
          "A copy of the int8 values [K, N].")
      .def_property_readonly(
          "scale",
          [](const PackedTensor& t) { return copy_to_numpy(t.scale.data(), t.scale.size()); },
          "A copy of the float32 scales [N].")
      .def("expand", &expanded, "The float32 matrix [K, N] it stands for: float(q) * scale, exactly.")
      .def("__repr__", [](const PackedTensor& t) {
        return "<lockstep.lowbit.PackedTensor " + t.format + " [" + std::to_string(t.rows) + ", " +
               std::to_string(t.cols) + "]>";
      });
  m.def("lowbit_pack", [](ArrayArg w, StrArg format) { return pack(w, format); }, py::arg("w"),
        py::kw_only(), py::arg("format") = "q8",
        "w (a float32 matrix [K, N], finite) packed as `lockstep export --pack q8` packs it.");
  m.def("lowbit_expand", [](const PackedTensor& packed) { return expanded(packed); }, py::arg("packed"), "The float32 matrix a PackedTensor stands for.");
  m.def("lowbit_read_packed", [](PathArg path) { return read_packed(path); }, py::arg("path"),
        "The tensors of a packed model directory, by registry name.");
}

}  // namespace lockstep::python
