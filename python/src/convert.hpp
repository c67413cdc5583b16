// Python <-> C++ conversions shared by the module's classes: ids, lengths, parameters, the
// `threaded` / `threads` arguments, and numpy arrays that own a C++ vector.
//
// The rules are the spec's (documents 003/004): a wrong type is a TypeError, a wrong shape or
// value a ValueError. Arrays that already have the right dtype, byte order and layout are used in
// place; anything else is converted once.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/model.hpp"

namespace lockstep::python {

namespace py = pybind11;

using IdsArray = py::array_t<int32_t, py::array::c_style>;
using FloatArray = py::array_t<float, py::array::c_style>;

// `obj` as int32 [rows, cols], C-contiguous. Any integer dtype is accepted; a value that int32
// cannot hold is refused with the model's message ("ids must be byte values in [0, 256); got ...
// at row r, position t") unless `lengths` marks its position as padding (then it reads as 0,
// since padding is never read). `expected` describes the wanted shape for the ValueError of a
// wrong number of dimensions ("[batch, 1..256]").
IdsArray ids_array(py::handle obj, const ModelConfig& config, const std::string& expected,
                   const std::vector<int32_t>* lengths = nullptr);

inline IdsView ids_view(const IdsArray& ids) {
  return {ids.data(), static_cast<int64_t>(ids.shape(0)), static_cast<int64_t>(ids.shape(1))};
}

// None -> nullopt; otherwise a sequence of ints (TypeError for anything else).
std::optional<std::vector<int32_t>> lengths_list(py::handle obj);

// Flat float32 parameters of `config` [n_total]: a float32 array used in place when it is
// C-contiguous (any other array-like of real numbers converted when float32 holds every value
// exactly, ValueError naming the first that it does not), or the values gathered from a dict of named tensors (registry names and shapes,
// any order; a matrix may be a lockstep.lowbit.PackedTensor).
struct Parameters {
  FloatArray array;          // the caller's array (or a converted copy of it)
  std::vector<float> owned;  // the dict form, flattened
  bool from_dict = false;
  // "float32", or the packed format every matrix of the dict form was given in
  // (lockstep.lowbit.PackedTensor, expanded exactly); a dict mixing them is refused.
  std::string weight_format = "float32";
  std::span<const float> values() const {
    if (from_dict) return owned;
    return {array.data(), static_cast<size_t>(array.size())};
  }
};
Parameters parameters_from(py::handle obj, const ModelConfig& config);
// A float32 array of any shape from an array-like of real numbers, by the rule of parameters_from
// (converted only when float32 holds every value exactly); `name` is used in messages.
FloatArray float32_values(py::handle obj, const std::string& name);
// A float32 array-like of exactly `count` values, for the trainer's moments; `name` is used in
// messages.
std::vector<float> floats_from(py::handle obj, int64_t count, const char* name);

// `threaded`: a bool (TypeError otherwise). `call`: None is allowed and means "the instance's".
bool threaded_flag(py::handle obj);
std::optional<bool> threaded_override(py::handle obj);
// `threads`: None or an int in [1, max_threads] (TypeError for anything but a Python int, numpy
// integers and bools included; ValueError out of range).
std::optional<int> threads_count(py::handle obj);

// The qualified name of obj's type, for messages ("numpy.int64" shows as "int64").
std::string type_name(py::handle obj);

// operator.index(obj) as a long long; nullopt for a bool or anything that is not an integer.
// `overflow` is set when the integer does not fit in a long long.
std::optional<long long> index_value(py::handle obj, bool& overflow);

// A sampling seed: a Python int in [0, 2^64 - 1] (numpy integers too, bools not); TypeError for
// anything else, ValueError naming `name` and the value outside the range.
uint64_t seed_value(py::handle obj, const char* name = "seed");

// ModelConfig from a LanguageModelConfig or None (the defaults); TypeError otherwise.
ModelConfig config_from(py::handle shape);

// A numpy array that owns `values` (no copy) with the given shape.
template <class T>
py::array_t<T> to_numpy(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto owned = std::make_unique<std::vector<T>>(std::move(values));
  T* data = owned->data();
  py::capsule base(owned.get(), [](void* p) { delete static_cast<std::vector<T>*>(p); });
  owned.release();  // the capsule owns it now
  return py::array_t<T>(std::move(shape), data, base);
}

// A copy of `values` as a new 1-D numpy array.
py::array_t<float> copy_to_numpy(const float* values, size_t count);

// Python float of float32 bits.
double float_of_bits(uint32_t bits);

}  // namespace lockstep::python
