#include "convert.hpp"

#include "lowbit.hpp"

#include <bit>
#include <cmath>
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

// "[3]" or "[3, 4]": the position of flat index `i` in an array of a's shape.
std::string position_text(const py::array& a, py::ssize_t i) {
  std::vector<py::ssize_t> at(static_cast<size_t>(a.ndim()));
  for (py::ssize_t d = a.ndim() - 1; d >= 0; --d) {
    at[static_cast<size_t>(d)] = a.shape(d) ? i % a.shape(d) : 0;
    i = a.shape(d) ? i / a.shape(d) : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < at.size(); ++d) s += (d ? ", " : "") + std::to_string(at[d]);
  return s + "]";
}

// A float32 array (any shape) from an array-like of real numbers (document 003's "array-like"):
// a float32 array is used as it is; any other float or integer dtype (a list of Python floats is
// float64) is converted when every value is exactly a float32, so that no value the caller gave
// is silently rounded. The first value that is not is a ValueError naming its position, the
// value and the float32 nearest it; bool, complex, str or object data is a TypeError.
// NaN and infinities convert as themselves (the finiteness checks come later).
FloatArray float32_array(py::handle obj, const std::string& name) {
  py::array a = as_array(obj);
  const char kind = a.dtype().kind();
  if (kind == 'f' && a.dtype().itemsize() == 4) {
    FloatArray f = FloatArray::ensure(a);
    if (!f) throw py::error_already_set();
    return aligned(std::move(f));
  }
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw py::type_error(name + " must be float32, or real numbers that float32 holds exactly; got " +
                         (kind == 'O' ? std::string("objects") : dtype_name(a)));
  const py::module_ np = py::module_::import("numpy");
  // The comparison is made in a type that holds both sides exactly: float64 for floats up to
  // float64 and integers up to 32 bits, long double (x86-64: a 64-bit significand; aarch64:
  // 113 bits) for 64-bit integers and long double data. Overflow to inf is then a mismatch, not
  // a warning.
  const bool narrow_enough = kind == 'f' ? a.dtype().itemsize() <= 8 : a.dtype().itemsize() <= 4;
  py::object state = np.attr("errstate")(py::arg("all") = "ignore");
  state.attr("__enter__")();
  py::object converted, mismatch;
  try {
    converted = a.attr("astype")(np.attr("float32"));
    const py::object wide = np.attr(narrow_enough ? "float64" : "longdouble");
    mismatch = np.attr("not_equal")(a.attr("astype")(wide), converted.attr("astype")(wide));
    if (kind == 'f') mismatch = np.attr("logical_and")(mismatch, np.attr("logical_not")(np.attr("isnan")(a)));
  } catch (...) {
    state.attr("__exit__")(py::none(), py::none(), py::none());
    throw;
  }
  state.attr("__exit__")(py::none(), py::none(), py::none());
  if (mismatch.attr("any")().cast<bool>()) {
    const auto i = np.attr("flatnonzero")(mismatch)[py::int_(0)].cast<py::ssize_t>();
    const py::object value = a.attr("reshape")(-1)[py::int_(i)];
    const py::object nearest = converted.attr("reshape")(-1)[py::int_(i)];
    const std::string head =
        name + position_text(a, i) + " = " + py::repr(value.attr("item")()).cast<std::string>() + " (" + dtype_name(a) + ")";
    const double rounded = py::float_(nearest).cast<double>();
    if (std::isinf(rounded))
      throw py::value_error(head + " is beyond float32's range (largest finite about 3.4028235e+38)");
    throw py::value_error(head + " is not exactly a float32 (the nearest is " +
                          py::repr(py::float_(rounded)).cast<std::string>() +
                          "); round it with numpy.float32 first if that is meant");
  }
  FloatArray f = FloatArray::ensure(converted);
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

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
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

uint64_t seed_value(py::handle obj, const char* name) {
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))
    throw py::type_error(std::string(name) + " must be an int; got a " + type_name(obj));
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!i) throw py::error_already_set();
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {  // negative or past 64 bits
    PyErr_Clear();
    throw py::value_error(std::string(name) + " must be an int in [0, 18446744073709551615] (2^64 - 1); got " +
                          py::str(i).cast<std::string>());
  }
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
    // Packed matrices (lockstep.lowbit.PackedTensor) are expanded here, exactly as loading a
    // packed file expands them; the format they share becomes weight_format.
    std::vector<NamedTensor> tensors;
    std::vector<std::string> packed, plain;  // the matrices given in each form
    std::string format;
    for (py::handle item : obj.attr("items")()) {
      py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      if (!py::isinstance<py::str>(pair[0]))
        throw py::type_error("parameter names must be str; got " + py::repr(pair[0]).cast<std::string>());
      NamedTensor t;
      t.name = pair[0].cast<std::string>();
      if (py::isinstance<PackedTensor>(pair[1])) {
        const PackedTensor& p = pair[1].cast<const PackedTensor&>();
        t.shape = {p.rows, p.cols};
        t.values = p.expand();
        packed.push_back(t.name + " (" + p.format + ")");
        if (!format.empty() && format != p.format)
          throw py::value_error("the packed parameters mix formats " + format + " and " + p.format + ": " + joined(packed));
        format = p.format;
      } else {
        const FloatArray a = float32_array(pair[1], "parameter '" + t.name + "'");
        t.shape.assign(a.shape(), a.shape() + a.ndim());
        t.values.assign(a.data(), a.data() + a.size());
        if (a.ndim() == 2) plain.push_back(t.name);
      }
      tensors.push_back(std::move(t));
    }
    if (!packed.empty() && !plain.empty())
      throw py::value_error("the parameter matrices mix formats: packed " + joined(packed) + "; float32 " +
                            joined(plain) + " (give every matrix packed in one format, or none)");
    out.owned = from_named(registry, tensors);
    out.from_dict = true;
    if (!packed.empty()) out.weight_format = format;
    return out;
  }
  out.array = float_vector(obj, registry.total(), "parameters");
  return out;
}

FloatArray float32_values(py::handle obj, const std::string& name) { return float32_array(obj, name); }

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
