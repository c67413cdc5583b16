// lockstep.Tokenizer and the text <-> ids conversions of generate() and Session.append()
// (text.hpp).
#include "text.hpp"

#include <pybind11/stl.h>

#include <climits>
#include <optional>
#include <string>

#include "arg_types.hpp"
#include "convert.hpp"

namespace lockstep::python {
namespace {

std::vector<int32_t> ints_from(py::handle obj, const char* name) {
  std::vector<int32_t> out;
  for (py::handle item : py::iter(obj)) {
    bool overflow = false;
    const std::optional<long long> v = index_value(item, overflow);
    if (!v) throw py::type_error(std::string(name) + " must hold ints; got a " + type_name(item));
    if (overflow || *v < INT32_MIN || *v > INT32_MAX)
      throw py::value_error(std::string(name) + " must hold ints in the int32 range; got " +
                            py::str(item).cast<std::string>());
    out.push_back(static_cast<int32_t>(*v));
  }
  return out;
}

bool is_text(py::handle obj) { return py::isinstance<py::bytes>(obj) || py::isinstance<py::str>(obj); }

}  // namespace

py::str decoded_str(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

std::vector<int32_t> tokens_from(py::handle obj, const char* name, const Tokenizer* tokenizer, int32_t vocab,
                                 bool at_start) {
  if (is_text(obj)) {
    const std::string text = obj.cast<std::string>();  // str: its UTF-8 bytes
    std::vector<int32_t> out;
    if (tokenizer) {
      return tokenizer->encode(text, at_start);
    }
    if (vocab != 256)
      throw py::value_error(std::string(name) + ": the model has no tokenizer (a vocabulary of " +
                            std::to_string(vocab) + " ids, not the 256 bytes), so it takes no text; give token ids");
    for (unsigned char ch : text) out.push_back(ch);
    return out;
  }
  if (!py::isinstance<py::sequence>(obj) && !py::hasattr(obj, "__array__"))
    throw py::type_error(std::string(name) + " must be bytes, str or a sequence of ints");
  return ints_from(obj, name);
}

GenerateOutput generate_output(py::handle output, const Tokenizer* tokenizer, int32_t vocab) {
  if (!py::isinstance<py::str>(output)) throw py::type_error("output must be a str; got a " + type_name(output));
  const std::string name = output.cast<std::string>();
  const GenerateOutput o = name == "text"    ? GenerateOutput::text
                           : name == "bytes" ? GenerateOutput::bytes
                           : name == "ids"   ? GenerateOutput::ids
                                             : throw py::value_error("output must be 'text', 'bytes' or 'ids'; got '" + name + "'");
  if (o != GenerateOutput::ids && !tokenizer && vocab != 256)
    throw py::value_error("output='" + name + "': the model has no text (no tokenizer and a vocabulary of " +
                          std::to_string(vocab) + " ids, not the 256 bytes); pass output='ids'");
  return o;
}

py::object generated_result(GenerateOutput output, const TextStream* text, const std::vector<int32_t>& generated) {
  if (output == GenerateOutput::ids) return py::cast(generated);
  // With a tokenizer, the text as `lockstep generate` prints it (TextStream): the decoding of
  // prompt and generated tokens together (SentencePiece drops a leading piece's space, so the
  // tokens alone may decode differently), less the prompt's own text. A byte model: the bytes.
  const std::string bytes = text ? text->text() : std::string(generated.begin(), generated.end());
  if (output == GenerateOutput::bytes) return py::bytes(bytes);
  return decoded_str(bytes);
}

namespace {

// lockstep.TextStream: a TextStream and the tokenizer it reads.
struct PyTextStream {
  std::shared_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TextStream> stream;
};

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<PyTextStream>(m, "TextStream", R"doc(
A generation's text as it settles (Tokenizer.stream): the prompt's and generated ids decoded
together, each push giving only text no later token can change (an unfinished character waits),
exactly as `lockstep generate` and the HTTP API print it.
)doc")
      .def_property_readonly("prompt_text", [](const PyTextStream& self) { return decoded_str(self.stream->prompt_text()); },
                             "The prompt's text (less a trailing unfinished character, which comes with the generated text).")
      .def(
          "push", [](PyTextStream& self, IntArg token) {
            bool overflow = false;
            const std::optional<long long> v = index_value(token, overflow);
            if (!v) throw py::type_error("token must be an int; got a " + type_name(token));
            if (overflow || *v < 0 || *v >= self.tokenizer->size())
              throw py::value_error("token: " + py::str(token).cast<std::string>() + " is not an id of the tokenizer (0 to " +
                                    std::to_string(self.tokenizer->size() - 1) + ")");
            return decoded_str(self.stream->push(static_cast<int32_t>(*v)));
          },
          py::arg("token"), "Appends a generated token; returns the text it settles (possibly empty).")
      .def("finish", [](PyTextStream& self) { return decoded_str(self.stream->finish()); },
           "The end: the text still held back (an unfinished character as U+FFFD).")
      .def_property_readonly("stopped", [](const PyTextStream& self) { return self.stream->stopped(); },
                             "Whether a stop string ended the text (push gives nothing more).")
      .def_property_readonly("text", [](const PyTextStream& self) { return decoded_str(self.stream->text()); },
                             "The generated text given out so far.");

  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer", R"doc(
A model's tokenizer (a SentencePiece model or a tokenizer.json named in model.json's `tokenizer`), as
LanguageModelInference.tokenizer gives it: text <-> token ids, exactly as `lockstep generate`
and the model's generate() use it.
)doc")
      .def(
          "encode",
          [](const Tokenizer& self, TokensArg text, bool add_special_tokens) {
            if (!is_text(text)) throw py::type_error("text must be str or bytes; got " + type_name(text));
            return self.encode(text.cast<std::string>(), add_special_tokens);
          },
          py::arg("text"), py::kw_only(), py::arg("add_special_tokens") = false,
          "The ids of `text` (str, or bytes holding UTF-8); add_special_tokens: with what the tokenizer puts\n"
          "around a text (SentencePiece: BOS; tokenizer.json: its post_processor), as generate() does.")
      .def(
          "decode",
          [](const Tokenizer& self, TokensArg ids) {
            if (is_text(ids) || (!py::isinstance<py::sequence>(ids) && !py::hasattr(ids, "__array__")))
              throw py::type_error("ids must be a sequence of ints; got " + type_name(ids));
            const std::vector<int32_t> v = ints_from(ids, "ids");
            for (size_t i = 0; i < v.size(); ++i)
              if (v[i] < 0 || v[i] >= self.size())
                throw py::value_error("ids: entry " + std::to_string(i) + " is " + std::to_string(v[i]) +
                                      "; the tokenizer holds ids 0 to " + std::to_string(self.size() - 1));
            return decoded_str(self.decode(v));
          },
          py::arg("ids"), "The text of `ids` (str; a character the ids leave unfinished is U+FFFD).")
      .def_property_readonly(
          "bos", [](const Tokenizer& self) { return self.bos() < 0 ? py::object(py::none()) : py::int_(self.bos()); },
          "The beginning-of-sequence id generate() puts before a text prompt (None: none).")
      .def_property_readonly(
          "eos", [](const Tokenizer& self) { return self.eos() < 0 ? py::object(py::none()) : py::int_(self.eos()); },
          "The end-of-sequence id (None: none).")
      .def_property_readonly(
          "unk", [](const Tokenizer& self) { return self.unk() < 0 ? py::object(py::none()) : py::int_(self.unk()); },
          "The unknown-piece id (None: none).")
      .def_static(
          "for_model",
          [](PathArg path) -> py::object {
            const std::string where = py::module_::import("os").attr("fsdecode")(path).cast<std::string>();
            std::shared_ptr<Tokenizer> t = Tokenizer::for_model(where);
            return t ? py::cast(std::move(t)) : py::object(py::none());
          },
          py::arg("path"),
          "The tokenizer a model directory's model.json names (None when it names none), without loading the model.")
      .def(
          "stream",
          [](const std::shared_ptr<Tokenizer>& self, TokensArg prompt, StopArg stop) {
            if (is_text(prompt) || (!py::isinstance<py::sequence>(prompt) && !py::hasattr(prompt, "__array__")))
              throw py::type_error("prompt must be a sequence of ids; got " + type_name(prompt));
            const std::vector<int32_t> ids = ints_from(prompt, "prompt");
            for (size_t i = 0; i < ids.size(); ++i)
              if (ids[i] < 0 || ids[i] >= self->size())
                throw py::value_error("prompt: entry " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                                      "; the tokenizer holds ids 0 to " + std::to_string(self->size() - 1));
            std::vector<std::string> stops;
            if (!stop.is_none()) {
              if (!is_text(stop)) throw py::type_error("stop must be bytes, str or None");
              if (const std::string text = stop.cast<std::string>(); !text.empty()) stops.push_back(text);
            }
            return PyTextStream{self, std::make_unique<TextStream>(*self, ids, stops)};
          },
          py::arg("prompt"), py::arg("stop") = py::none(),
          "A TextStream after the prompt's ids: push each generated id, then finish(); `stop` ends the "
          "text right after the stop string (LanguageModelInference.generate's text).")
      .def("__len__", &Tokenizer::size, "How many ids it holds.")
      .def("__repr__",
           [](const Tokenizer& self) { return "<lockstep.Tokenizer: " + std::to_string(self.size()) + " pieces>"; });
}

}  // namespace lockstep::python
