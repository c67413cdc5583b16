// lockstep._lockstep: the compiled classes of the Python package (documents 003 and 004 under
// lockstep's names). Every class is a thin layer over include/lockstep/: arguments are checked
// and converted here, computed by the library with the GIL released, and every lockstep::Error
// becomes the exception its kind names (lockstep/error.hpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <string>

#include "arg_types.hpp"
#include "convert.hpp"
#include "lockstep/config.hpp"
#include "lockstep/error.hpp"
#include "lockstep/model.hpp"
#include "lockstep/os_error.hpp"

namespace lockstep::python {

void bind_inference(py::module_& m);
void bind_trainer(py::module_& m);
void bind_session(py::module_& m);
void bind_sampling(py::module_& m);
void bind_lowbit(py::module_& m);
void bind_interop(py::module_& m);
void bind_tokenizer(py::module_& m);
void bind_chat_template(py::module_& m);

namespace {

// invalid_argument and format: ValueError; type: TypeError; io: OSError, or the subclass its
// errno names when the system gave one (OSError(errno, message) picks FileNotFoundError,
// PermissionError, FileExistsError, ...); the rest RuntimeError.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const OsError& e) {
    PyObject* error = PyObject_CallFunction(PyExc_OSError, "is", e.error_number(), e.what());
    if (!error) return;  // the call's own exception (MemoryError) stands
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error)), error);
    Py_DECREF(error);
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.kind()) {
      case ErrorKind::invalid_argument:
      case ErrorKind::format: type = PyExc_ValueError; break;
      case ErrorKind::type: type = PyExc_TypeError; break;
      case ErrorKind::io: type = PyExc_OSError; break;
      case ErrorKind::unsupported:
      case ErrorKind::state:
      case ErrorKind::internal: type = PyExc_RuntimeError; break;
    }
    PyErr_SetString(type, e.what());
  }
}

// A dimension: an int (numpy integers too, not a bool; TypeError otherwise) that int32 holds
// (ValueError otherwise); its range is then checked by ModelConfig::validate.
int32_t dimension(const char* name, py::handle value) {
  bool overflow = false;
  const std::optional<long long> v = index_value(value, overflow);
  if (!v) throw py::type_error(std::string("model config: ") + name + " must be an int; got " + type_name(value));
  if (overflow || *v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max())
    throw py::value_error(std::string("model config: ") + name + " = " + py::str(value).cast<std::string>() +
                          " is out of range");
  return static_cast<int32_t>(*v);
}

// An imported model's Llama 3 RoPE scaling as model.json writes it, or None.
py::object scaling_dict(const ModelConfig& c) {
  if (!c.rope_scaling) return py::none();
  const RopeScaling& r = *c.rope_scaling;
  py::dict d;
  d["type"] = "llama3";
  d["factor"] = r.factor;
  d["low_freq_factor"] = r.low_freq_factor;
  d["high_freq_factor"] = r.high_freq_factor;
  d["original_max_position_embeddings"] = r.original_max_position;
  return d;
}

std::string repr(const ModelConfig& c) {
  return "LanguageModelConfig(vocab_size=" + std::to_string(c.vocab_size) +
         ", length=" + std::to_string(c.length) + ", d_model=" + std::to_string(c.d_model) +
         ", n_layers=" + std::to_string(c.n_layers) + ", n_heads=" + std::to_string(c.n_heads) +
         ", n_kv_heads=" + std::to_string(c.n_kv_heads) + ", d_ff=" + std::to_string(c.d_ff) +
         ", norm_eps=" + py::repr(py::float_(c.norm_eps)).cast<std::string>() +
         ", rope_theta=" + py::repr(py::float_(c.rope_theta)).cast<std::string>() +
         ", batch=" + std::to_string(c.batch) +
         (c.qkv_bias ? ", qkv_bias=True" : "") + (c.o_bias ? ", o_bias=True" : "") +
         (c.rope_scaling ? ", rope_scaling=" + py::repr(scaling_dict(c)).cast<std::string>() : "") + ")";
}

// Equality, hashing and pickling: the ten dimensions, and an imported model's biases and RoPE
// scaling after them only when it has any (a plain configuration's key is as it always was).
py::tuple key(const ModelConfig& c) {
  py::tuple base = py::make_tuple(c.vocab_size, c.length, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads,
                                  c.d_ff, c.norm_eps, c.rope_theta, c.batch);
  if (!c.qkv_bias && !c.o_bias && !c.rope_scaling) return base;
  py::object scaling = py::none();
  if (c.rope_scaling)
    scaling = py::make_tuple(c.rope_scaling->factor, c.rope_scaling->low_freq_factor,
                             c.rope_scaling->high_freq_factor, c.rope_scaling->original_max_position);
  return py::reinterpret_steal<py::tuple>(PySequence_Concat(base.ptr(), py::make_tuple(c.qkv_bias, c.o_bias, scaling).ptr()));
}

void bind_config(py::module_& m) {
  const ModelConfig d;
  py::class_<ModelConfig>(m, "LanguageModelConfig", R"doc(
The dimensions of a byte-level decoder language model, and the layout of its flat float32
parameters (names, shapes and offsets in registry order). Immutable; invalid dimensions raise
ValueError naming the field.
)doc")
      .def(py::init([](IntArg vocab_size, IntArg length, IntArg d_model, IntArg n_layers,
                       IntArg n_heads, IntArg n_kv_heads, IntArg d_ff, float norm_eps,
                       float rope_theta, IntArg batch) {
             ModelConfig c;
             c.vocab_size = dimension("vocab_size", vocab_size);
             c.length = dimension("length", length);
             c.d_model = dimension("d_model", d_model);
             c.n_layers = dimension("n_layers", n_layers);
             c.n_heads = dimension("n_heads", n_heads);
             c.n_kv_heads = dimension("n_kv_heads", n_kv_heads);
             c.d_ff = dimension("d_ff", d_ff);
             c.norm_eps = norm_eps;
             c.rope_theta = rope_theta;
             c.batch = dimension("batch", batch);
             c.validate();
             return c;
           }),
           py::kw_only(), py::arg("vocab_size") = d.vocab_size, py::arg("length") = d.length,
           py::arg("d_model") = d.d_model, py::arg("n_layers") = d.n_layers,
           py::arg("n_heads") = d.n_heads, py::arg("n_kv_heads") = d.n_kv_heads,
           py::arg("d_ff") = d.d_ff, py::arg("norm_eps") = d.norm_eps,
           py::arg("rope_theta") = d.rope_theta, py::arg("batch") = d.batch)
      .def_readonly("vocab_size", &ModelConfig::vocab_size, "Token ids are in [0, vocab_size).")
      .def_readonly("length", &ModelConfig::length, "The window: most positions one row holds.")
      .def_readonly("d_model", &ModelConfig::d_model)
      .def_readonly("n_layers", &ModelConfig::n_layers)
      .def_readonly("n_heads", &ModelConfig::n_heads)
      .def_readonly("n_kv_heads", &ModelConfig::n_kv_heads)
      .def_readonly("d_ff", &ModelConfig::d_ff)
      .def_readonly("norm_eps", &ModelConfig::norm_eps)
      .def_readonly("rope_theta", &ModelConfig::rope_theta)
      .def_readonly("batch", &ModelConfig::batch,
                    "Rows of the training batch: loss_bits and train_step take "
                    "[batch, length + 1].")
      .def_readonly("qkv_bias", &ModelConfig::qkv_bias, "Biases on q, k and v (an imported Qwen2).")
      .def_readonly("o_bias", &ModelConfig::o_bias, "A bias on the attention output (Llama's attention_bias).")
      .def_property_readonly("rope_scaling", &scaling_dict,
                             "Llama 3's RoPE scaling as model.json records it (a dict), or None.")
      .def_property_readonly("head_dim", &ModelConfig::head_dim)
      .def_property_readonly(
          "parameter_names",
          [](const ModelConfig& c) {
            const ParameterRegistry registry(c);
            py::list names;
            for (const ParameterInfo& e : registry.entries()) names.append(e.name);
            return names;
          },
          "The names of the parameters, in the order of the flat vector.")
      .def_property_readonly(
          "parameter_shapes",
          [](const ModelConfig& c) {
            const ParameterRegistry registry(c);
            py::list shapes;
            for (const ParameterInfo& e : registry.entries()) {
              py::tuple s(e.shape.size());
              for (size_t i = 0; i < e.shape.size(); ++i) s[i] = py::int_(e.shape[i]);
              shapes.append(s);
            }
            return shapes;
          },
          "Each parameter's shape, a tuple, in the same order (matrices are [in, out]).")
      .def_property_readonly(
          "offsets",
          [](const ModelConfig& c) {
            const ParameterRegistry r(c);
            py::list offsets;
            for (const ParameterInfo& e : r.entries()) offsets.append(e.offset);
            offsets.append(r.total());
            return offsets;
          },
          "Where each parameter starts in the flat vector, then n_total: parameter j is "
          "flat[offsets[j]:offsets[j + 1]].")
      .def_property_readonly(
          "n_total", [](const ModelConfig& c) { return ParameterRegistry(c).total(); },
          "The number of float32 values of the flat parameter vector.")
      .def("__eq__",
           [](const ModelConfig& a, const py::object& b) -> py::object {
             if (!py::isinstance<ModelConfig>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(a == b.cast<ModelConfig>());
           })
      .def("__hash__", [](const ModelConfig& c) { return py::hash(key(c)); })
      .def("__repr__", [](const ModelConfig& c) { return repr(c); })
      .def("__copy__", [](const ModelConfig& c) { return c; })
      .def("__deepcopy__", [](const ModelConfig& c, const py::dict&) { return c; })
      .def(py::pickle([](const ModelConfig& c) { return key(c); },
                      [](py::tuple t) {
                        if (t.size() != 10 && t.size() != 13) throw py::value_error("LanguageModelConfig: bad pickled state");
                        ModelConfig c;
                        c.vocab_size = t[0].cast<int32_t>();
                        c.length = t[1].cast<int32_t>();
                        c.d_model = t[2].cast<int32_t>();
                        c.n_layers = t[3].cast<int32_t>();
                        c.n_heads = t[4].cast<int32_t>();
                        c.n_kv_heads = t[5].cast<int32_t>();
                        c.d_ff = t[6].cast<int32_t>();
                        c.norm_eps = t[7].cast<float>();
                        c.rope_theta = t[8].cast<float>();
                        c.batch = t[9].cast<int32_t>();
                        if (t.size() == 13) {
                          c.qkv_bias = t[10].cast<bool>();
                          c.o_bias = t[11].cast<bool>();
                          if (!t[12].is_none()) {
                            const py::tuple r = t[12].cast<py::tuple>();
                            c.rope_scaling = RopeScaling{r[0].cast<float>(), r[1].cast<float>(), r[2].cast<float>(),
                                                         r[3].cast<int32_t>()};
                          }
                        }
                        c.validate();
                        return c;
                      }));
}

}  // namespace
}  // namespace lockstep::python

PYBIND11_MODULE(_lockstep, m) {
  using namespace lockstep::python;
  m.doc() = "The compiled classes of the lockstep package (import them from `lockstep`).";
  py::register_exception_translator(&translate);
  m.attr("__version__") = "0.1.0";
  m.attr("PROFILE") = lockstep::profile_name();
  m.attr("MAX_THREADS") = lockstep::max_threads;
  m.def("default_thread_count", &lockstep::default_thread_count,
        "One thread per physical core available to this process: what threads=None means.");
  bind_config(m);
  bind_lowbit(m);  // before the classes whose signatures name PackedTensor
  bind_tokenizer(m);  // before LanguageModelInference, whose tokenizer property gives one
  bind_chat_template(m);  // and its chat_template
  bind_inference(m);
  bind_trainer(m);
  bind_session(m);
  bind_sampling(m);
  bind_interop(m);
}
