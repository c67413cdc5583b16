// lockstep generate: text from a prompt, streamed as it comes, through a session (each new token
// costs one row of the model, not a whole window).
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/sampling.hpp"
#include "lockstep/session.hpp"

namespace lockstep::cli {

Run add_generate(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string prompt, stop;
    int32_t tokens = 64;
    float temperature = 0.0f, top_p = 1.0f;
    int32_t top_k = 0;
    uint64_t seed = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streamed as it comes");
  f->model.add_to(*cmd);
  cmd->add_option("--prompt", f->prompt, "the prompt's text (its bytes are the first tokens)")->required();
  cmd->add_option("-n,--tokens", f->tokens, "the most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", f->temperature, "0: greedy; higher: more varied")->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "sample among the k most likely bytes (0: all)")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "sample among the most likely bytes holding this mass (1: all)")->capture_default_str();
  cmd->add_option("--seed", f->seed, "sampling seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--stop", f->stop, "stop once the generated text ends with this");
  return [f] {
    const auto model = Model::load(f->model.path, f->model.load_options());
    if (model->config().vocab_size != 256)
      throw Error(ErrorKind::unsupported, "generate writes bytes; this model's vocabulary has " +
                                              std::to_string(model->config().vocab_size) + " ids");
    GenerateOptions g;
    g.sampling = {f->temperature, f->top_k, f->top_p, f->seed};
    g.max_tokens = f->tokens;
    g.stop = f->stop;
    g.sampling.validate();
    std::vector<int32_t> prompt;
    for (unsigned char ch : f->prompt) prompt.push_back(ch);
    Session session(model);
    std::fwrite(f->prompt.data(), 1, f->prompt.size(), stdout);
    std::fflush(stdout);
    const StopReason why = generate(session, prompt, g, [](int32_t token) {
      std::fputc(token, stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    if (why == StopReason::window_full)
      std::fprintf(stderr, "generate: stopped at the end of the %d-byte window\n", model->config().length);
    return 0;
  };
}

}  // namespace lockstep::cli
