// interop/model_files.hpp: the model is written as a model directory inside the temporary one,
// its files moved up, then the tokenizer's files added and model.json completed.
#include "interop/model_files.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"

namespace lockstep::interop {

void write_model_with_tokenizer(const std::string& out, const std::function<void(const std::string&)>& write_model,
                                const TokenizerFiles& tokenizer) {
  format::AtomicDirectory target(out);
  if (format::path_exists(out)) throw Error(ErrorKind::io, out + ": already exists");
  const std::string inner = target.file("model");
  write_model(inner);
  std::vector<std::string> names;
  if (DIR* d = ::opendir(inner.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(d);
  }
  for (const std::string& name : names)
    if (::rename((inner + "/" + name).c_str(), target.file(name).c_str()) != 0)
      throw Error(ErrorKind::io, target.file(name) + ": cannot move the model's files into place");
  ::rmdir(inner.c_str());
  auto meta = format::parse_ordered_json(format::read_text_file(target.file("model.json"), size_t{16} << 20));
  if (!tokenizer.file.empty()) {
    format::write_file_synced(target.file(tokenizer.file), tokenizer.bytes);
    meta["tokenizer"] = {{"type", tokenizer.type}, {"file", tokenizer.file},
                         {"sha256", sha256_hex(tokenizer.bytes.data(), tokenizer.bytes.size())}};
  }
  if (!tokenizer.chat_template.empty()) {
    format::write_file_synced(target.file("chat_template.json"), tokenizer.chat_template);
    meta["chat_template"] = {{"file", "chat_template.json"},
                             {"sha256", sha256_hex(tokenizer.chat_template.data(), tokenizer.chat_template.size())}};
  }
  ::unlink(target.file("model.json").c_str());
  format::write_file_synced(target.file("model.json"), meta.dump(2) + "\n");
  target.commit();
}

}  // namespace lockstep::interop
