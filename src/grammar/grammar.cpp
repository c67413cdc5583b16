// The public face of the grammar engine (include/lockstep/grammar.hpp): Grammar over Rules,
// TokenVocabulary over TokenTrie, GrammarMatcher over a ByteAutomaton and a cache of masks.
#include "lockstep/grammar.hpp"

#include <map>

#include "grammar/automaton.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/token_trie.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep {

struct Grammar::Impl {
  std::shared_ptr<const grammar::Rules> rules;
};

struct TokenVocabulary::Impl {
  std::vector<std::string> bytes;
  grammar::TokenTrie trie;
};

Grammar::Grammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view text, std::string_view root) {
  auto impl = std::make_unique<Impl>();
  impl->rules = std::make_shared<const grammar::Rules>(grammar::parse_gbnf(text, root));
  return std::shared_ptr<const Grammar>(new Grammar(std::move(impl)));
}

std::string Grammar::json_schema_gbnf(std::string_view schema_json) { return grammar::json_schema_to_gbnf(schema_json); }

std::shared_ptr<const Grammar> Grammar::from_json_schema(std::string_view schema_json) {
  const std::string gbnf = grammar::json_schema_to_gbnf(schema_json);
  try {
    return from_gbnf(gbnf);
  } catch (const Error& e) {  // a schema whose grammar cannot be used (e.g. matches nothing)
    throw Error(ErrorKind::invalid_argument, std::string("schema: ") + e.what());
  }
}

std::shared_ptr<const Grammar> Grammar::json_object() {
  static const std::shared_ptr<const Grammar> object = from_gbnf(grammar::json_object_gbnf());
  return object;
}

TokenVocabulary::TokenVocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenVocabulary::~TokenVocabulary() = default;

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_bytes(std::vector<std::string> token_bytes) {
  grammar::TokenTrie trie(token_bytes);
  auto impl = std::unique_ptr<Impl>(new Impl{std::move(token_bytes), std::move(trie)});
  return std::shared_ptr<const TokenVocabulary>(new TokenVocabulary(std::move(impl)));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::bytes(int32_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(std::max(vocab_size, 0)));
  for (size_t i = 0; i < bytes.size() && i < 256; ++i) bytes[i] = std::string(1, static_cast<char>(i));
  return from_bytes(std::move(bytes));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer, int32_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(std::max(vocab_size, 0)));
  for (int32_t id = 0; id < vocab_size && id < tokenizer.size(); ++id) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  return from_bytes(std::move(bytes));
}

int32_t TokenVocabulary::size() const { return static_cast<int32_t>(impl_->bytes.size()); }
const std::string& TokenVocabulary::token_bytes(int32_t id) const { return impl_->bytes.at(static_cast<size_t>(id)); }

// The automaton's memory is bounded: past these it is reset to the current state (a cache; the
// same answers follow). Masks of recent states are kept, since a JSON answer comes back to the
// same states (inside a string, after a comma) again and again.
namespace {
constexpr size_t kMaxStates = 1 << 16;
constexpr size_t kMaxNodes = 1 << 20;
constexpr size_t kMaxMasks = 64;
}  // namespace

struct GrammarMatcher::State {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenVocabulary> vocabulary;
  grammar::ByteAutomaton automaton;
  uint32_t at;
  std::map<uint32_t, std::vector<uint64_t>> masks;  // by automaton state
  std::vector<uint32_t> mask_order;                 // oldest first

  State(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocabulary> v)
      : grammar(std::move(g)), vocabulary(std::move(v)), automaton(grammar->impl().rules), at(automaton.start()) {}

  // The state after `bytes`, or kDead.
  uint32_t after(std::string_view bytes) {
    uint32_t s = at;
    for (const char c : bytes) {
      s = automaton.step(s, static_cast<uint8_t>(c));
      if (s == grammar::ByteAutomaton::kDead) break;
    }
    return s;
  }
  void move_to(uint32_t s) {
    at = s;
    if (automaton.state_count() > kMaxStates || automaton.node_count() > kMaxNodes) {
      at = automaton.reset(at);
      masks.clear();
      mask_order.clear();
    }
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary) {
  if (!grammar || !vocabulary) throw Error(ErrorKind::invalid_argument, "a grammar matcher needs a grammar and a vocabulary");
  state_ = std::make_unique<State>(std::move(grammar), std::move(vocabulary));
}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

std::span<const uint64_t> GrammarMatcher::allowed_tokens() {
  State& s = *state_;
  const auto found = s.masks.find(s.at);
  if (found != s.masks.end()) return found->second;
  if (s.mask_order.size() >= kMaxMasks) {
    s.masks.erase(s.mask_order.front());
    s.mask_order.erase(s.mask_order.begin());
  }
  std::vector<uint64_t>& mask = s.masks[s.at];
  s.mask_order.push_back(s.at);
  s.vocabulary->impl().trie.allowed(s.automaton, s.at, mask);
  return mask;
}

bool GrammarMatcher::allowed(int32_t token) {
  if (token < 0 || token >= state_->vocabulary->size()) return false;
  const std::string& bytes = state_->vocabulary->token_bytes(token);
  return !bytes.empty() && state_->after(bytes) != grammar::ByteAutomaton::kDead;
}

bool GrammarMatcher::accept(int32_t token) {
  if (!allowed(token)) return false;
  state_->move_to(state_->after(state_->vocabulary->token_bytes(token)));
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const uint32_t s = state_->after(bytes);
  if (s == grammar::ByteAutomaton::kDead) return false;
  state_->move_to(s);
  return true;
}

bool GrammarMatcher::accepting() const { return state_->automaton.accepting(state_->at); }
bool GrammarMatcher::can_continue() const { return state_->automaton.can_continue(state_->at); }

}  // namespace lockstep
