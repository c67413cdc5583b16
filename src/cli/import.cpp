// lockstep import hf / gguf: a Hugging Face Llama checkpoint or a llama GGUF file as a lockstep model
// directory (docs/FORMAT.md, "Hugging Face import", "GGUF import").
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/interop.hpp"

namespace lockstep::cli {

Run add_import(CLI::App& app) {
  struct Flags {
    std::string dir, out;
    int32_t length = 0, batch = 8;
    bool ids_only = false, widen_k_quants = false;
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
  auto g = std::make_shared<Flags>();
  CLI::App* gg = cmd->add_subcommand("gguf", "a GGUF file of llama.cpp's llama or qwen2 architecture (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K)");
  gg->add_option("FILE", g->dir, "the GGUF file")->required();
  gg->add_option("-o,--output", g->out, "the model directory to write (must not exist)")->required();
  gg->add_option("--length", g->length, "the window (default: llama.context_length, at most 65536)");
  gg->add_flag("--ids-only", g->ids_only, "import without the file's vocabulary: a model of token ids");
  gg->add_flag("--widen-k-quants", g->widen_k_quants,
               "widen Q4_K, Q5_K and Q6_K matrices to f32 (profile lockstep-int8dot-1, or f32) instead of integers");
  gg->footer(
      "Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K matrices are kept as the file's blocks (the model directory holds a\n"
      "copy of the file) and computed by integer block dot products: profile lockstep-int8dot-2 with K-quants,\n"
      "else lockstep-int8dot-1 (docs/ARITHMETIC.md). F16 and BF16 are widened exactly to f32, and so are the\n"
      "K-quants with --widen-k-quants; a file with no matrix in blocks becomes an f32 model. Other types are refused.\n"
      "The vocabulary becomes the model's tokenizer: 'gpt2' (pre gpt-2, llama-bpe, qwen2, smollm, default) a\n"
      "tokenizer.json, 'llama' a SentencePiece tokenizer.model; tokenizer.chat_template its chat template.");
  auto run_gguf = [g] {
    ImportGgufOptions options;
    options.length = g->length;
    options.ids_only = g->ids_only;
    options.widen_k_quants = g->widen_k_quants;
    const ImportGgufResult r = import_gguf(g->dir, g->out, options);
    std::string types;
    for (const std::string& s : r.types) types += (types.empty() ? "" : ", ") + s;
    const ModelConfig& c = r.config;
    std::printf("import gguf: %s (%s; %lld matrices kept in blocks)\n", g->dir.c_str(), types.c_str(),
                static_cast<long long>(r.block_matrices));
    if (r.widened_k_quants > 0)
      std::printf("widened to f32: %lld K-quant tensor%s (--widen-k-quants; 4 bytes a weight)\n",
                  static_cast<long long>(r.widened_k_quants), r.widened_k_quants == 1 ? "" : "s");
    std::printf("wrote %s: profile %s, vocab %d, window %d, d_model %d, %d layers, %d heads (%d kv), d_ff %d%s\n",
                g->out.c_str(), r.profile.c_str(), c.vocab_size, c.length, c.d_model, c.n_layers, c.n_heads,
                c.n_kv_heads, c.d_ff, r.tied ? ", head tied to the embedding" : "");
    std::string from;
    if (!r.vocabulary.empty())
      from = g->ids_only ? " (the file's '" + r.vocabulary + "' vocabulary was left out: --ids-only)"
                         : " (from the file's '" + r.vocabulary + "' vocabulary" + (r.pre.empty() ? "" : ", pre '" + r.pre + "'") +
                               (r.chat_template ? "; its chat template in chat_template.json)" : ")");
    std::printf("tokenizer  %s%s\n", tokenizer_line(g->out, c.vocab_size).c_str(), from.c_str());
    return 0;
  };
  return [f, gg, run_gguf] {
    if (gg->parsed()) return run_gguf();
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
