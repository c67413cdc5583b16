// lockstep.LanguageModelHostTrainer: one-step training on the CPU (lockstep::Trainer) with the
// arguments and validation of document 004. A step replaces the trainer's state, so calls on one
// instance are serialised by its mutex; the GIL is released while a step computes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arg_types.hpp"
#include "checkpoint.hpp"
#include "convert.hpp"
#include "inference.hpp"
#include "lockstep/format.hpp"
#include "lockstep/trainer.hpp"

namespace lockstep::python {
namespace {

struct HostTrainer {
  ModelConfig config;
  Precision precision = Precision::f32;  // a model's own when built from one
  std::string weight_format = "float32";   // of the parameters given (a model's, or packed ones)
  bool threaded = true;
  std::optional<int> threads;
  mutable std::mutex mutex;  // guards `trainer`: a step swaps its state
  std::unique_ptr<Trainer> trainer;

  std::string layout() const {
    return "[" + std::to_string(config.batch) + ", " + std::to_string(config.length + 1) + "]";
  }

  // A copy of one of the trainer's arrays, taken under the lock without holding the GIL.
  template <class Get>
  std::vector<float> copy(Get get) const {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex);
    const std::span<const float> s = get(*trainer);
    std::vector<float> out(s.size());
    if (!s.empty()) std::memcpy(out.data(), s.data(), s.size_bytes());
    return out;
  }

  uint32_t step(IdsArg ids_arg) {
    const IdsArray ids = ids_array(ids_arg, config, layout());
    const IdsView view = ids_view(ids);
    py::gil_scoped_release release;
    std::lock_guard lock(mutex);
    return trainer->train_step(view);
  }
};

// lr, betas, eps and weight_decay follow document 004's rule, except that a wrong type is a
// TypeError (README: wrong types raise TypeError) where the document raises ValueError: a Python
// int or float (float subclasses such as numpy.float64 included), never a bool, a str or another
// number type such as numpy.float32.
double real_number(py::handle value, const char* name) {
  PyObject* p = value.ptr();
  if (PyBool_Check(p) || !(PyLong_Check(p) || PyFloat_Check(p)))
    throw py::type_error(std::string(name) + " must be a real number (int or float); got " + type_name(value));
  const double v = PyFloat_Check(p) ? PyFloat_AsDouble(p) : PyLong_AsDouble(p);
  if (v == -1.0 && PyErr_Occurred()) {  // an int beyond a double's range
    PyErr_Clear();
    throw py::value_error(std::string(name) + " = " + py::str(value).cast<std::string>() + " is out of range");
  }
  return v;
}

// A positive option the update computes with in float32 (lr, eps): refused when the float32
// rounding is 0 or infinite, since the step would then compute with a value the caller did not
// give. This is stricter than document 004, which accepts lr=1e-50 (README, Python).
float positive_f32(double value, const char* name) {
  const float f = static_cast<float>(value);
  const std::string shown = py::repr(py::float_(value)).cast<std::string>();
  if (f == 0.0f)
    throw py::value_error(std::string(name) + " = " + shown +
                          " rounds to 0 in float32, the precision of the update (the smallest "
                          "positive float32 is about 1.4e-45)");
  if (std::isinf(f)) throw py::value_error(std::string(name) + " = " + shown + " overflows float32");
  return f;
}

// completed_steps: a Python int (document 004), not a bool nor a numpy integer; TypeError
// otherwise.
int64_t step_count(py::handle value) {
  if (PyBool_Check(value.ptr()) || !PyLong_Check(value.ptr()))
    throw py::type_error("completed_steps must be an int; got " + type_name(value));
  bool overflow = false;
  const std::optional<long long> v = index_value(value, overflow);
  if (overflow) throw py::value_error("completed_steps = " + py::str(value).cast<std::string>() + " is out of range");
  if (*v < 0) throw py::value_error("completed_steps must not be negative; got " + std::to_string(*v));
  return *v;
}

AdamWOptions adamw_options(py::handle lr_arg, py::handle betas, py::handle eps_arg,
                           py::handle weight_decay_arg) {
  if (py::isinstance<py::str>(betas) || py::isinstance<py::bytes>(betas) || !py::isinstance<py::sequence>(betas))
    throw py::type_error("betas must be a pair of real numbers (beta1, beta2); got " + type_name(betas));
  if (py::len(betas) != 2)
    throw py::value_error("betas must be a pair of real numbers (beta1, beta2); got " +
                          std::to_string(py::len(betas)) + " values");
  const py::sequence pair = py::reinterpret_borrow<py::sequence>(betas);
  // Every type first (TypeError), then the values (ValueError).
  const double lr = real_number(lr_arg, "lr");
  const double beta1 = real_number(pair[0], "beta1");
  const double beta2 = real_number(pair[1], "beta2");
  const double eps = real_number(eps_arg, "eps");
  const double weight_decay = real_number(weight_decay_arg, "weight_decay");
  if (!(lr > 0) || !(eps > 0)) throw py::value_error("lr and eps must be positive");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    throw py::value_error("betas must be in [0, 1)");
  if (!(weight_decay >= 0)) throw py::value_error("weight_decay must not be negative");
  AdamWOptions o;
  o.lr = positive_f32(lr, "lr");
  o.beta1 = static_cast<float>(beta1);
  o.beta2 = static_cast<float>(beta2);
  o.eps = positive_f32(eps, "eps");
  o.weight_decay = static_cast<float>(weight_decay);
  o.validate();  // what float32 makes of the rest (a weight decay that overflows, a beta that rounds to 1)
  return o;
}

// The dimensions a trainer built from `model` uses: the model's, or `shape` when given, which may
// differ from them in `batch` alone (the rows of a training step are not part of the model).
ModelConfig config_for_model(const ModelConfig& own, py::handle shape) {
  if (shape.is_none()) return own;
  const ModelConfig given = config_from(shape);
  ModelConfig same_batch = own;
  same_batch.batch = given.batch;
  if (!(same_batch == given))
    throw py::value_error("shape must be the model's own dimensions (" +
                          py::repr(py::cast(own)).cast<std::string>() +
                          "), with at most another batch; got " + py::repr(shape).cast<std::string>());
  return given;
}

const char* const kClassDoc = R"doc(
One AdamW training step at a time on the CPU: forward, backward and the update, with the same
bits on the threaded and the reference path.

LanguageModelHostTrainer(parameters, *, m=None, v=None, shape=None, completed_steps=0, lr=1e-3,
                         betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, threaded=True,
                         threads=None)

parameters: a LanguageModelInference to start from (its parameters, dimensions and precision),
    or flat float32 parameters (shape.n_total finite values), or a dict of named float32 tensors
    whose matrices may be packed (lockstep.lowbit, expanded exactly). Copied. Array-likes of
    other real dtypes are taken when float32 holds each value exactly (as for
    LanguageModelInference).
shape: a LanguageModelConfig. Required with flat or named parameters: the window, batch, heads,
    norm_eps and rope_theta cannot be read off them (TypeError without it). With a model it
    defaults to the model's, and may differ from it in batch alone.
m, v: flat float32 arrays of shape.n_total finite values; zeros by default. Copied.
completed_steps: an int, the steps already taken (AdamW's bias correction counts from it).
lr, betas, eps, weight_decay: AdamW's, each an int or float (a numpy float64 is a float; a
    numpy float32, a bool or a str is a TypeError); lr, eps > 0 and still > 0 in float32, betas in
    [0, 1), weight_decay >= 0, else ValueError. weight_decay is decoupled.
threaded, threads: as for LanguageModelInference (both paths give the same bits).
)doc";

// The trainer behind `parameters` (a LanguageModelInference, flat or named parameters).
std::unique_ptr<HostTrainer> make_trainer(py::handle parameters, py::handle m_arg, py::handle v_arg,
                                          py::handle shape, py::handle completed_steps, py::handle lr,
                                          py::handle betas, py::handle eps, py::handle weight_decay,
                                          py::handle threaded, py::handle threads) {
  auto self = std::make_unique<HostTrainer>();
  const bool from_model = py::isinstance<Inference>(parameters);
  if (from_model) {
    const Inference& model = parameters.cast<const Inference&>();
    self->config = config_for_model(model.config(), shape);
    self->precision = model.model->precision();
    self->weight_format = model.weight_format();
  } else {
    if (shape.is_none())
      throw py::type_error(
          "LanguageModelHostTrainer needs shape= (a LanguageModelConfig) with flat or named "
          "parameters: the window, batch, heads, norm_eps and rope_theta cannot be read off "
          "them; or pass a LanguageModelInference as the parameters");
    self->config = config_from(shape);
  }
  self->threaded = threaded_flag(threaded);
  self->threads = threads_count(threads);
  const int64_t n = ParameterRegistry(self->config).total();
  TrainerState state;
  if (from_model) {
    const std::span<const float> p = parameters.cast<const Inference&>().model->parameters();
    state.parameters.assign(p.begin(), p.end());
  } else {
    const Parameters given = parameters_from(parameters, self->config);
    self->weight_format = given.weight_format;
    state.parameters.assign(given.values().begin(), given.values().end());
  }
  state.m = m_arg.is_none() ? std::vector<float>(static_cast<size_t>(n), 0.0f) : floats_from(m_arg, n, "m");
  state.v = v_arg.is_none() ? std::vector<float>(static_cast<size_t>(n), 0.0f) : floats_from(v_arg, n, "v");
  state.completed_steps = step_count(completed_steps);
  TrainerOptions options;
  options.adamw = adamw_options(lr, betas, eps, weight_decay);
  options.device = self->threaded ? Device::cpu : Device::reference;
  options.threads = self->threads.value_or(0);
  options.precision = self->precision;
  py::gil_scoped_release release;
  self->trainer = std::make_unique<Trainer>(Trainer::from_state(self->config, std::move(state), options));
  return self;
}

}  // namespace

void bind_trainer(py::module_& m) {
  py::class_<HostTrainer> cls(m, "LanguageModelHostTrainer", kClassDoc);
  cls.def(py::init([](ParametersOrModelArg parameters, OptionalArrayArg m_arg, OptionalArrayArg v_arg,
                      OptionalConfigArg shape, IntArg completed_steps, FloatArg lr, BetasArg betas,
                      FloatArg eps, FloatArg weight_decay, BoolArg threaded, OptionalIntArg threads) {
            return make_trainer(parameters, m_arg, v_arg, shape, completed_steps, lr, betas, eps,
                                weight_decay, threaded, threads);
          }),
          py::arg("parameters"), py::kw_only(), py::arg("m") = py::none(), py::arg("v") = py::none(),
          py::arg("shape") = py::none(), py::arg("completed_steps") = 0, py::arg("lr") = 1e-3,
          py::arg("betas") = py::make_tuple(0.9, 0.999), py::arg("eps") = 1e-8,
          py::arg("weight_decay") = 0.01, py::arg("threaded") = true, py::arg("threads") = py::none());
  // A class method, as in document 004: a subclass's from_state builds the subclass, through
  // its own constructor.
  cls.attr("from_state") = py::reinterpret_steal<py::object>(PyClassMethod_New(
      py::cpp_function(
          [](ClassArg type, ParametersOrModelArg parameters, OptionalArrayArg m_arg,
             OptionalArrayArg v_arg, IntArg completed_steps, const py::kwargs& kwargs) {
            return TrainerResult(type(parameters, py::arg("m") = m_arg, py::arg("v") = v_arg,
                                      py::arg("completed_steps") = completed_steps, **kwargs));
          },
          py::name("from_state"), py::scope(cls), py::arg("cls"), py::arg("parameters"),
          py::arg("m"), py::arg("v"), py::kw_only(), py::arg("completed_steps") = 0,
          R"doc(
A class method: a trainer resuming a recorded state, the parameters and both moments after
`completed_steps` steps, built as cls(parameters, m=m, v=v, completed_steps=completed_steps,
**kwargs) (so a subclass's from_state returns the subclass). Other keyword arguments are the
constructor's.
)doc")
          .ptr()));
  cls.def("train_step", &HostTrainer::step, py::arg("ids"), R"doc(
One step on int32 ids [shape.batch, shape.length + 1] (the layout of loss_bits: the last column
is only a target and may hold -100, which is ignored). Returns the IEEE-754 bits (an int) of the
loss before the update.

On success the parameters and both moments are replaced, completed_steps advances and
gradient_ holds this step's gradient. A failed step (bad ids: ValueError; a loss or gradient that
is not finite: RuntimeError) leaves the state unchanged and gradient_ None.
)doc")
      .def(
          "loss",
          [](HostTrainer& self, IdsArg ids) { return float_of_bits(self.step(ids)); },
          py::arg("ids"),
          "train_step(ids) with its loss returned as a float: it takes the step. The bits are "
          "the value to compare; this is for reading.")
      .def("parameters_sha256",
           [](const HostTrainer& self) {
             py::gil_scoped_release release;
             std::lock_guard lock(self.mutex);
             return self.trainer->parameters_sha256();
           },
           "SHA-256 (hex) of the current parameters' little-endian float32 bytes.")
      .def_property_readonly(
          "parameters_",
          [](const HostTrainer& self) {
            auto values = self.copy([](const Trainer& t) { return t.parameters(); });
            const auto n = static_cast<py::ssize_t>(values.size());
            return to_numpy(std::move(values), {n});
          },
          "A copy of the current flat float32 parameters.")
      .def_property_readonly(
          "m_",
          [](const HostTrainer& self) {
            auto values = self.copy([](const Trainer& t) { return t.m(); });
            const auto n = static_cast<py::ssize_t>(values.size());
            return to_numpy(std::move(values), {n});
          },
          "A copy of AdamW's first moment.")
      .def_property_readonly(
          "v_",
          [](const HostTrainer& self) {
            auto values = self.copy([](const Trainer& t) { return t.v(); });
            const auto n = static_cast<py::ssize_t>(values.size());
            return to_numpy(std::move(values), {n});
          },
          "A copy of AdamW's second moment.")
      .def_property_readonly(
          "gradient_",
          [](const HostTrainer& self) -> py::object {
            auto values = self.copy([](const Trainer& t) { return t.gradient(); });
            if (values.empty()) return py::none();
            const auto n = static_cast<py::ssize_t>(values.size());
            return to_numpy(std::move(values), {n});
          },
          "A copy of the last step's gradient; None before any step and after a failed one.")
      .def_property_readonly(
          "completed_steps",
          [](const HostTrainer& self) {
            py::gil_scoped_release release;
            std::lock_guard lock(self.mutex);
            return self.trainer->completed_steps();
          },
          "The number of steps taken (those given at construction included).")
      .def_property_readonly("shape", [](const HostTrainer& self) { return self.config; },
                             "The model dimensions, a LanguageModelConfig.")
      .def_property_readonly("profile", [](const HostTrainer&) { return std::string(profile_name()); },
                             "The name of the arithmetic profile the trainer computes.")
      .def_property_readonly("threaded", [](const HostTrainer& self) { return self.threaded; })
      .def_property_readonly("threads", [](const HostTrainer& self) { return self.threads; })
      .def_property_readonly("precision",
                             [](const HostTrainer& self) { return std::string(precision_name(self.precision)); },
                             "\"f32\" or \"bf16\": the precision of the matmuls (a model's own when "
                             "built from one, else f32).")
      .def_property_readonly("weight_format", [](const HostTrainer& self) { return self.weight_format; },
                             "\"float32\", or the packed format of the parameters the trainer started "
                             "from (a packed model's, or lockstep.lowbit tensors, expanded exactly); "
                             "training updates them as float32 either way.")
      .def(
          "parameter_registry",
          [](const HostTrainer& self) {
            const ParameterRegistry registry(self.config);
            py::list out;
            for (const ParameterInfo& e : registry.entries()) {
              py::tuple shape(e.shape.size());
              for (size_t i = 0; i < e.shape.size(); ++i) shape[i] = py::int_(e.shape[i]);
              py::dict d;
              d["name"] = e.name;
              d["shape"] = shape;
              d["offset"] = e.offset;
              d["count"] = e.count;
              out.append(d);
            }
            return out;
          },
          R"doc(
The parameters in the order of the flat vector: a list of dicts with "name", "shape" (a tuple;
matrices are [in, out]), "offset" (where it starts in parameters_, m_ and v_) and "count". The
names are the keys of the named-parameter dict, of params.safetensors and (with "m." / "v."
before them) of a checkpoint's optimizer.safetensors.
)doc")
      .def(
          "save_checkpoint",
          [](const HostTrainer& self, PathArg location, PathArg run_file) {
            const py::module_ os = py::module_::import("os");
            const std::string where = os.attr("fsdecode")(location).cast<std::string>();
            const std::string run = os.attr("fsdecode")(run_file).cast<std::string>();
            py::gil_scoped_release release;
            std::lock_guard lock(self.mutex);
            return save_checkpoint(where, run, *self.trainer, self.precision);
          },
          py::arg("location"), py::arg("run_file"), R"doc(
Writes the trainer's state as the checkpoint step LOCATION/step-<completed_steps> (LOCATION is
created when missing; the step must not exist) and returns its path: the model, AdamW's moments
and the step, with a copy of the run file `run_file` and the sizes and SHA-256s of its data
files, written whole or not at all by the writer `lockstep train` uses. `lockstep train
RUN_FILE --checkpoint-dir LOCATION --resume` continues it (its checks passing: same model, data
and :precision), and `from_checkpoint`, `serve`, `call` and `export` read it.

Relative paths (LOCATION, the run file's :data) are read from the current directory, as
`lockstep train` reads them; the checkpoint records :data as the run file writes it, and resuming
compares those records, so resume from the directory this was called from.

The run file must describe this trainer: its model keys and :batch give the trainer's shape
and its :precision the trainer's precision (ValueError naming the difference otherwise); one
with :ema or :load is refused, since this trainer keeps no averages and freezes nothing. The
run file's optimiser keys (:lr, :beta1, ...), not this trainer's lr and betas, govern the steps a
resumed run takes. Without a run file, save_model writes the parameters as a model directory.
)doc")
      .def(
          "save_model",
          [](const HostTrainer& self, PathArg path) {
            const py::module_ os = py::module_::import("os");
            const std::string where = os.attr("fsdecode")(path).cast<std::string>();
            // The library refuses an existing path as a bad argument; here it is the OSError
            // subclass Python gives for it. (One made after this check is still refused.)
            if (os.attr("path").attr("lexists")(where).cast<bool>()) {
              PyErr_SetObject(PyExc_FileExistsError,
                              py::make_tuple(EEXIST, "'" + where + "' already exists; save_model writes a new directory",
                                             where)
                                  .ptr());
              throw py::error_already_set();
            }
            py::gil_scoped_release release;
            std::lock_guard lock(self.mutex);
            ModelMetadata metadata;
            metadata.precision = self.precision;
            write_model_directory(where, self.config, self.trainer->parameters(), metadata);
          },
          py::arg("path"), R"doc(
Writes the current parameters as a new model directory at `path` (str or path-like; it must not
exist, FileExistsError otherwise): model.json and params.safetensors, which
LanguageModelInference.from_checkpoint, `lockstep inspect`, `lockstep serve` and every other
command read. The directory appears whole or not at all. The moments are not written; keep
m_ and v_ (with completed_steps) to resume training with from_state.
)doc")
      .def("__repr__", [](const HostTrainer& self) {
        return "<lockstep.LanguageModelHostTrainer d_model=" + std::to_string(self.config.d_model) +
               " n_layers=" + std::to_string(self.config.n_layers) + ">";
      });
}

}  // namespace lockstep::python
