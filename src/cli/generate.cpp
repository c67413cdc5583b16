// lockstep generate: text from a prompt, streamed as it comes, through the library's Generator
// (each new token costs one row of the model, not a whole window; past the window the context
// restarts as include/lockstep/generator.hpp defines).
#include <charconv>
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/generator.hpp"

namespace lockstep::cli {
namespace {

// A decimal (or "inf", "nan") rounded once to the nearest f32, as examples/sample.py rounds it
// (lockstep.sampling.f32_from_text), so that both sample with the same bits for any text.
float f32_from_text(const std::string& text, const char* flag) {
  const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  float value = 0.0f;
  const auto [stop, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": " + text + " is out of the f32 range");
  if (ec != std::errc() || stop != end || begin == end)
    throw Error(ErrorKind::invalid_argument, std::string(flag) + ": '" + text + "' is not a number");
  return value;
}

}  // namespace

Run add_generate(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string prompt, stop;
    int32_t tokens = 64;
    std::string temperature = "0", top_p = "1";  // parsed by f32_from_text
    int32_t top_k = 0;
    uint64_t seed = 0;
    bool no_truncate = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streamed as it comes");
  f->model.add_to(*cmd);
  cmd->add_option("--prompt", f->prompt, "the prompt's text (its bytes are the first tokens)")->required();
  cmd->add_option("-n,--tokens", f->tokens, "the most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", f->temperature, "0: greedy; higher: more varied")->type_name("FLOAT")->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "sample among the k most likely bytes (0: all)")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "sample among the most likely bytes holding this mass (1: all)")->type_name("FLOAT")->capture_default_str();
  cmd->add_option("--seed", f->seed, "sampling seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--stop", f->stop, "stop once the generated text ends with this");
  cmd->add_flag("--no-truncate", f->no_truncate, "refuse a prompt longer than the window instead of keeping its end");
  cmd->footer(
      "Past the window (W bytes, the model's length) generation goes on: when the context is full, it\n"
      "restarts from position 0 with its last W - floor(W/2) bytes (the newest one included), computed\n"
      "afresh, so every token's logits are those of one full pass over its context. A prompt longer\n"
      "than the window keeps its last W bytes (a notice says so on stderr), or is refused with\n"
      "--no-truncate. docs/ARITHMETIC.md, \"Generation past the window\".");
  return [f] {
    const auto model = Model::load(f->model.path, f->model.load_options());
    if (model->config().vocab_size != 256)
      throw Error(ErrorKind::unsupported, "generate writes bytes; this model's vocabulary has " +
                                              std::to_string(model->config().vocab_size) + " ids");
    GenerateOptions g;
    g.sampling = {f32_from_text(f->temperature, "--temperature"), f->top_k, f32_from_text(f->top_p, "--top-p"), f->seed};
    g.max_tokens = f->tokens;
    g.stop = f->stop;
    g.truncate_prompt = !f->no_truncate;
    std::vector<int32_t> prompt;
    for (unsigned char ch : f->prompt) prompt.push_back(ch);
    // Every check (options, prompt) happens here, before anything is printed.
    Generator generator(model, prompt, g);
    if (const int64_t dropped = generator.context().dropped_prompt_tokens(); dropped > 0)
      std::fprintf(stderr,
                   "generate: the prompt holds %zu bytes, more than the %d-byte window; generating from its last "
                   "%d (--no-truncate refuses it instead)\n",
                   prompt.size(), model->config().length, model->config().length);
    std::fwrite(f->prompt.data(), 1, f->prompt.size(), stdout);
    std::fflush(stdout);
    while (const std::optional<int32_t> token = generator.next()) {
      std::fputc(*token, stdout);
      std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace lockstep::cli
