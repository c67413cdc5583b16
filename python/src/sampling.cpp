// lockstep._lockstep.sample_token: the library's sampler (include/lockstep/sampling.hpp) on logits
// from Python, with its intermediate values on request, so that the standard-library twin
// (python/lockstep/sampling.py) can be checked against it bit for bit.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "arg_types.hpp"
#include "convert.hpp"
#include "lockstep/sampling.hpp"

namespace lockstep::python {

void bind_sampling(py::module_& m) {
  m.def(
      "sample_token",
      [](py::handle logits_arg, int64_t step, float temperature, int32_t top_k, float top_p, IntArg seed_arg, bool trace) {
        const uint64_t seed = seed_value(seed_arg);
        const auto logits = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(logits_arg);
        if (!logits) throw py::type_error("logits must be a float32 array-like");
        if (logits.ndim() != 1) throw py::value_error("logits must be one-dimensional [vocab]");
        if (step < 0) throw py::value_error("step must be >= 0, got " + std::to_string(step));
        const SamplingOptions options{temperature, top_k, top_p, seed};
        const std::span<const float> values(logits.data(), static_cast<size_t>(logits.size()));
        if (!trace) return py::object(py::int_(sample_token(values, options, step)));
        SampleTrace t;
        const int32_t token = sample_token(values, options, step, &t);
        std::vector<float> weights = t.weights;
        const auto n = static_cast<py::ssize_t>(weights.size());
        return py::object(py::make_tuple(token, t.candidates, to_numpy(std::move(weights), {n}), t.total, t.target));
      },
      py::arg("logits"), py::arg("step") = 0, py::kw_only(), py::arg("temperature") = 0.0f, py::arg("top_k") = 0,
      py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("trace") = false,
      R"doc(
The token lockstep's sampler chooses from logits [vocab] (float32) at generation step `step`
(docs/ARITHMETIC.md, "Sampling"): what generate() draws with the same options. With trace=True,
returns (token, candidates, weights, total, target): the candidates after top-k and top-p, their
float32 weights, the float64 total and the draw's target (empty at temperature 0).
)doc");
}

}  // namespace lockstep::python
