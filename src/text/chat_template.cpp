// ChatTemplate (include/lockstep/chat_template.hpp): the template's parse and check at load,
// model.json's `chat_template` entry with the file's SHA-256, and the variables a render gets.
#include "lockstep/chat_template.hpp"

#include "core/sha256.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"
#include "text/jinja.hpp"
#include "text/tokenizer_entry.hpp"

namespace lockstep {

namespace {

constexpr size_t max_template_file = size_t{16} << 20;

nlohmann::ordered_json parse_json(std::string_view text, const char* what) {
  try {
    format::check_json_depth(std::string(text), what);
    return format::parse_ordered_json(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::invalid_argument, std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace

struct ChatTemplate::Impl {
  std::string name, source, bos, eos, file, sha256;
  text::jinja::Body body;

  std::string run(std::map<std::string, text::jinja::Value> vars) const {
    text::jinja::add_globals(vars);
    try {
      return text::jinja::render(body, vars);
    } catch (const text::jinja::RenderError& e) {
      throw Error(ErrorKind::invalid_argument, name + " " + e.message);
    }
  }

  std::map<std::string, text::jinja::Value> conversation(text::jinja::Value messages, bool add_generation_prompt) const {
    using text::jinja::Value;
    return {{"messages", std::move(messages)},
            {"add_generation_prompt", Value::boolean(add_generation_prompt)},
            {"bos_token", Value::string(bos)},
            {"eos_token", Value::string(eos)},
            {"tools", Value::none()},
            {"documents", Value::none()}};
  }
};

ChatTemplate::ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token, std::string name)
    : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  impl_->source = std::string(source);
  impl_->bos = std::move(bos_token);
  impl_->eos = std::move(eos_token);
  impl_->body = text::jinja::parse(text::jinja::lex(source, impl_->name), impl_->name);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::unique_ptr<ChatTemplate> ChatTemplate::for_model(std::string_view model_path) {
  const text::TokenizerEntry named = text::read_tokenizer_entry(model_path);
  const nlohmann::json& j = named.model_json;
  if (!j.is_object() || !j.contains("chat_template")) return nullptr;
  const nlohmann::json& t = j["chat_template"];
  if (!t.is_object() || !t.contains("file") || !t["file"].is_string() || !t.contains("sha256") || !t["sha256"].is_string())
    throw Error(ErrorKind::format, named.json_path + ": 'chat_template' must be {\"file\", \"sha256\"}");
  const std::string file = t["file"].get<std::string>();
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
    throw Error(ErrorKind::format, named.json_path + ": chat template file '" + file + "' is not a plain name in the directory");
  const std::string path = named.model_dir + "/" + file;
  const std::string bytes = format::read_text_file(path, max_template_file);
  const std::string digest = sha256_hex(bytes.data(), bytes.size());
  if (digest != t["sha256"].get<std::string>())
    throw Error(ErrorKind::format, path + ": SHA-256 is " + digest + " but model.json says " + t["sha256"].get<std::string>());
  nlohmann::ordered_json doc;
  try {
    format::check_json_depth(bytes, path);
    doc = format::parse_ordered_json(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::format, path + ": not valid JSON: " + e.what());
  }
  auto text_field = [&](const char* key, bool required) -> std::string {
    if (!doc.is_object() || !doc.contains(key) || doc[key].is_null()) {
      if (required) throw Error(ErrorKind::format, path + ": '" + key + "' is missing");
      return "";
    }
    if (!doc[key].is_string()) throw Error(ErrorKind::format, path + ": '" + key + "' must be a string");
    return doc[key].get<std::string>();
  };
  auto tmpl = std::make_unique<ChatTemplate>(text_field("chat_template", true), text_field("bos_token", false),
                                             text_field("eos_token", false), path);
  tmpl->impl_->file = file;
  tmpl->impl_->sha256 = digest;
  return tmpl;
}

ChatTemplate ChatTemplate::builtin() {
  return ChatTemplate(
      "{% for m in messages %}"
      "{% if m.role not in ['system', 'user', 'assistant'] %}"
      "{{ raise_exception('a role must be system, user or assistant, not ' ~ m.role) }}{% endif %}"
      "{{ m.role }}: {{ m.content }}\n"
      "{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}",
      "", "", "the built-in chat template");
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  using text::jinja::Value;
  text::jinja::List list;
  for (const ChatMessage& m : messages)
    list.push_back(Value::make_dict({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
  return impl_->run(impl_->conversation(Value::make_list(std::move(list)), add_generation_prompt));
}

std::string ChatTemplate::render_json(std::string_view messages_json, bool add_generation_prompt) const {
  const nlohmann::ordered_json m = parse_json(messages_json, "the messages");
  if (!m.is_array()) throw Error(ErrorKind::invalid_argument, "the messages must be a JSON array");
  return impl_->run(impl_->conversation(text::jinja::from_json(m), add_generation_prompt));
}

std::string ChatTemplate::render_context(std::string_view context_json) const {
  const nlohmann::ordered_json c = parse_json(context_json, "the template's variables");
  if (!c.is_object()) throw Error(ErrorKind::invalid_argument, "the template's variables must be a JSON object");
  std::map<std::string, text::jinja::Value> vars;
  for (auto it = c.begin(); it != c.end(); ++it) vars[it.key()] = text::jinja::from_json(it.value());
  return impl_->run(std::move(vars));
}

const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::bos_token() const { return impl_->bos; }
const std::string& ChatTemplate::eos_token() const { return impl_->eos; }
const std::string& ChatTemplate::file() const { return impl_->file; }
const std::string& ChatTemplate::sha256() const { return impl_->sha256; }

}  // namespace lockstep
