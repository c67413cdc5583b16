// interop/hf_chat_template.hpp: tokenizer_config.json's chat template, checked by lockstep's
// interpreter before anything is written.
#include "interop/hf_chat_template.hpp"

#include <sys/stat.h>

#include "format/mapped_file.hpp"
#include "interop/json_file.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/error.hpp"

namespace lockstep::interop {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A special token as tokenizer_config.json writes it: a string, {"content": "..."} (an
// AddedToken), or null / absent (none: "").
std::string token_text(const nlohmann::json& cfg, const char* key, const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const nlohmann::json& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  throw Error(ErrorKind::format, where + ": '" + key + "' must be a string or {\"content\": \"...\"}");
}

}  // namespace

std::string hf_chat_template_file(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json", jinja_path = dir + "/chat_template.jinja";
  nlohmann::json cfg = nlohmann::json::object();
  if (is_file(config_path)) cfg = read_json_file(config_path, size_t{64} << 20);
  if (!cfg.is_object()) throw Error(ErrorKind::format, config_path + ": not a JSON object");
  std::string source, where;
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const nlohmann::json& t = cfg["chat_template"];
    where = config_path + ": 'chat_template'";
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      bool found = false;
      for (const nlohmann::json& named : t) {
        if (!named.is_object() || !named.contains("name") || !named["name"].is_string() || !named.contains("template") ||
            !named["template"].is_string())
          throw Error(ErrorKind::format, where + " must hold {\"name\", \"template\"} objects");
        if (named["name"] == "default") {
          source = named["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) throw Error(ErrorKind::format, where + " names no template \"default\"; lockstep keeps that one");
      where += " \"default\"";
    } else {
      throw Error(ErrorKind::format, where + " must be a string or a list of named templates");
    }
  } else if (is_file(jinja_path)) {
    source = format::read_text_file(jinja_path, size_t{16} << 20);
    where = jinja_path;
  } else {
    return "";
  }
  return chat_template_file(source, token_text(cfg, "bos_token", config_path), token_text(cfg, "eos_token", config_path),
                            where);
}

std::string chat_template_file(const std::string& source, const std::string& bos, const std::string& eos,
                               const std::string& where) {
  ChatTemplate check(source, bos, eos, where);  // refuses what the interpreter lacks, naming it
  nlohmann::ordered_json out;
  out["chat_template"] = source;
  out["bos_token"] = bos;
  out["eos_token"] = eos;
  return out.dump(2) + "\n";
}

}  // namespace lockstep::interop
