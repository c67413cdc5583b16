// Text and token ids for the Python API: a model with a tokenizer (model.json's `tokenizer`,
// include/lockstep/tokenizer.hpp) takes and gives text through it, a byte model (vocabulary of
// 256, no tokenizer) takes bytes or str as its ids and gives bytes, and any other model takes
// and gives token ids only.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tokenizer.hpp"

namespace lockstep::python {

namespace py = pybind11;

// The ids of `obj`: a sequence / 1-D array of ints as they are; bytes or str (UTF-8) as bytes for
// a byte model, or through `tokenizer` (BOS first when `at_start`, then the text's pieces, as
// `lockstep generate` does). Text for a model with neither is a ValueError; anything else a
// TypeError. `vocab` is the model's vocabulary size.
std::vector<int32_t> tokens_from(py::handle obj, const char* name, const Tokenizer* tokenizer, int32_t vocab,
                                 bool at_start);

// generate()'s `output=`: "text" (str), "bytes" or "ids" (list[int]), one type for every model.
enum class GenerateOutput { text, bytes, ids };
// Parses `output` for a model with `tokenizer` (or none) and `vocab` ids: ValueError for another
// name, or for text or bytes from a model that has no text (neither a tokenizer nor 256 ids).
GenerateOutput generate_output(py::handle output, const Tokenizer* tokenizer, int32_t vocab);
// What generate() returns for the `generated` ids in `output`'s type: `text`, when the model has a
// tokenizer, is the finished TextStream of the prompt and those ids (its settled text is what
// they add); without one (a byte model) the ids are the bytes.
py::object generated_result(GenerateOutput output, const TextStream* text, const std::vector<int32_t>& generated);

// Decoded text as str (a sequence ending inside a UTF-8 character gives U+FFFD there).
py::str decoded_str(const std::string& text);

// lockstep.Tokenizer.
void bind_tokenizer(py::module_& m);

}  // namespace lockstep::python
