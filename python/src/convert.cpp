#include "convert.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace lockstep::python {
namespace {

// np.asarray(obj): the array itself when it is one.
py::array as_array(py::handle obj) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  return py::array(py::reinterpret_borrow<py::object>(obj));
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// Views whose data pointer is misaligned for T (possible with a numpy view of raw bytes) are
// copied, so that the C++ side always reads aligned values.
template <class T>
py::array_t<T, py::array::c_style> aligned(py::array_t<T, py::array::c_style> a) {
  if (reinterpret_cast<uintptr_t>(a.data()) % alignof(T) == 0) return a;
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
  py::array_t<T, py::array::c_style> copy(shape);
  std::memcpy(copy.mutable_data(), a.data(), static_cast<size_t>(a.nbytes()));
  return copy;
}

// A float32 array (any shape) from an array-like: TypeError for any other dtype, since a silent
// rounding of float64 values would change the model's bits.
FloatArray float32_array(py::handle obj, const std::string& name) {
  py::array a = as_array(obj);
  if (a.dtype().kind() != 'f' || a.dtype().itemsize() != 4)
    throw py::type_error(name + " must be float32; got " + dtype_name(a));
  FloatArray f = FloatArray::ensure(a);
  if (!f) throw py::error_already_set();
  return aligned(std::move(f));
}

// A float32 array of exactly [count] values; ValueError naming `name` otherwise.
FloatArray float_vector(py::handle obj, int64_t count, const std::string& name) {
  FloatArray a = float32_array(obj, name);
  if (a.ndim() != 1 || a.size() != count)
    throw py::value_error(name + " must be float32 [" + std::to_string(count) +
                          "]; got an array of shape " + shape_text(a));
  return a;
}

std::string id_range(const ModelConfig& c) {
  return c.vocab_size == 256 ? "byte values in [0, 256)"
                             : "token ids in [0, " + std::to_string(c.vocab_size) + ")";
}

// ids [rows, cols] of a wide integer type Wide as int32: a value int32 cannot hold is refused
// with the model's message (showing the original value), unless it is padding.
template <class Wide>
IdsArray narrow(const py::array& a, const ModelConfig& config, const std::vector<int32_t>* lengths) {
  using WideArray = py::array_t<Wide, py::array::c_style | py::array::forcecast>;
  const WideArray wide = WideArray::ensure(a);
  if (!wide) throw py::error_already_set();
  const py::ssize_t rows = a.shape(0), cols = a.shape(1);
  IdsArray ids({rows, cols});
  const Wide* src = wide.data();
  int32_t* dst = ids.mutable_data();
  constexpr auto lo = static_cast<int64_t>(std::numeric_limits<int32_t>::min());
  constexpr auto hi = static_cast<int64_t>(std::numeric_limits<int32_t>::max());
  for (py::ssize_t r = 0; r < rows; ++r) {
    for (py::ssize_t t = 0; t < cols; ++t) {
      const Wide v = src[r * cols + t];
      const bool fits = std::is_signed_v<Wide> ? (static_cast<int64_t>(v) >= lo && static_cast<int64_t>(v) <= hi)
                                               : static_cast<uint64_t>(v) <= static_cast<uint64_t>(hi);
      if (fits) {
        dst[r * cols + t] = static_cast<int32_t>(v);
        continue;
      }
      const bool padding = lengths && static_cast<size_t>(r) < lengths->size() &&
                           (*lengths)[static_cast<size_t>(r)] >= 1 &&
                           t >= (*lengths)[static_cast<size_t>(r)];
      if (padding) {
        dst[r * cols + t] = 0;  // never read
        continue;
      }
      const std::string shown = py::str(a[py::make_tuple(r, t)]).cast<std::string>();
      throw py::value_error("ids must be " + id_range(config) + "; got " + shown + " at row " +
                            std::to_string(r) + ", position " + std::to_string(t));
    }
  }
  return ids;
}

}  // namespace

std::optional<long long> index_value(py::handle obj, bool& overflow) {
  overflow = false;
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) return std::nullopt;
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!i) throw py::error_already_set();
  int over = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &over);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  overflow = over != 0;
  return v;
}

IdsArray ids_array(py::handle obj, const ModelConfig& config, const std::string& expected,
                   const std::vector<int32_t>* lengths) {
  py::array a = as_array(obj);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::type_error("ids must be integers (int32); got an array of " + dtype_name(a));
  if (a.ndim() != 2)
    throw py::value_error("ids must be " + expected + "; got an array of shape " + shape_text(a));
  if (kind == 'i' && a.dtype().itemsize() == 4) {  // int32: used in place when C-contiguous
    IdsArray ids = IdsArray::ensure(a);
    if (!ids) throw py::error_already_set();
    return aligned(std::move(ids));
  }
  // Any other integer dtype: widened to int64 (signed) or uint64 (unsigned), then each value
  // checked into int32.
  if (kind == 'u') return narrow<uint64_t>(a, config, lengths);
  return narrow<int64_t>(a, config, lengths);
}

std::optional<std::vector<int32_t>> lengths_list(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) ||
      !py::isinstance<py::iterable>(obj))
    throw py::type_error("lengths must be a sequence of int or None");
  std::vector<int32_t> out;
  for (py::handle item : py::reinterpret_borrow<py::iterable>(obj)) {
    bool overflow = false;
    const std::optional<long long> v = index_value(item, overflow);
    if (!v) throw py::type_error("lengths must be a sequence of int; lengths[" +
                                 std::to_string(out.size()) + "] is a " +
                                 py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>());
    if (overflow || *v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max())
      throw py::value_error("lengths[" + std::to_string(out.size()) + "] = " +
                            py::str(item).cast<std::string>() + " is out of range");
    out.push_back(static_cast<int32_t>(*v));
  }
  return out;
}

Parameters parameters_from(py::handle obj, const ModelConfig& config) {
  const ParameterRegistry registry(config);
  Parameters out;
  if (py::hasattr(obj, "keys") && py::hasattr(obj, "items")) {
    // The dict form: named tensors, checked against the registry by from_named.
    std::vector<NamedTensor> tensors;
    for (py::handle item : obj.attr("items")()) {
      py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      if (!py::isinstance<py::str>(pair[0]))
        throw py::type_error("parameter names must be str; got " + py::repr(pair[0]).cast<std::string>());
      NamedTensor t;
      t.name = pair[0].cast<std::string>();
      const FloatArray a = float32_array(pair[1], "parameter '" + t.name + "'");
      t.shape.assign(a.shape(), a.shape() + a.ndim());
      t.values.assign(a.data(), a.data() + a.size());
      tensors.push_back(std::move(t));
    }
    out.owned = from_named(registry, tensors);
    out.from_dict = true;
    return out;
  }
  out.array = float_vector(obj, registry.total(), "parameters");
  return out;
}

std::vector<float> floats_from(py::handle obj, int64_t count, const char* name) {
  const FloatArray a = float_vector(obj, count, name);
  return std::vector<float>(a.data(), a.data() + a.size());
}

bool threaded_flag(py::handle obj) {
  if (!PyBool_Check(obj.ptr())) throw py::type_error("threaded must be a bool");
  return obj.ptr() == Py_True;
}

std::optional<bool> threaded_override(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!PyBool_Check(obj.ptr())) throw py::type_error("threaded must be a bool or None");
  return obj.ptr() == Py_True;
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
}

std::optional<int> threads_count(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  // Document 004's rule: a Python int (not a bool); a numpy integer is refused, as there.
  if (PyBool_Check(obj.ptr()) || !PyLong_Check(obj.ptr()))
    throw py::type_error("threads must be an int or None; got " + type_name(obj));
  bool overflow = false;
  const std::optional<long long> v = index_value(obj, overflow);
  if (overflow || *v < 1 || *v > max_threads)
    throw py::value_error("threads must be in [1, " + std::to_string(max_threads) + "]; got " +
                          py::str(obj).cast<std::string>());
  return static_cast<int>(*v);
}

ModelConfig config_from(py::handle shape) {
  if (shape.is_none()) return ModelConfig{};
  if (!py::isinstance<ModelConfig>(shape)) throw py::type_error("shape must be a LanguageModelConfig");
  return shape.cast<ModelConfig>();
}

py::array_t<float> copy_to_numpy(const float* values, size_t count) {
  py::array_t<float> a(static_cast<py::ssize_t>(count));
  if (count) std::memcpy(a.mutable_data(), values, count * sizeof(float));
  return a;
}

double float_of_bits(uint32_t bits) { return static_cast<double>(std::bit_cast<float>(bits)); }

}  // namespace lockstep::python
