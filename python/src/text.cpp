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

// Decoded text as str; a sequence that ends inside a UTF-8 character gives U+FFFD there rather
// than an exception.
py::str utf8(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

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

std::vector<int32_t> tokens_from(py::handle obj, const char* name, const Tokenizer* tokenizer, int32_t vocab,
                                 bool at_start) {
  if (is_text(obj)) {
    const std::string text = obj.cast<std::string>();  // str: its UTF-8 bytes
    std::vector<int32_t> out;
    if (tokenizer) {
      if (at_start && tokenizer->bos() >= 0) out.push_back(tokenizer->bos());
      for (int32_t id : tokenizer->encode(text)) out.push_back(id);
      return out;
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

py::object generated_result(const Tokenizer* tokenizer, int32_t vocab, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& generated) {
  if (tokenizer) {
    // As `lockstep generate` prints it: the decoding of prompt and generated tokens together
    // (SentencePiece drops a leading piece's space, so the tokens alone may decode differently),
    // less the prompt's own decoding.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    const std::string head = tokenizer->decode(prompt);
    const std::string full = tokenizer->decode(all);
    if (full.compare(0, head.size(), head) == 0) return utf8(full.substr(head.size()));
    return utf8(tokenizer->decode(generated));
  }
  if (vocab == 256) return py::bytes(std::string(generated.begin(), generated.end()));
  return py::cast(generated);
}

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(m, "Tokenizer", R"doc(
A model's tokenizer (a SentencePiece model named in model.json's `tokenizer`), as
LanguageModelInference.tokenizer gives it: text <-> token ids, exactly as `lockstep generate`
and the model's generate() use it.
)doc")
      .def(
          "encode",
          [](const Tokenizer& self, TokensArg text) {
            if (!is_text(text)) throw py::type_error("text must be str or bytes; got " + type_name(text));
            return self.encode(text.cast<std::string>());
          },
          py::arg("text"), "The ids of `text` (str, or bytes holding UTF-8), without BOS.")
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
            return utf8(self.decode(v));
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
      .def("__len__", &Tokenizer::size, "How many ids it holds.")
      .def("__repr__",
           [](const Tokenizer& self) { return "<lockstep.Tokenizer: " + std::to_string(self.size()) + " pieces>"; });
}

}  // namespace lockstep::python
