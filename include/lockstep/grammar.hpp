// Structured output: a grammar that generated text must follow, enforced in sampling (docs/HTTP.md,
// "Structured output"). A Grammar comes from GBNF (llama.cpp's notation), a JSON Schema or
// {"type": "json_object"}; a TokenVocabulary holds a model's tokens as bytes (a trie, built once
// per model); a GrammarMatcher follows one generation, telling which tokens may come next.
// Everything works on bytes: a token may end in the middle of a character or of a terminal.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

class Tokenizer;

class Grammar {
 public:
  // Each throws Error (invalid_argument) naming the line and column, the keyword and its place
  // in the schema, or the rule that makes the grammar unusable (left recursion, matching nothing).
  static std::shared_ptr<const Grammar> from_gbnf(std::string_view text, std::string_view root = "root");
  static std::shared_ptr<const Grammar> from_json_schema(std::string_view schema_json);
  static std::shared_ptr<const Grammar> json_object();
  // The GBNF a JSON Schema becomes (what from_json_schema parses).
  static std::string json_schema_gbnf(std::string_view schema_json);
  ~Grammar();

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Grammar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes token id adds to the text (empty: never allowed by a grammar,
  // as a control token).
  static std::shared_ptr<const TokenVocabulary> from_bytes(std::vector<std::string> token_bytes);
  // A byte model's: id i is the byte i, for `vocab_size` ids (256).
  static std::shared_ptr<const TokenVocabulary> bytes(int32_t vocab_size = 256);
  // A tokenizer's (Tokenizer::token_bytes) for a model of `vocab_size` ids; ids past the
  // tokenizer's are never allowed.
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer, int32_t vocab_size);
  ~TokenVocabulary();
  int32_t size() const;
  const std::string& token_bytes(int32_t id) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit TokenVocabulary(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One generation's place in its grammar. Not thread-safe; one per generation.
class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Bit id of the result (size()/64 words rounded up) is set when token id's bytes can all
  // follow the text so far. End-of-sequence ids are the caller's (Generator allows them where
  // accepting() is true).
  std::span<const uint64_t> allowed_tokens();
  bool allowed(int32_t token);
  // Takes the token's bytes; false (and no change) when the grammar refuses them.
  bool accept(int32_t token);
  bool accept_bytes(std::string_view bytes);
  // The text so far is a whole match of the grammar.
  bool accepting() const;
  // Some byte could still follow.
  bool can_continue() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lockstep
