// lockstep.Session and LanguageModelInference.session() / .generate(): incremental decoding with
// the full pass's bits (include/lockstep/session.hpp, generator.hpp).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arg_types.hpp"
#include "convert.hpp"
#include "inference.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/session.hpp"
#include "text.hpp"

namespace lockstep::python {
namespace {

// A count of positions for fork() and truncate(): an int (numpy integers too) >= 0; TypeError
// for anything else, ValueError for a negative one.
int32_t positions(py::handle obj, const char* what) {
  bool overflow = false;
  const std::optional<long long> v = index_value(obj, overflow);
  if (!v) throw py::type_error(std::string(what) + ": length must be an int; got " + type_name(obj));
  if (!overflow && *v < 0)
    throw py::value_error(std::string(what) + ": length must not be negative; got " + std::to_string(*v));
  if (overflow || *v > INT32_MAX)
    throw py::value_error(std::string(what) + ": length " + py::str(obj).cast<std::string>() +
                          " is more than a session holds");
  return static_cast<int32_t>(*v);
}

struct PySession {
  std::shared_ptr<const Model> model;  // keeps the model alive for the session
  std::shared_ptr<Tokenizer> tokenizer;  // the model's (null: none): append() takes text through it
  std::unique_ptr<Session> session;
};

}  // namespace

void bind_session(py::module_& m) {
  py::class_<PySession>(m, "Session", R"doc(
An incremental decoding session over a LanguageModelInference (made by its session() method): it
keeps every layer's keys and values, so each append computes only the new positions, and the
logits it returns are, bit for bit, those a full logits() call gives at that position.
)doc")
      .def("append",
           [](PySession& self, TokensArg tokens) {
             const std::vector<int32_t> ids = tokens_from(tokens, "tokens", self.tokenizer.get(),
                                                          self.model->config().vocab_size, self.session->length() == 0);
             std::vector<float> logits(static_cast<size_t>(self.model->config().vocab_size));
             {
               py::gil_scoped_release release;
               self.session->append(ids, logits.data());
             }
             return to_numpy(std::move(logits), {static_cast<py::ssize_t>(self.model->config().vocab_size)});
           },
           py::arg("tokens"),
           "Appends tokens and returns the float32 logits [vocab] after the last. Tokens are ints, or text "
           "(str or bytes): through the model's tokenizer when it has one (BOS first when the session is "
           "empty, as generate() does), as bytes for a byte model; text for a model with neither is a "
           "ValueError.")
      .def("fork",
           [](const PySession& self, OptionalIntArg length) {
             const int32_t n = length.is_none() ? -1 : positions(length, "fork");  // -1: all
             PySession out{self.model, self.tokenizer, std::make_unique<Session>(self.session->fork(n))};
             return out;
           },
           py::arg("length") = py::none(),
           "A new session holding this one's first `length` positions (all by default); a negative "
           "length or one beyond this session's is a ValueError.")
      .def("truncate",
           [](PySession& self, IntArg length) { self.session->truncate(positions(length, "truncate")); },
           py::arg("length"), "Forgets every position from `length` on (0 <= length <= self.length).")
      .def_property_readonly("length", [](const PySession& self) { return self.session->length(); })
      .def_property_readonly("tokens", [](const PySession& self) {
        const auto t = self.session->tokens();
        return std::vector<int32_t>(t.begin(), t.end());
      })
      .def("__len__", [](const PySession& self) { return self.session->length(); });

  auto cls = py::reinterpret_borrow<py::class_<Inference>>(m.attr("LanguageModelInference"));
  cls.def(
         "session",
         [](const Inference& self, OptionalBoolArg threaded, OptionalIntArg threads) {
           return PySession{self.model, self.tokenizer, std::make_unique<Session>(self.model, self.call(threaded, threads))};
         },
         py::kw_only(), py::arg("threaded") = py::none(), py::arg("threads") = py::none(),
         "An empty Session on this model (threaded=, threads= as for the other calls).")
      .def(
          "generate",
          [](const Inference& self, TokensArg prompt, int32_t max_tokens, float temperature, int32_t top_k,
             float top_p, IntArg seed_arg, StopArg stop, CallbackArg on_token, bool truncate, OptionalBoolArg threaded,
             OptionalIntArg threads, StrArg output_arg, bool ignore_eos, py::object grammar, py::object json_schema) {
            const uint64_t seed = seed_value(seed_arg);
            const int32_t vocab = self.config().vocab_size;
            const std::vector<int32_t> ids = tokens_from(prompt, "prompt", self.tokenizer.get(), vocab, true);
            const GenerateOutput output = generate_output(output_arg, self.tokenizer.get(), vocab);
            GenerateOptions options;
            options.sampling = {temperature, top_k, top_p, seed};
            options.max_tokens = max_tokens;
            options.truncate_prompt = truncate;
            options.ignore_eos = ignore_eos;
            if (!grammar.is_none() && !json_schema.is_none())
              throw py::value_error("give grammar= or json_schema=, not both");
            if (!grammar.is_none() || !json_schema.is_none()) {
              if (!self.tokenizer && vocab != 256)
                throw py::value_error("a grammar matches text; the model has no tokenizer (a vocabulary of " +
                                      std::to_string(vocab) + " ids)");
              if (!grammar.is_none()) {
                if (!py::isinstance<py::str>(grammar)) throw py::type_error("grammar must be a str of GBNF rules");
                options.grammar = Grammar::from_gbnf(grammar.cast<std::string>());
              } else {
                // A dict (its keys in their order: properties are generated so) or the schema's JSON text.
                const std::string text = py::isinstance<py::str>(json_schema)
                                             ? json_schema.cast<std::string>()
                                             : py::module_::import("json").attr("dumps")(json_schema).cast<std::string>();
                options.grammar = Grammar::from_json_schema(text);
              }
              options.vocabulary = self.tokenizer ? TokenVocabulary::from_tokenizer(*self.tokenizer, vocab)
                                                  : TokenVocabulary::bytes();
            }
            std::vector<std::string> stops;  // with a tokenizer: compared with the decoded text
            if (!stop.is_none()) {
              if (!self.tokenizer && vocab != 256)
                throw py::value_error("stop compares text; the model has no tokenizer (a vocabulary of " +
                                      std::to_string(vocab) + " ids)");
              if (py::isinstance<py::bytes>(stop) || py::isinstance<py::str>(stop)) {
                const std::string text = stop.cast<std::string>();
                if (!self.tokenizer) options.stop = text;
                else if (!text.empty()) stops.push_back(text);
              } else {
                throw py::type_error("stop must be bytes, str or None");
              }
            }
            if (!on_token.is_none() && !PyCallable_Check(on_token.ptr())) throw py::type_error("on_token must be callable");
            // Every check happens here, before anything is computed or on_token called.
            Generator generator(self.model, ids, options, self.call(threaded, threads));
            if (const int64_t dropped = generator.context().dropped_prompt_tokens(); dropped > 0) {
              const std::string notice = "the prompt holds " + std::to_string(ids.size()) + " tokens, more than the " +
                                         std::to_string(self.config().length) + "-token window; generating from its last " +
                                         std::to_string(self.config().length) + " (truncate=False refuses it instead)";
              if (PyErr_WarnEx(PyExc_UserWarning, notice.c_str(), 1) != 0) throw py::error_already_set();
            }
            std::vector<int32_t> out;
            // With a tokenizer, the text as `lockstep generate` and the HTTP API give it (TextStream).
            std::optional<TextStream> text;
            if (self.tokenizer) text.emplace(*self.tokenizer, ids, stops);
            const py::object callback = py::reinterpret_borrow<py::object>(on_token);
            {
              py::gil_scoped_release release;
              while (!(text && text->stopped())) {
                const std::optional<int32_t> token = generator.next();
                if (!token) break;
                out.push_back(*token);
                if (text && !generator.end_of_sequence()) text->push(*token);  // an end id is no text
                if (!callback.is_none()) {
                  py::gil_scoped_acquire acquire;
                  callback(*token);
                }
              }
            }
            if (text) text->finish();
            if (output != GenerateOutput::ids && generator.end_of_sequence()) out.pop_back();  // a byte model's text
            return GeneratedResult(generated_result(output, text ? &*text : nullptr, out));
          },
          py::arg("prompt"), py::arg("max_tokens") = 64, py::kw_only(), py::arg("temperature") = 0.0f,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop") = py::none(),
          py::arg("on_token") = py::none(), py::arg("truncate") = true, py::arg("threaded") = py::none(),
          py::arg("threads") = py::none(), py::arg("output") = "text", py::arg("ignore_eos") = false,
          py::arg("grammar") = py::none(), py::arg("json_schema") = py::none(),
          R"doc(
Generates up to max_tokens tokens after the prompt: greedy at temperature 0,
else sampled (top_k, top_p, seed; docs/ARITHMETIC.md, "Sampling"), stopping early once the
generated text ends with `stop`. Past the window the context restarts from position 0 with its
last half (docs/ARITHMETIC.md, "Generation past the window"), as `lockstep generate` does, so
the same options give the same text. A prompt longer than the window keeps its last `length`
tokens with a UserWarning, or raises ValueError with truncate=False. on_token(token) is called
with each id as it is chosen.

The prompt is ints (token ids, taken as they are) or text (str or bytes). A model with a
tokenizer (`tokenizer`) encodes text as `lockstep generate` does, BOS then the pieces; a byte
model (vocabulary of 256, no tokenizer) takes text as its bytes. Any other model takes ids only
(text and stop= are a ValueError). `stop` ends the text right after the stop string, even inside a
token's text. The same seed gives the same text on every path; seed is an int in [0, 2^64 - 1].

What it returns is chosen by `output`, the same type for every model:
- "text" (the default): str, the text the generated tokens add to the prompt's (a tokenizer's
  decoding, as `lockstep generate` prints it; a byte model's bytes as UTF-8, each invalid
  sequence as U+FFFD). A model without text raises ValueError naming output=.
- "bytes": bytes, that text's bytes exactly (a byte model's generated bytes as they are, an
  unfinished character included; a tokenizer's text as UTF-8).
- "ids": list[int], the generated token ids, for any model.

A model with end-of-sequence ids (model.json's `eos_token_ids`, an imported model's
eos_token_id) stops right after generating one: it is in "ids" (and passed to on_token) but
adds no text. ignore_eos=True goes on to max_tokens.

Structured output (docs/HTTP.md, "Structured output"): grammar= (str, GBNF as llama.cpp writes
it) or json_schema= (a dict or its JSON text) holds the text to the grammar: each token is drawn
from those it allows next, the others' logits set to -inf. An end-of-sequence id is allowed where
the text is a whole match; a model without one stops at the first whole match. A grammar or
schema that cannot be used raises ValueError naming the line and column or the keyword.
)doc");
}

}  // namespace lockstep::python
