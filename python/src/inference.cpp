// lockstep.LanguageModelInference: a loaded model (lockstep::Model) and the calls of document
// 003. The model is immutable, so one instance may be called from several Python threads at once;
// the GIL is released while it computes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arg_types.hpp"
#include "chat.hpp"
#include "convert.hpp"
#include "inference.hpp"
#include "lockstep/model.hpp"

namespace lockstep::python {
namespace {

ModelOptions model_options(bool threaded, std::optional<int> threads) {
  ModelOptions o;
  o.device = threaded ? Device::cpu : Device::reference;
  o.threads = threads.value_or(0);
  return o;
}

// Logits or hidden states, [batch, T, width], for the ids and optional ragged lengths.
template <class Compute>
py::array_t<float> rows_call(const Inference& self, py::handle ids_arg, py::handle lengths_arg,
                             py::handle threaded, py::handle threads, int64_t width,
                             Compute compute) {
  const CallOptions call = self.call(threaded, threads);
  const std::optional<std::vector<int32_t>> lengths = lengths_list(lengths_arg);
  const IdsArray ids = ids_array(ids_arg, self.config(), self.window(), lengths ? &*lengths : nullptr);
  const IdsView view = ids_view(ids);
  std::vector<float> out;
  {
    py::gil_scoped_release release;
    out = compute(*self.model, view,
                  lengths ? std::span<const int32_t>(*lengths) : std::span<const int32_t>(), call);
  }
  return to_numpy(std::move(out), {view.rows, view.cols, width});
}

const char* const kClassDoc = R"doc(
A trained byte-level decoder language model on the CPU: logits, hidden states, loss and greedy
next bytes, with the same bits on every path.

LanguageModelInference(parameters, *, shape=None, threaded=True, threads=None)

parameters: flat float32 parameters (shape.n_total values, all finite; a numpy float32 array is
    read in place; any other array-like of real numbers, a list of floats or a float64 array,
    is taken when float32 holds each value exactly, else ValueError naming the first that it
    does not: lockstep never rounds a value you give) or a dict of named float32 tensors (names
    and shapes from shape.parameter_names / shape.parameter_shapes), whose matrices may be packed
    (lockstep.lowbit.PackedTensor, expanded exactly; all of them in one format or none:
    weight_format then names it). Copied; the model never changes. Or another
    LanguageModelInference, whose model (immutable) this one shares, with its own threaded and
    threads settings; shape must then be None or that model's.
shape: a LanguageModelConfig, or None for the default dimensions.
threaded: True runs the SIMD kernels on a thread pool, False the single-threaded reference
    kernels. Both give the same bits.
threads: the most threads a call uses, in [1, 1024]; None: one per physical core.

Every call takes threaded= and threads= too, overriding the instance's settings (None keeps
them). Ids are int32 arrays (any integer dtype is converted); a wrong dtype raises TypeError, a
wrong shape or an id outside [0, vocab_size) ValueError.
)doc";

}  // namespace

void bind_inference(py::module_& m) {
  py::class_<Inference> cls(m, "LanguageModelInference", kClassDoc);
  cls.def(py::init([](ParametersOrModelArg parameters, OptionalConfigArg shape, BoolArg threaded,
                      OptionalIntArg threads) {
            const bool flag = threaded_flag(threaded);
            const std::optional<int> count = threads_count(threads);
            Inference self;
            self.threaded = flag;
            self.threads = count;
            if (py::isinstance<Inference>(parameters)) {  // share its immutable model
              self.model = parameters.cast<const Inference&>().model;
              self.given_format = parameters.cast<const Inference&>().given_format;
              self.tokenizer = parameters.cast<const Inference&>().tokenizer;
              self.chat_template = parameters.cast<const Inference&>().chat_template;
              if (!shape.is_none() && !(config_from(shape) == self.config()))
                throw py::value_error("shape must be None or the model's own dimensions (" +
                                      py::repr(py::cast(self.config())).cast<std::string>() + "); got " +
                                      py::repr(shape).cast<std::string>());
              return self;
            }
            const ModelConfig config = config_from(shape);
            const Parameters flat = parameters_from(parameters, config);
            if (flat.weight_format != "float32") self.given_format = flat.weight_format;
            py::gil_scoped_release release;  // checks, SHA-256 and weight packing
            self.model = Model::from_parameters(config, flat.values(), model_options(flag, count));
            return self;
          }),
          py::arg("parameters"), py::kw_only(), py::arg("shape") = py::none(),
          py::arg("threaded") = true, py::arg("threads") = py::none());
  // A class method, as in document 004: the model is loaded here, then built as
  // cls(model, threaded=..., threads=...), so that a subclass's from_checkpoint returns the
  // subclass, made by its own constructor.
  cls.attr("from_checkpoint") = py::reinterpret_steal<py::object>(PyClassMethod_New(
      py::cpp_function(
          [](ClassArg type, PathArg path, BoolArg threaded, OptionalIntArg threads, BoolArg trained) {
            const std::string where = py::module_::import("os").attr("fsdecode")(path).cast<std::string>();
            const bool flag = threaded_flag(threaded);
            const std::optional<int> count = threads_count(threads);
            if (!PyBool_Check(trained.ptr())) throw py::type_error("trained must be a bool");
            LoadOptions options;
            static_cast<ModelOptions&>(options) = model_options(flag, count);
            options.trained = trained.ptr() == Py_True;
            Inference loaded;
            loaded.threaded = flag;
            loaded.threads = count;
            {
              py::gil_scoped_release release;
              loaded.model = Model::load(where, options);
              loaded.tokenizer = Tokenizer::for_model(where);
              loaded.chat_template = ChatTemplate::for_model(where);
            }
            if (type.is(py::type::of<Inference>())) return InferenceResult(py::cast(std::move(loaded)));
            return InferenceResult(type(py::cast(std::move(loaded)), py::arg("threaded") = threaded,
                                        py::arg("threads") = threads));
          },
          py::name("from_checkpoint"), py::scope(cls), py::arg("cls"), py::arg("path"), py::kw_only(),
          py::arg("threaded") = true, py::arg("threads") = py::none(), py::arg("trained") = false,
          R"doc(
A class method: loads a model written by lockstep. `path` (str or path-like) is a model
directory, a checkpoint step directory, a checkpoint location (its newest complete step) or a
model.json file. Every check of `lockstep inspect` is made. threaded and threads are as for the
constructor; trained=True reads a checkpoint's trained weights instead of its EMA averages.
A missing path raises FileNotFoundError, a denied one PermissionError (both OSError); a damaged
file ValueError. A subclass's from_checkpoint returns the subclass: the loaded model is passed to
cls(model, threaded=threaded, threads=threads).
)doc")
          .ptr()));
  cls.def(
          "logits",
          [](const Inference& self, IdsArg ids, LengthsArg lengths, OptionalBoolArg threaded,
             OptionalIntArg threads) {
            return rows_call(self, ids, lengths, threaded, threads, self.config().vocab_size,
                             [](const Model& model, const IdsView& v, std::span<const int32_t> l,
                                const CallOptions& c) { return model.logits(v, l, c); });
          },
          py::arg("ids"), py::kw_only(), py::arg("lengths") = py::none(),
          py::arg("threaded") = py::none(), py::arg("threads") = py::none(), R"doc(
Float32 logits [batch, length, vocab_size] for int32 ids [batch, length], 1 <= length <=
shape.length, positions from 0.

lengths: None, or one int per row making the batch ragged: row i is real at [0, lengths[i]) and
padding after (its padding ids are not read). Real positions get exactly the logits of the row
alone at its own length; padding positions are +0.0.
)doc")
      .def(
          "hidden",
          [](const Inference& self, IdsArg ids, LengthsArg lengths, OptionalBoolArg threaded,
             OptionalIntArg threads) {
            return rows_call(self, ids, lengths, threaded, threads, self.config().d_model,
                             [](const Model& model, const IdsView& v, std::span<const int32_t> l,
                                const CallOptions& c) { return model.hidden(v, l, c); });
          },
          py::arg("ids"), py::kw_only(), py::arg("lengths") = py::none(),
          py::arg("threaded") = py::none(), py::arg("threads") = py::none(),
          "The final normalised hidden state, float32 [batch, length, d_model]; the rules of "
          "logits().")
      .def(
          "loss_bits",
          [](const Inference& self, IdsArg ids_arg, OptionalBoolArg threaded, OptionalIntArg threads) {
            const CallOptions call = self.call(threaded, threads);
            const IdsArray ids = ids_array(ids_arg, self.config(), self.loss_layout());
            const IdsView view = ids_view(ids);
            py::gil_scoped_release release;
            return self.model->loss_bits(view, call);
          },
          py::arg("ids"), py::kw_only(), py::arg("threaded") = py::none(),
          py::arg("threads") = py::none(), R"doc(
The IEEE-754 bits (an int) of the float32 mean next-token loss, for exact comparison.

ids: int32 [shape.batch, shape.length + 1], the training layout: columns [0, length) are the
inputs and columns [1, length] the targets. The last column is only a target, and -100 there is
ignored; -100 anywhere else is refused.
)doc")
      .def(
          "loss",
          [](const Inference& self, IdsArg ids_arg, OptionalBoolArg threaded, OptionalIntArg threads) {
            const CallOptions call = self.call(threaded, threads);
            const IdsArray ids = ids_array(ids_arg, self.config(), self.loss_layout());
            const IdsView view = ids_view(ids);
            uint32_t bits = 0;
            {
              py::gil_scoped_release release;
              bits = self.model->loss_bits(view, call);
            }
            return float_of_bits(bits);
          },
          py::arg("ids"), py::kw_only(), py::arg("threaded") = py::none(),
          py::arg("threads") = py::none(),
          "The mean next-token loss as a float; loss_bits() gives its bits.")
      .def(
          "next_bytes",
          [](const Inference& self, IdsArg ids_arg, LengthsArg lengths_arg,
             OptionalBoolArg threaded, OptionalIntArg threads) {
            const CallOptions call = self.call(threaded, threads);
            const std::optional<std::vector<int32_t>> lengths = lengths_list(lengths_arg);
            const IdsArray ids =
                ids_array(ids_arg, self.config(), self.window(), lengths ? &*lengths : nullptr);
            const IdsView view = ids_view(ids);
            std::vector<int32_t> next;
            {
              py::gil_scoped_release release;
              next = self.model->next_bytes(
                  view, lengths ? std::span<const int32_t>(*lengths) : std::span<const int32_t>(),
                  call);
            }
            return py::cast(next);  // a list of int
          },
          py::arg("ids"), py::kw_only(), py::arg("lengths") = py::none(),
          py::arg("threaded") = py::none(), py::arg("threads") = py::none(), R"doc(
The greedy next token after each row, a list of int: the highest logit at the row's last
position (with lengths, its last real position), ties going to the lowest id.
)doc")
      .def("parameters_sha256",
           [](const Inference& self) { return self.model->parameters_sha256(); },
           "SHA-256 (hex) of the parameters' little-endian float32 bytes.")
      .def_property_readonly(
          "parameters_",
          [](py::object self_obj) {
            // A read-only view of the model's own parameters, kept alive by this object.
            const Inference& self = self_obj.cast<const Inference&>();
            const std::span<const float> p = self.model->parameters();
            py::array_t<float> view({static_cast<py::ssize_t>(p.size())}, {sizeof(float)},
                                    p.data(), self_obj);
            view.attr("setflags")(py::arg("write") = false);
            return view;
          },
          "The flat float32 parameters, a read-only numpy view (no copy).")
      .def_property_readonly("shape", [](const Inference& self) { return self.config(); },
                             "The model dimensions, a LanguageModelConfig.")
      .def_property_readonly("profile", [](const Inference& self) { return std::string(self.model->profile()); },
                             "The name of the arithmetic profile the model computes.")
      .def_property_readonly("weight_format", [](const Inference& self) { return self.weight_format(); },
                             "\"float32\", or the packed format the weights were read from or given "
                             "in (lockstep.lowbit): \"q8\".")
      .def_property_readonly("precision",
                             [](const Inference& self) { return std::string(precision_name(self.model->precision())); },
                             "\"f32\" or \"bf16\": the precision of the matmuls.")
      .def_property_readonly("threaded", [](const Inference& self) { return self.threaded; },
                             "The instance's default: the threaded path (True) or the reference.")
      .def_property_readonly(
          "threads",
          [](const Inference& self) { return self.threads; },
          "The instance's default thread count (None: one per physical core).")
      .def_property_readonly(
          "tokenizer", [](const Inference& self) { return self.tokenizer; },
          "The model's tokenizer (a lockstep.Tokenizer) when its model.json names one, else None: "
          "generate() and Session.append() then take and give text through it.")
      .def_property_readonly(
          "chat_template", [](const Inference& self) { return self.chat_template; },
          "The model's chat template (a lockstep.ChatTemplate) when its model.json names one, else None.")
      .def(
          "apply_chat_template",
          [](const Inference& self, MessagesArg messages, bool add_generation_prompt, bool tokenize) -> PromptResult {
            const std::string json = messages_json(messages);
            const ChatTemplate fallback = ChatTemplate::builtin();
            const ChatTemplate& t = self.chat_template ? *self.chat_template : fallback;
            std::string text;
            std::vector<int32_t> ids;
            {
              py::gil_scoped_release release;
              text = t.render_json(json, add_generation_prompt);
              if (tokenize && self.tokenizer) ids = self.tokenizer->encode(text, false);
            }
            if (!tokenize) return PromptResult(decoded_str(text));
            if (self.tokenizer) return PromptResult(py::cast(ids));
            if (self.config().vocab_size != 256)
              throw py::value_error("tokenize=True: the model has no tokenizer and its ids are not bytes");
            std::vector<int32_t> bytes;  // a byte model's ids are the text's bytes
            for (unsigned char c : text) bytes.push_back(c);
            return PromptResult(py::cast(bytes));
          },
          py::arg("messages"), py::kw_only(), py::arg("add_generation_prompt") = false, py::arg("tokenize") = false,
          "The prompt of a conversation (messages: a list of dicts with role and content) through the model's\n"
          "chat template (the built-in one when it has none), as /v1/chat/completions renders it: a str, or with\n"
          "tokenize=True its ids, encoded with add_special_tokens=False (a template writes its own BOS).")
      .def("__repr__", [](const Inference& self) {
        return "<lockstep.LanguageModelInference d_model=" + std::to_string(self.config().d_model) +
               " n_layers=" + std::to_string(self.config().n_layers) +
               " length=" + std::to_string(self.config().length) +
               " sha256=" + self.model->parameters_sha256().substr(0, 12) + ">";
      });
}

}  // namespace lockstep::python
