// lockstep import gguf (lockstep/interop.hpp, docs/FORMAT.md "GGUF import").
#include <algorithm>
#include <optional>

#include "format/gguf_model.hpp"
#include "format/gguf_read.hpp"
#include "format/mapped_file.hpp"
#include "interop/gguf_vocab.hpp"
#include "interop/model_files.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/interop.hpp"
#include "quant/k_quants.hpp"

namespace lockstep {

ImportGgufResult import_gguf(const std::string& path, const std::string& out, const ImportGgufOptions& options) {
  if (options.length < 0) throw Error(ErrorKind::invalid_argument, "--length must be positive");
  const format::MappedFile file(path);
  const format::GgufFile gguf = format::parse_gguf(file.bytes(), path);
  format::GgufModel m = format::read_gguf_llama(
      gguf, path, options.length > 0 ? std::optional<int32_t>(options.length) : std::nullopt, nullptr,
      !options.widen_k_quants);
  ImportGgufResult r;
  r.config = m.config;
  r.vocabulary = m.vocabulary;
  r.eos_token_ids = m.eos_token_ids;
  for (const format::GgufTensor& t : gguf.tensors) {
    const std::string type = format::ggml_type_name(t.type);
    if (std::find(r.types.begin(), r.types.end(), type) == r.types.end()) r.types.push_back(type);
    if (quant::k_quant_of(t.type) && options.widen_k_quants) ++r.widened_k_quants;
  }
  r.tied = std::none_of(gguf.tensors.begin(), gguf.tensors.end(),
                        [](const format::GgufTensor& t) { return t.name == "output.weight"; });
  r.block_matrices = static_cast<int64_t>(m.blocks.size());
  std::optional<interop::GgufVocabulary> vocabulary;
  if (!m.vocabulary.empty() && !options.ids_only) {
    vocabulary = interop::convert_gguf_vocabulary(gguf, path, m.config.vocab_size);
    r.pre = vocabulary->pre;
    r.tokenizer_file = vocabulary->file;
    r.chat_template = !vocabulary->chat_template.empty();
    r.eos_token_ids = m.eos_token_ids = vocabulary->eos_token_ids;
  }
  r.profile = m.blocks.empty()                ? profile_name()
              : quant::has_k_quants(m.blocks) ? int8dot_k_profile_name()
                                              : int8dot_profile_name();
  auto write_model = [&](const std::string& dir) {
    if (m.blocks.empty()) {
      ModelMetadata meta;
      meta.eos_token_ids = m.eos_token_ids;
      write_model_directory(dir, m.config, m.parameters, meta);
    } else {
      format::write_gguf_model_directory(dir, m.config, file.bytes(), m.eos_token_ids, r.profile.c_str());
    }
  };
  if (vocabulary && (!vocabulary->file.empty() || !vocabulary->chat_template.empty()))
    interop::write_model_with_tokenizer(
        out, write_model, {vocabulary->file, vocabulary->type, vocabulary->bytes, vocabulary->chat_template});
  else
    write_model(out);
  return r;
}

}  // namespace lockstep
