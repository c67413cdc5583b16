// lockstep.LanguageModelHostTrainer: one-step training on the CPU (lockstep::Trainer) with the
// arguments and validation of document 004. A step replaces the trainer's state, so calls on one
// instance are serialised by its mutex; the GIL is released while a step computes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "convert.hpp"
#include "lockstep/trainer.hpp"

namespace lockstep::python {
namespace {

struct HostTrainer {
  ModelConfig config;
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
    return std::vector<float>(s.begin(), s.end());
  }

  uint32_t step(py::handle ids_arg) {
    const IdsArray ids = ids_array(ids_arg, config, layout());
    const IdsView view = ids_view(ids);
    py::gil_scoped_release release;
    std::lock_guard lock(mutex);
    return trainer->train_step(view);
  }
};

// A real number (int, float or a numpy scalar, not a bool) as a double; ValueError otherwise,
// as document 004 refuses it.
double real_number(py::handle value, const char* name) {
  static const char* const kRealMessage = " must be a real number";
  const py::object real = py::module_::import("numbers").attr("Real");
  if (PyBool_Check(value.ptr()) || !py::isinstance(value, real))
    throw py::value_error(std::string(name) + kRealMessage);
  return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
}

int64_t step_count(py::handle value) {
  bool overflow = false;
  const std::optional<long long> v = index_value(value, overflow);
  if (!v || overflow) throw py::value_error("completed_steps must be an int");
  if (*v < 0) throw py::value_error("completed_steps must not be negative");
  return *v;
}

AdamWOptions adamw_options(py::handle lr_arg, py::handle betas, py::handle eps_arg,
                           py::handle weight_decay_arg) {
  if (py::isinstance<py::str>(betas) || !py::isinstance<py::sequence>(betas) || py::len(betas) != 2)
    throw py::value_error("betas must be a pair of real numbers (beta1, beta2)");
  const py::sequence pair = py::reinterpret_borrow<py::sequence>(betas);
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
  o.lr = static_cast<float>(lr);
  o.beta1 = static_cast<float>(beta1);
  o.beta2 = static_cast<float>(beta2);
  o.eps = static_cast<float>(eps);
  o.weight_decay = static_cast<float>(weight_decay);
  o.validate();  // what float32 makes of them: a rate that rounds to 0 or inf is refused here
  return o;
}

const char* const kClassDoc = R"doc(
One AdamW training step at a time on the CPU: forward, backward and the update, with the same
bits on the threaded and the reference path.

LanguageModelHostTrainer(parameters, *, m=None, v=None, shape=None, completed_steps=0, lr=1e-3,
                         betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, threaded=True,
                         threads=None)

parameters, m, v: flat float32 arrays of shape.n_total finite values (parameters may also be a
    dict of named tensors); m and v default to zeros. Copied.
completed_steps: the steps already taken (AdamW's bias correction counts from it).
lr, betas, eps, weight_decay: AdamW's; real numbers with lr, eps > 0, betas in [0, 1) and
    weight_decay >= 0, else ValueError. weight_decay is decoupled.
threaded, threads: as for LanguageModelInference (both paths give the same bits).
)doc";

}  // namespace

void bind_trainer(py::module_& m) {
  py::class_<HostTrainer>(m, "LanguageModelHostTrainer", kClassDoc)
      .def(py::init([](py::handle parameters, py::handle m_arg, py::handle v_arg, py::handle shape,
                       py::handle completed_steps, py::handle lr, py::handle betas, py::handle eps,
                       py::handle weight_decay, py::handle threaded, py::handle threads) {
             auto self = std::make_unique<HostTrainer>();
             self->config = config_from(shape);
             self->threaded = threaded_flag(threaded);
             self->threads = threads_count(threads);
             const int64_t n = ParameterRegistry(self->config).total();
             TrainerState state;
             const Parameters given = parameters_from(parameters, self->config);
             state.parameters.assign(given.values().begin(), given.values().end());
             state.m = m_arg.is_none() ? std::vector<float>(static_cast<size_t>(n), 0.0f)
                                       : floats_from(m_arg, n, "m");
             state.v = v_arg.is_none() ? std::vector<float>(static_cast<size_t>(n), 0.0f)
                                       : floats_from(v_arg, n, "v");
             state.completed_steps = step_count(completed_steps);
             TrainerOptions options;
             options.adamw = adamw_options(lr, betas, eps, weight_decay);
             options.device = self->threaded ? Device::cpu : Device::reference;
             options.threads = self->threads.value_or(0);
             py::gil_scoped_release release;
             self->trainer = std::make_unique<Trainer>(
                 Trainer::from_state(self->config, std::move(state), options));
             return self;
           }),
           py::arg("parameters"), py::kw_only(), py::arg("m") = py::none(),
           py::arg("v") = py::none(), py::arg("shape") = py::none(),
           py::arg("completed_steps") = 0, py::arg("lr") = 1e-3,
           py::arg("betas") = py::make_tuple(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.01, py::arg("threaded") = true,
           py::arg("threads") = py::none())
      .def_static(
          "from_state",
          [](py::handle parameters, py::handle m_arg, py::handle v_arg, py::handle completed_steps,
             const py::kwargs& kwargs) {
            return py::type::of<HostTrainer>()(parameters, py::arg("m") = m_arg,
                                               py::arg("v") = v_arg,
                                               py::arg("completed_steps") = completed_steps,
                                               **kwargs);
          },
          py::arg("parameters"), py::arg("m"), py::arg("v"), py::kw_only(),
          py::arg("completed_steps") = 0, R"doc(
A trainer resuming a recorded state: the parameters and both moments after `completed_steps`
steps. Other keyword arguments are the constructor's.
)doc")
      .def("train_step", &HostTrainer::step, py::arg("ids"), R"doc(
One step on int32 ids [shape.batch, shape.length + 1] (the layout of loss_bits: the last column
is only a target and may hold -100, which is ignored). Returns the IEEE-754 bits (an int) of the
loss before the update.

On success the parameters and both moments are replaced, completed_steps advances and
gradient_ holds this step's gradient. A failed step (bad ids: ValueError; a loss or gradient that
is not finite: RuntimeError) leaves the state unchanged and gradient_ None.
)doc")
      .def(
          "loss",
          [](HostTrainer& self, py::handle ids) { return float_of_bits(self.step(ids)); },
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
      .def_property_readonly("threads", [](const HostTrainer& self) -> py::object {
        return self.threads ? py::object(py::int_(*self.threads)) : py::object(py::none());
      })
      .def("__repr__", [](const HostTrainer& self) {
        return "<lockstep.LanguageModelHostTrainer d_model=" + std::to_string(self.config.d_model) +
               " n_layers=" + std::to_string(self.config.n_layers) + ">";
      });
}

}  // namespace lockstep::python
