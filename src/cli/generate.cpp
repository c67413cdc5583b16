// lockstep generate: text from a prompt, streamed as it comes, through the library's Generator
// (each new token costs one row of the model, not a whole window; past the window the context
// restarts as include/lockstep/generator.hpp defines).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/sampling_flags.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/grammar.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::cli {
namespace {

// "5,17,3" -> {5, 17, 3}: decimal ids, comma-separated (the range is the Generator's check).
std::vector<int32_t> ids_from_text(const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const char* begin = text.data() + at;
    const char* end = text.data() + comma;
    while (begin < end && *begin == ' ') ++begin;
    while (end > begin && end[-1] == ' ') --end;
    int32_t id = 0;
    const auto [stop, ec] = std::from_chars(begin, end, id);
    if (ec != std::errc() || stop != end || begin == end)
      throw Error(ErrorKind::invalid_argument, "--prompt-ids: entry " + std::to_string(ids.size()) + " ('" +
                                                   text.substr(at, comma - at) + "') is not an integer id");
    ids.push_back(id);
    if (comma == text.size()) break;
    at = comma + 1;
  }
  return ids;
}

// The grammar of --grammar FILE (GBNF) or --json-schema FILE (a JSON Schema); a refusal names the
// file, then the line and column or the schema's keyword.
std::shared_ptr<const Grammar> grammar_from_file(const std::string& path, bool schema) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, std::string(schema ? "--json-schema" : "--grammar") + ": cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return schema ? Grammar::from_json_schema(text.str()) : Grammar::from_gbnf(text.str());
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.what());
  }
}

}  // namespace

Run add_generate(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    std::string prompt, prompt_ids, stop;
    SamplingFlags sampling;
    bool no_truncate = false;
    std::string grammar, json_schema;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streamed as it comes");
  f->model.add_to(*cmd);
  CLI::Option* text = cmd->add_option("--prompt", f->prompt, "the prompt's text (its bytes are the first tokens)");
  CLI::Option* ids = cmd->add_option("--prompt-ids", f->prompt_ids, "the prompt as token ids, comma-separated (a model without a tokenizer)");
  text->excludes(ids);
  ids->excludes(text);
  f->sampling.add_to(*cmd);
  cmd->add_option("--stop", f->stop, "stop once the generated text ends with this (a tokenizer's text: right after it)");
  cmd->add_flag("--no-truncate", f->no_truncate, "refuse a prompt longer than the window instead of keeping its end");
  CLI::Option* grammar = cmd->add_option("--grammar", f->grammar, "only text this GBNF grammar (llama.cpp's notation) accepts");
  CLI::Option* schema = cmd->add_option("--json-schema", f->json_schema, "only JSON this JSON Schema accepts");
  grammar->excludes(schema);
  schema->excludes(grammar);
  cmd->footer(
      "Past the window (W bytes, the model's length) generation goes on: when the context is full, it\n"
      "restarts from position 0 with its last W - floor(W/2) bytes (the newest one included), computed\n"
      "afresh, so every token's logits are those of one full pass over its context. A prompt longer\n"
      "than the window keeps its last W bytes (a notice says so on stderr), or is refused with\n"
      "--no-truncate. docs/ARITHMETIC.md, \"Generation past the window\".\n"
      "A model with a tokenizer (model.json's `tokenizer`, a SentencePiece model) takes and prints text\n"
      "through it (BOS, then the prompt's pieces); --stop ends the text right after the stop string, which\n"
      "may come inside a token's text (the rest of that token is not printed). A model whose vocabulary\n"
      "is not the 256 bytes and has no tokenizer takes --prompt-ids and prints token ids (the prompt's,\n"
      "then each generated one), comma-separated.\n"
      "A model whose model.json has eos_token_ids (an imported model's eos_token_id) stops right after\n"
      "generating one of them, printing nothing for it; --ignore-eos goes on to --tokens.\n"
      "--grammar FILE (GBNF) or --json-schema FILE holds the text to the grammar: each token is drawn from\n"
      "those the grammar allows next (docs/HTTP.md, \"Structured output\"). An end-of-sequence id is\n"
      "allowed where the text is a whole match; a model without one stops at the first whole match.");
  return [f, text, ids] {
    if (text->count() == 0 && ids->count() == 0)
      throw Error(ErrorKind::invalid_argument, "give the prompt as --prompt TEXT or --prompt-ids ID,ID,...");
    const auto model = Model::load(f->model.path, f->model.load_options());
    const int32_t vocab = model->config().vocab_size;
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::for_model(f->model.path);
    const bool bytes = !tokenizer && vocab == 256;  // ids are bytes: text in and out
    if (!bytes && !tokenizer && ids->count() == 0)
      throw Error(ErrorKind::unsupported, "this model's vocabulary has " + std::to_string(vocab) +
                                              " ids and no tokenizer, so it takes no text: give the prompt as --prompt-ids");
    if (!bytes && !tokenizer && !f->stop.empty())
      throw Error(ErrorKind::unsupported, "--stop compares text; this model has no tokenizer (vocabulary of " +
                                              std::to_string(vocab) + " ids)");
    GenerateOptions g = f->sampling.options();
    if (bytes) g.stop = f->stop;  // with a tokenizer the decoded text is compared (TextStream)
    g.truncate_prompt = !f->no_truncate;
    if (!f->grammar.empty() || !f->json_schema.empty()) {
      if (!bytes && !tokenizer)
        throw Error(ErrorKind::unsupported, "a grammar matches text; this model has no tokenizer (vocabulary of " +
                                                std::to_string(vocab) + " ids)");
      g.grammar = f->grammar.empty() ? grammar_from_file(f->json_schema, true) : grammar_from_file(f->grammar, false);
      g.vocabulary = tokenizer ? TokenVocabulary::from_tokenizer(*tokenizer, vocab) : TokenVocabulary::bytes();
    }
    std::vector<int32_t> prompt;
    if (ids->count() > 0) {
      prompt = ids_from_text(f->prompt_ids);
    } else if (tokenizer) {  // the text with the tokenizer's special tokens (SentencePiece: BOS first)
      prompt = tokenizer->encode(f->prompt, true);
    } else {
      for (unsigned char ch : f->prompt) prompt.push_back(ch);
    }
    // Every check (options, prompt) happens here, before anything is printed.
    Generator generator(model, prompt, g);
    if (const int64_t dropped = generator.context().dropped_prompt_tokens(); dropped > 0)
      std::fprintf(stderr,
                   "generate: the prompt holds %zu %s, more than the %d-%s window; generating from its last "
                   "%d (--no-truncate refuses it instead)\n",
                   prompt.size(), bytes ? "bytes" : "tokens", model->config().length, bytes ? "byte" : "token",
                   model->config().length);
    if (tokenizer) {
      // Text through the tokenizer: the prompt's, then what each token settles (a piece may
      // complete a character only later), as the HTTP API gives it; --stop ends the text right
      // after the stop string, even inside a token's text.
      std::vector<std::string> stops;
      if (!f->stop.empty()) stops.push_back(f->stop);
      TextStream stream(*tokenizer, prompt, stops);
      auto print = [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
      print(stream.prompt_text());
      while (!stream.stopped()) {
        const std::optional<int32_t> token = generator.next();
        if (!token || generator.end_of_sequence()) break;  // an end id is no text
        print(stream.push(*token));
      }
      print(stream.finish());
      std::fputc('\n', stdout);
      return 0;
    }
    if (!bytes)
      std::fprintf(stderr, "generate: the model has no tokenizer (a vocabulary of %d ids); printing token ids\n", vocab);
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (bytes)
        std::fputc(prompt[i], stdout);
      else
        std::printf(i == 0 ? "%d" : ",%d", prompt[i]);
    }
    std::fflush(stdout);
    while (const std::optional<int32_t> token = generator.next()) {
      if (generator.end_of_sequence()) break;  // the end id: nothing is printed for it
      if (bytes)
        std::fputc(*token, stdout);
      else
        std::printf(",%d", *token);
      std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace lockstep::cli
