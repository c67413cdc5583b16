// lockstep chat: a conversation on the terminal. Each turn's prompt is the whole history rendered
// by the model's chat template (the built-in one when it has none) and encoded once with
// add_special_tokens false, as /v1/chat/completions computes it (docs/HTTP.md, "Chat"); so, for
// the same conversation, seed and settings, the answers are the HTTP API's, byte for byte.
//
// The model's keys and values stay in a Session between turns: a turn computes only the
// positions past the longest common prefix of the kept tokens and the new prompt's (all of the
// new turn when the rendered history's ids extend the kept ones; more when a template rewrites
// earlier turns or a merge crosses the boundary). A Session's positions are the bits a full pass
// gives, so reusing them changes nothing but the time.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include "cli/commands.hpp"
#include "cli/sampling_flags.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::cli {
namespace {

const char* stop_name(StopReason r) {
  switch (r) {
    case StopReason::eos: return "end of sequence";
    case StopReason::stop_text: return "stop text";
    case StopReason::grammar: return "the grammar's end";
    case StopReason::max_tokens: break;
  }
  return "--tokens reached";
}

void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

Run add_chat(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string system;
    SamplingFlags sampling;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("chat", "an interactive conversation with a model on the terminal, answers streamed");
  f->model.add_to(*cmd);
  cmd->add_option("--system", f->system, "a system message before the conversation");
  f->sampling.add_to(*cmd);
  cmd->footer(
      "Type a message and Enter; the answer streams as it comes. /reset starts the conversation again\n"
      "(the --system message kept); Ctrl-D (end of input) ends it with status 0. Each turn's prompt is\n"
      "the whole history through the model's chat template (model.json's chat_template; the built-in\n"
      "\"role: content\" lines without one), encoded once, exactly as /v1/chat/completions does; each\n"
      "turn samples with --seed, as an HTTP client sending the seed with each request. The model's state\n"
      "is kept between turns, so a turn computes only what it adds; a line on stderr after each answer\n"
      "says how many tokens it computed and why it stopped.");
  return [f] {
    const auto model = Model::load(f->model.path, f->model.load_options());
    const int32_t vocab = model->config().vocab_size;
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::for_model(f->model.path);
    if (!tokenizer && vocab != 256)
      throw Error(ErrorKind::unsupported, "this model's vocabulary has " + std::to_string(vocab) +
                                              " ids and no tokenizer, so it takes no text to chat with");
    std::unique_ptr<ChatTemplate> tmpl = ChatTemplate::for_model(f->model.path);
    if (!tmpl) tmpl = std::make_unique<ChatTemplate>(ChatTemplate::builtin());
    const GenerateOptions options = f->sampling.options();
    options.validate();

    std::vector<ChatMessage> history;
    auto reset = [&] {
      history.clear();
      if (!f->system.empty()) history.push_back({"system", f->system});
    };
    reset();
    std::optional<Session> kept;  // the previous turn's state: its tokens' keys and values
    const bool interactive = ::isatty(STDIN_FILENO) == 1;
    std::string line;
    for (;;) {
      if (interactive) print("> ");
      if (!std::getline(std::cin, line)) break;
      if (line.empty()) continue;
      if (line == "/reset") {
        reset();
        std::fprintf(stderr, "[the conversation starts again]\n");
        continue;
      }
      history.push_back({"user", line});
      std::string text;
      try {
        text = tmpl->render(history, true);
      } catch (const Error& e) {  // the template refuses the conversation: say so, drop the message
        history.pop_back();
        std::fprintf(stderr, "chat: %s\n", e.what());
        continue;
      }
      std::vector<int32_t> prompt;
      if (tokenizer) {
        prompt = tokenizer->encode(text, false);
      } else {
        for (unsigned char ch : text) prompt.push_back(ch);
      }
      Generator generator(model, prompt, options);
      // Reuse the kept positions the new context starts with (all but its last at most).
      const std::span<const int32_t> context = generator.context().tokens();  // valid until the first step
      const size_t context_size = context.size();
      int32_t reused = 0;
      if (kept) {
        const std::span<const int32_t> had = kept->tokens();
        size_t common = 0;
        while (common < had.size() && common + 1 < context.size() && had[common] == context[common]) ++common;
        if (common > 0) {
          kept->truncate(static_cast<int32_t>(common));
          generator.session() = std::move(*kept);
          reused = static_cast<int32_t>(common);
        }
        kept.reset();
      }
      std::string answer;
      if (tokenizer) {
        TextStream stream(*tokenizer, prompt);
        while (!stream.stopped()) {
          const std::optional<int32_t> token = generator.next();
          if (!token || generator.end_of_sequence()) break;  // an end id is no text
          print(stream.push(*token));
        }
        print(stream.finish());
        answer = stream.text();
      } else {
        while (const std::optional<int32_t> token = generator.next()) {
          if (generator.end_of_sequence()) break;
          answer.push_back(static_cast<char>(*token));
          print(std::string(1, static_cast<char>(*token)));
        }
      }
      print("\n");
      const int64_t computed_prompt = static_cast<int64_t>(context_size) - reused;
      std::fprintf(stderr, "[%d tokens generated; prompt %zu tokens: %lld computed, %d reused; %s]\n",
                   generator.generated(), context_size, static_cast<long long>(computed_prompt), reused,
                   stop_name(generator.stop_reason()));
      history.push_back({"assistant", answer});
      kept = std::move(generator.session());
    }
    if (interactive) print("\n");
    return 0;
  };
}

}  // namespace lockstep::cli
