// lockstep inspect: what a model is, read from its directory with every check a load makes.
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::cli {

Run add_inspect(CLI::App& app) {
  struct Flags {
    ModelFlags model;  // without --device: inspect reads on the reference device
    bool parameters = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("inspect", "print a model's configuration, inputs, outputs and digest");
  f->model.add_to(*cmd, "MODEL", false);
  cmd->add_flag("--parameters", f->parameters, "also list every parameter tensor");
  return [f] {
    LoadOptions options = f->model.load_options();
    options.device = Device::reference;
    const auto model = Model::load(f->model.path, options);
    const ModelConfig& c = model->config();
    const ModelSource& s = model->source();
    std::printf("model      %s\n", s.directory.c_str());
    if (s.step || s.slug) {
      std::printf("checkpoint step %s of run %s, %s weights\n",
                  s.step ? std::to_string(*s.step).c_str() : "?", s.slug ? s.slug->c_str() : "?",
                  s.trained_weights ? "trained" : "averaged (EMA)");
    }
    if (s.checkpoint) std::printf("exported   from %s\n", s.checkpoint->c_str());
    std::printf("profile    %s\n", model->profile());
    std::printf("precision  %s\n", precision_name(model->precision()));
    std::printf("config     vocab_size %d, length %d, d_model %d, n_layers %d, n_heads %d, "
                "n_kv_heads %d, d_ff %d, norm_eps %g, rope_theta %g, batch %d\n",
                c.vocab_size, c.length, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff,
                static_cast<double>(c.norm_eps), static_cast<double>(c.rope_theta), c.batch);
    if (c.qkv_bias || c.o_bias)
      std::printf("biases     %s%s\n", c.qkv_bias ? "q, k, v" : "", c.o_bias ? (c.qkv_bias ? ", o" : "o") : "");
    if (c.rope_scaling)
      std::printf("rope       llama3 scaling: factor %g, low_freq_factor %g, high_freq_factor %g, "
                  "original_max_position_embeddings %d\n",
                  static_cast<double>(c.rope_scaling->factor), static_cast<double>(c.rope_scaling->low_freq_factor),
                  static_cast<double>(c.rope_scaling->high_freq_factor), c.rope_scaling->original_max_position);
    std::fputs(io_lines(model_inputs(c), model_outputs(c)).c_str(), stdout);
    const int64_t n = model->registry().total();
    std::printf("parameters %s in %zu tensors, %s as f32, weights %s\n", with_commas(n).c_str(),
                model->registry().entries().size(), human_bytes(static_cast<double>(n) * 4.0).c_str(),
                model->weight_format().c_str());
    std::printf("sha256     %s\n", model->parameters_sha256().c_str());
    // How text becomes ids: the model's tokenizer, the bytes themselves, or nothing.
    std::printf("tokenizer  %s\n", tokenizer_line(f->model.path, c.vocab_size).c_str());
    if (f->parameters) {
      for (const auto& e : model->registry().entries())
        std::printf("  %-24s %-14s offset %s\n", e.name.c_str(), shape_text(e.shape).c_str(),
                    with_commas(e.offset).c_str());
    }
    return 0;
  };
}

}  // namespace lockstep::cli
