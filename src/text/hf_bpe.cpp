// tokenizer.json's `model`: BPE. A word starts as its characters (each a vocabulary id) and the
// pair of neighbours with the lowest merge rank joins, leftmost first, until no pair has a rank:
// Hugging Face's Word::merge_all, with a priority queue over a linked list of symbols (a word of
// n characters costs O(n log n), not O(n^2)), and a cache of words already seen.
#include <algorithm>
#include <queue>

#include "text/hf.hpp"

namespace lockstep::text::hf {

namespace {

constexpr size_t cache_words = 10000;  // Hugging Face's default capacity; past it, no more are kept
constexpr size_t cache_word_bytes = 256;

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

}  // namespace

Bpe::Bpe(const Node& model) {
  if (model.type() != "BPE") model.unsupported_type();
  // What would make ids depend on more than the text is refused: dropout samples merges.
  const Node dropout = model.opt("dropout");
  if (!dropout.null() && !(dropout.v->is_number() && dropout.v->get<double>() == 0.0))
    dropout.refuse("is not supported (it makes tokenization random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Node n = model.opt(key);
    if (!n.null() && !n.str().empty()) n.refuse("\"" + n.str() + "\" is not supported (byte-level BPE has none)");
  }
  if (model.boolean_or("byte_fallback", false)) model.at("byte_fallback").refuse("true is not supported");
  ignore_merges_ = model.boolean_or("ignore_merges", false);
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  const Node vocab = model.at("vocab");
  for (const auto& [token, id] : vocab.object().items()) {
    const Node entry{&id, vocab.path + "[\"" + token + "\"]"};
    const int32_t i = entry.id();
    if (!valid_utf8(token)) entry.refuse("is not valid UTF-8");
    vocab_[token] = i;
    if (static_cast<size_t>(i) >= tokens_.size()) tokens_.resize(static_cast<size_t>(i) + 1);
    if (!tokens_[static_cast<size_t>(i)].empty()) entry.refuse("repeats id " + std::to_string(i));
    tokens_[static_cast<size_t>(i)] = token;
  }
  const Node unk = model.opt("unk_token");
  if (!unk.null()) {
    unk_ = id_of(unk.str());
    if (unk_ < 0) unk.refuse("\"" + unk.str() + "\" is not in the vocabulary");
  }
  const Node merges = model.at("merges");
  const json& list = merges.array();
  merges_.reserve(list.size());
  for (size_t rank = 0; rank < list.size(); ++rank) {
    // "a b" (older files) or ["a", "b"] (newer ones, which allow spaces inside a token).
    const Node m = merges.at(rank);
    std::string a, b;
    if (m.v->is_string()) {
      const std::string s = m.str();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) m.refuse("must be two tokens joined by one space");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else {
      if (m.array().size() != 2) m.refuse("must be a pair of tokens");
      a = m.at(size_t{0}).str(), b = m.at(size_t{1}).str();
    }
    const int32_t ia = id_of(a), ib = id_of(b), merged = id_of(a + b);
    if (ia < 0 || ib < 0) m.refuse("names a token not in the vocabulary");
    if (merged < 0) m.refuse("makes \"" + a + b + "\", which is not in the vocabulary");
    merges_[pair_key(ia, ib)] = Merge{static_cast<int32_t>(rank), merged};  // a repeat: the later rank, as HF
  }
}

int32_t Bpe::id_of(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // Llama 3: a word that is a token is that token, whatever the merges say
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) return out.push_back(it->second);
  }
  const bool cacheable = word.size() < cache_word_bytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < cache_words) cache_.emplace(word, std::move(ids));
  }
}

void Bpe::merge(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool gone;
  };
  std::vector<Symbol> symbols;
  // The characters: a character not in the vocabulary becomes unk_token (runs of them one, with
  // fuse_unk), or nothing when the model has none (Hugging Face drops it).
  int pending_unk = 0;  // 0 none, 1 one pending
  const auto add = [&](int32_t id) {
    const int at = static_cast<int>(symbols.size());
    symbols.push_back({id, at - 1, -1, false});
    if (at > 0) symbols[static_cast<size_t>(at - 1)].next = at;
  };
  for (size_t at = 0; at < word.size();) {
    size_t len = 1;
    next_char(word, at, &len);
    const auto it = vocab_.find(std::string(word.substr(at, len)));
    at += len;
    if (it != vocab_.end()) {
      if (pending_unk) add(unk_), pending_unk = 0;
      add(it->second);
    } else if (unk_ >= 0) {
      if (pending_unk && !fuse_unk_) add(unk_);
      pending_unk = 1;
    }
  }
  if (pending_unk) add(unk_);
  // The queue: (rank, position), lowest rank first, then leftmost, as HF's Merge ordering.
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto consider = [&](int left) {
    const int right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const auto m = merges_.find(pair_key(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id));
    if (m != merges_.end()) queue.push({m->second.rank, left, m->second.id});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.gone || left.next < 0) continue;
    // A stale entry: either side has merged since it was queued.
    const auto m = merges_.find(pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (m == merges_.end() || m->second.id != top.id) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    left.id = top.id;
    right.gone = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols)
    if (!s.gone) out.push_back(s.id);
}

}  // namespace lockstep::text::hf
