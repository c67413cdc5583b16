// lockstep.export_gguf and lockstep.import_hf: the library's interop functions
// (include/lockstep/interop.hpp), with the GIL released while they read and write.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "lockstep/interop.hpp"

namespace py = pybind11;

namespace lockstep::python {

void bind_interop(py::module_& m) {
  m.def(
      "export_gguf",
      [](const std::string& model, const std::string& file, const std::string& type, const std::string& name) {
        GgufOptions options;
        options.type = type;
        options.name = name;
        GgufResult r;
        {
          py::gil_scoped_release release;
          r = export_gguf(model, file, options);
        }
        py::dict d;
        d["model"] = r.model_dir;
        d["tensors"] = r.tensors;
        d["bytes"] = r.bytes;
        d["type"] = r.type;
        return d;
      },
      py::arg("model"), py::arg("file"), py::kw_only(), py::arg("type") = "f32", py::arg("name") = "",
      R"doc(Writes a model directory as a GGUF file for llama.cpp (`lockstep export-gguf`); type is
"f32", "f16" or "q8_0". Returns {"model", "tensors", "bytes", "type"}.)doc");
  m.def(
      "import_hf",
      [](const std::string& dir, const std::string& out, std::optional<int32_t> length, int32_t batch, bool ids_only) {
        ImportHfOptions options;
        options.length = length.value_or(0);
        options.batch = batch;
        options.ids_only = ids_only;
        ImportHfResult r;
        {
          py::gil_scoped_release release;
          r = import_hf(dir, out, options);
        }
        py::dict d;
        d["files"] = r.files;
        d["dtypes"] = r.dtypes;
        d["tied"] = r.tied;
        d["vocab_size"] = r.config.vocab_size;
        d["length"] = r.config.length;
        return d;
      },
      py::arg("dir"), py::arg("out"), py::kw_only(), py::arg("length") = py::none(), py::arg("batch") = 8,
      py::arg("ids_only") = false,
      R"doc(Imports a Hugging Face LlamaForCausalLM directory as a lockstep model directory at out
(`lockstep import hf`). Returns {"files", "dtypes", "tied", "vocab_size", "length"}.)doc");
}

}  // namespace lockstep::python
