// The chat template of a Hugging Face directory, as the chat_template.json lockstep keeps beside
// the tokenizer (include/lockstep/chat_template.hpp; docs/FORMAT.md, "The chat template").
#pragma once

#include <string>

namespace lockstep::interop {

// The contents of chat_template.json for the directory `dir`: {"chat_template": <source>,
// "bos_token": ..., "eos_token": ...}, from tokenizer_config.json's `chat_template` (a string, or
// the list of named templates, of which the one named "default" is kept) with its bos_token and
// eos_token (strings or {"content": ...}), else from a chat_template.jinja file. Empty when the
// directory has no template. Refuses (Error naming the file and the construct) a malformed entry
// or a template the interpreter cannot run.
std::string hf_chat_template_file(const std::string& dir);

// chat_template.json's contents for a template `source` with its special tokens' strings, once
// lockstep's interpreter has read it (Error naming `where` and the construct it lacks otherwise).
std::string chat_template_file(const std::string& source, const std::string& bos, const std::string& eos,
                               const std::string& where);

}  // namespace lockstep::interop
