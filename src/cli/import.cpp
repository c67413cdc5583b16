// lockstep import hf: a Hugging Face Llama checkpoint as a lockstep model directory
// (docs/FORMAT.md, "Hugging Face import").
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/interop.hpp"

namespace lockstep::cli {

Run add_import(CLI::App& app) {
  struct Flags {
    std::string dir, out;
    int32_t length = 0, batch = 8;
    bool ids_only = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("import", "write another tool's model as a lockstep model directory");
  cmd->require_subcommand(1);
  CLI::App* hf = cmd->add_subcommand("hf", "a Hugging Face LlamaForCausalLM directory (config.json, safetensors)");
  hf->add_option("DIR", f->dir, "the Hugging Face model directory")->required();
  hf->add_option("-o,--output", f->out, "the model directory to write (must not exist)")->required();
  hf->add_option("--length", f->length, "the window (default: max_position_embeddings, at most 65536)");
  hf->add_option("--batch", f->batch, "the training batch model.json records")->capture_default_str();
  hf->add_flag("--ids-only", f->ids_only, "import the weights alone, without a tokenizer (e.g. beside a tokenizer lockstep cannot read)");
  hf->footer(
      "F16 and BF16 weights are widened exactly to f32. The query and key projections are permuted from\n"
      "Hugging Face's rotate_half layout to lockstep's adjacent RoPE pairs (the same function). Biases,\n"
      "rope_scaling, activations other than silu and sliding windows are refused. A SentencePiece\n"
      "tokenizer.model is copied into the model directory and named in model.json.");
  return [f] {
    ImportHfOptions options;
    options.length = f->length;
    options.batch = f->batch;
    options.ids_only = f->ids_only;
    const ImportHfResult r = import_hf(f->dir, f->out, options);
    std::string files, dtypes;
    for (const std::string& s : r.files) files += (files.empty() ? "" : ", ") + s;
    for (const std::string& s : r.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + s;
    const ModelConfig& c = r.config;
    std::printf("import hf: %s (%s)\n", files.c_str(), dtypes.c_str());
    std::printf("wrote %s: vocab %d, window %d, d_model %d, %d layers, %d heads (%d kv), d_ff %d%s\n", f->out.c_str(),
                c.vocab_size, c.length, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff,
                r.tied ? ", head tied to the embedding (stored as its transpose)" : "");
    // The same line `inspect` prints for the directory written (one rule for how text becomes ids).
    std::printf("tokenizer  %s%s\n", tokenizer_line(f->out, c.vocab_size).c_str(),
                r.tokenizer_model ? " (copied into the model directory)" : "");
    if (r.chat_template) std::printf("chat template: tokenizer_config.json's, kept as chat_template.json\n");
    if (!r.eos_token_ids.empty()) {
      std::string ids;
      for (int32_t id : r.eos_token_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      std::printf("end of sequence: %s (eos_token_ids; generation stops after one)\n", ids.c_str());
    }
    return 0;
  };
}

}  // namespace lockstep::cli
