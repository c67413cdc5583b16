// lockstep.export_gguf, lockstep.import_hf and lockstep.import_gguf: the library's interop functions
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
  m.def(
      "import_gguf",
      [](const std::string& file, const std::string& out, std::optional<int32_t> length, bool ids_only,
         bool widen_k_quants) {
        ImportGgufOptions options;
        options.length = length.value_or(0);
        options.ids_only = ids_only;
        options.widen_k_quants = widen_k_quants;
        ImportGgufResult r;
        {
          py::gil_scoped_release release;
          r = import_gguf(file, out, options);
        }
        py::dict d;
        d["profile"] = r.profile;
        d["types"] = r.types;
        d["block_matrices"] = r.block_matrices;
        d["widened_k_quants"] = r.widened_k_quants;
        d["tied"] = r.tied;
        d["vocabulary"] = r.vocabulary;
        d["vocab_size"] = r.config.vocab_size;
        d["length"] = r.config.length;
        return d;
      },
      py::arg("file"), py::arg("out"), py::kw_only(), py::arg("length") = py::none(), py::arg("ids_only") = false,
      py::arg("widen_k_quants") = false,
      R"doc(Imports a llama or qwen2 GGUF file as a lockstep model directory at out (`lockstep import
gguf`): matrices in Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or Q6_K stay the file's blocks (profile
lockstep-int8dot-1, or -2 with K-quants); widen_k_quants widens the K-quants to f32 instead.
Returns {"profile", "types", "block_matrices", "widened_k_quants", "tied", "vocabulary",
"vocab_size", "length"}.)doc");
}

}  // namespace lockstep::python
