// A model's chat template: the Jinja template (from its Hugging Face tokenizer_config.json) that
// turns a conversation into the prompt text the model was trained on, rendered by lockstep's own
// small Jinja interpreter in the environment transformers uses (trim_blocks, lstrip_blocks, loop
// controls, raise_exception; docs/FORMAT.md, "The chat template"). A model directory names it in
// model.json's optional `chat_template` field, {"file": "chat_template.json", "sha256": "<hex>"};
// the file holds {"chat_template": "<source>", "bos_token": "...", "eos_token": "..."}.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace lockstep {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  // Reads `source` and checks every tag, filter, test and called method in it: one the
  // interpreter lacks is refused (Error naming it and its line, e.g. `chat template line 4: the
  // filter 'wordwrap' is not supported`), as is a syntax error. `name` prefixes the messages.
  ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token,
               std::string name = "chat template");
  // The template of the model at `model_path` (as Model::load resolves it), or null when its
  // model.json names none. Refuses (Error naming the file) one that is missing, changed
  // (SHA-256), malformed or that the interpreter cannot run.
  static std::unique_ptr<ChatTemplate> for_model(std::string_view model_path);
  // The template of a model that has none, the HTTP API's since before templates: each message as
  // "<role>: <content>\n" (roles system, user and assistant alone), then "assistant:" when
  // add_generation_prompt.
  static ChatTemplate builtin();
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The prompt of a conversation: the template rendered with `messages`, `add_generation_prompt`,
  // `bos_token`, `eos_token`, and `tools` and `documents` as none (what transformers passes
  // without tools). No clock: `strftime_now` is not defined. Throws Error (invalid_argument) for
  // a conversation the template refuses (raise_exception) or cannot render, naming the line.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // The same with the messages as a JSON array of objects (each field the template reads, e.g.
  // tool_calls); throws Error (invalid_argument) when it is not one.
  std::string render_json(std::string_view messages_json, bool add_generation_prompt) const;
  // The template with any variables: `context_json` is a JSON object of them (nothing is added).
  std::string render_context(std::string_view context_json) const;

  const std::string& source() const;
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  // for_model: the file's name in the model directory and its SHA-256 (else empty).
  const std::string& file() const;
  const std::string& sha256() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
