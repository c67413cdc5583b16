// A model directory with its tokenizer file and chat template beside it, appearing whole or not at
// all (lockstep import hf, lockstep import gguf; docs/FORMAT.md, "The tokenizer").
#pragma once

#include <functional>
#include <string>

namespace lockstep::interop {

struct TokenizerFiles {
  std::string file;           // its name in the directory: "tokenizer.model", "tokenizer.json"; "" for
                              // none (a model of bytes with a chat template)
  std::string type;           // model.json's tokenizer type: "sentencepiece", "huggingface"
  std::string bytes;          // its contents
  std::string chat_template;  // chat_template.json's contents; "" for none
};

// `write_model(dir)` writes a model directory at `dir` (which it must create, whole, as
// write_model_directory does); its files become `out`'s, with the tokenizer and the chat template
// beside them, named and pinned by SHA-256 in model.json. Refuses an `out` that exists.
void write_model_with_tokenizer(const std::string& out, const std::function<void(const std::string&)>& write_model,
                                const TokenizerFiles& tokenizer);

}  // namespace lockstep::interop
