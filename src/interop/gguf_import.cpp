// lockstep import gguf (lockstep/interop.hpp, docs/FORMAT.md "GGUF import").
#include <algorithm>

#include "format/format_error.hpp"
#include "format/gguf_model.hpp"
#include "format/gguf_read.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/format.hpp"
#include "lockstep/interop.hpp"

namespace lockstep {

ImportGgufResult import_gguf(const std::string& path, const std::string& out, const ImportGgufOptions& options) {
  if (options.length < 0) throw Error(ErrorKind::invalid_argument, "--length must be positive");
  const format::MappedFile file(path);
  const format::GgufFile gguf = format::parse_gguf(file.bytes(), path);
  format::GgufModel m = format::read_gguf_llama(gguf, path, options.length > 0 ? std::optional<int32_t>(options.length)
                                                                                : std::nullopt);
  ImportGgufResult r;
  r.config = m.config;
  r.vocabulary = m.vocabulary;
  r.eos_token_ids = m.eos_token_ids;
  for (const format::GgufTensor& t : gguf.tensors) {
    const std::string type = format::ggml_type_name(t.type);
    if (std::find(r.types.begin(), r.types.end(), type) == r.types.end()) r.types.push_back(type);
  }
  r.tied = std::none_of(gguf.tensors.begin(), gguf.tensors.end(),
                        [](const format::GgufTensor& t) { return t.name == "output.weight"; });
  r.block_matrices = static_cast<int64_t>(m.blocks.size());
  if (!m.vocabulary.empty() && !options.ids_only)
    format::refuse(path, "its vocabulary (tokenizer.ggml.model '" + m.vocabulary +
                             "') is not converted to a lockstep tokenizer yet; import with --ids-only to take and "
                             "give token ids");
  if (m.blocks.empty()) {
    r.profile = profile_name();
    ModelMetadata meta;
    meta.eos_token_ids = m.eos_token_ids;
    write_model_directory(out, m.config, m.parameters, meta);
  } else {
    r.profile = int8dot_profile_name();
    format::write_gguf_model_directory(out, m.config, file.bytes(), m.eos_token_ids);
  }
  return r;
}

}  // namespace lockstep
