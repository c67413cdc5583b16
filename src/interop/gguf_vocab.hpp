// A GGUF file's vocabulary (the tokenizer.ggml.* keys llama.cpp's converter writes) as a tokenizer
// file lockstep reads, for `lockstep import gguf` (docs/FORMAT.md, "GGUF import"):
//   `gpt2`  (byte-level BPE: tokens, merges, token_type, pre) -> a Hugging Face tokenizer.json,
//           the pre-tokenizer chosen by tokenizer.ggml.pre as llama.cpp chooses its regexes;
//   `llama` (SentencePiece: tokens, scores, token_type)       -> a SentencePiece model (ModelProto)
//           of type BPE, which libsentencepiece encodes as llama.cpp's SPM tokenizer does;
//   anything else is refused, naming it.
// Every array and id is checked against the others before anything is built, and the result is
// loaded by lockstep's own reader before it is returned, so a vocabulary that would not load is
// refused here, naming the GGUF key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/gguf_read.hpp"

namespace lockstep::interop {

struct GgufVocabulary {
  std::string model;          // tokenizer.ggml.model
  std::string pre;            // tokenizer.ggml.pre ("" for llama)
  std::string file;           // "tokenizer.json" or "tokenizer.model"; "" for the 256 bytes (no file)
  std::string type;           // model.json's tokenizer type: "huggingface" or "sentencepiece"
  std::string bytes;          // the file's contents
  std::string chat_template;  // chat_template.json's contents ("" when the file has none)
  std::vector<int32_t> eos_token_ids;  // tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id, once each
};

// `what` names the file in refusals (Error(format) or Error(unsupported), naming the key, the index
// and the problem). `vocab_size`: the model's, which the token count must equal.
GgufVocabulary convert_gguf_vocabulary(const format::GgufFile& file, const std::string& what, int32_t vocab_size);

// The other way, for export-gguf: a tokenizer.json (its text) as the keys of a `gpt2` vocabulary
// that convert_gguf_vocabulary turns back into a tokenizer of the same ids. Ids without a token
// (up to `vocab_size`) are "[PADi]" of type 5 (unused), as llama.cpp's converter writes them.
// Refused (Error(unsupported) naming `what` and the key): a normalizer and pre-tokenizer that are
// not one of the `pre` names above, an added token with lstrip, rstrip or single_word, a merge whose
// tokens hold a space, a post-processor other than tokens around the text.
struct Gpt2Keys {
  std::string pre;
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
  int32_t bos = -1, eos = -1;  // the tokens the post-processor puts before and after the text; -1: none
};
Gpt2Keys gpt2_keys_of(const std::string& tokenizer_json, const std::string& what, int32_t vocab_size);

}  // namespace lockstep::interop
