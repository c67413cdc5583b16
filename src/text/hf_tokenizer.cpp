// A Hugging Face tokenizer.json (byte-level BPE) as a lockstep Tokenizer: the file read stage by
// stage (text/hf.hpp), refusing what it cannot follow with the key's path, and Hugging Face's
// encode: added tokens split out first (those with normalized=false on the raw text, the others on
// the normalized text), the normalizer, the pre-tokenizer, BPE on each word, the post-processor.
#include <utf8proc.h>

#include <algorithm>

#include "format/json_text.hpp"
#include "lockstep/error.hpp"
#include "text/hf.hpp"
#include "text/tokenizer_impl.hpp"

namespace lockstep::text {
namespace {

using hf::Node;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

bool is_space(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (c >= 9 && c <= 13) || c == 0x85 || cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
         cat == UTF8PROC_CATEGORY_ZP;
}

// single_word's rule: Hugging Face asks regex_syntax::is_word_character, Unicode's \w (UTS #18):
// Alphabetic, marks, decimal digits, connector punctuation, the joiners. By general category here
// (utf8proc): letters and Nl stand for Alphabetic, which leaves out the few Other_Alphabetic
// symbols (circled letters such as U+24B6), a word character to Hugging Face.
bool is_word_char(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D;
  }
}

char32_t last_char(std::string_view s) {
  size_t at = s.size() - 1, len = 1;
  while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return hf::next_char(s, at, &len);
}

// One piece of a text: an added token's id, or text for the next stage.
struct Segment {
  int32_t token = -1;
  std::string text;
};

class HfTokenizer final : public Tokenizer::Impl {
 public:
  explicit HfTokenizer(const hf::json& root) : bpe_(Node{&root, ""}.at("model")) {
    const Node top{&root, ""};
    top.object();
    for (const char* key : {"truncation", "padding"})
      if (!top.opt(key).null()) top.at(key).refuse("is not supported (lockstep never truncates or pads a text)");
    normalizer_ = hf::read_normalizer(top.opt("normalizer"));
    pre_ = hf::read_pre_tokenizer(top.opt("pre_tokenizer"));
    if (std::none_of(pre_.steps.begin(), pre_.steps.end(), [](const auto& s) { return s.kind == hf::PreTokenizer::Step::Kind::byte_level; }))
      top.opt("pre_tokenizer").refuse("has no ByteLevel step; only byte-level BPE is supported");
    post_ = hf::read_post_processor(top.opt("post_processor"));
    hf::read_decoder(top.opt("decoder"));
    size_ = static_cast<int32_t>(bpe_.tokens().size());
    const Node added = top.opt("added_tokens");
    if (!added.null())
      for (size_t i = 0; i < added.array().size(); ++i) read_added(added.at(i));
    for (const hf::PostProcessor::Piece& p : post_.single)
      for (int32_t id : p.ids)
        if (id >= size_) top.at("post_processor").refuse("names id " + std::to_string(id) + ", which has no token");
    for (const hf::PostProcessor::Piece& p : post_.single) {  // BOS: what the template puts first
      if (p.sequence) break;
      if (!p.ids.empty()) {
        bos_ = p.ids.front();
        break;
      }
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    if (!hf::valid_utf8(text)) throw Error(ErrorKind::invalid_argument, "the text is not valid UTF-8");
    std::vector<int32_t> ids;
    std::vector<Segment> raw, normal;
    split_added(text, false, raw);
    std::vector<std::string> words;
    for (Segment& r : raw) {
      if (r.token >= 0) {
        ids.push_back(r.token);
        continue;
      }
      normal.clear();
      split_added(normalizer_.apply(r.text), true, normal);
      for (Segment& s : normal) {
        if (s.token >= 0) {
          ids.push_back(s.token);
          continue;
        }
        words.clear();
        words.push_back(std::move(s.text));
        pre_.apply(words);
        for (const std::string& w : words) bpe_.tokenize(w, ids);
      }
    }
    if (add_special) post_.apply(ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<const std::string*> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0) throw Error(ErrorKind::invalid_argument, "token id " + std::to_string(id) + " is negative");
      if (id >= size_) continue;  // past the tokenizer (a padded embedding): nothing, as Hugging Face
      const auto a = added_by_id_.find(id);
      if (a != added_by_id_.end()) {
        if (!added_[a->second].special) tokens.push_back(&added_[a->second].content);
        continue;  // special tokens decode to nothing (skip_special_tokens), as SentencePiece's control pieces
      }
      // An id between the vocabulary and the added tokens that neither holds: nothing, as Hugging
      // Face drops an id without a token.
      if (static_cast<size_t>(id) < bpe_.tokens().size()) tokens.push_back(&bpe_.tokens()[static_cast<size_t>(id)]);
    }
    return hf::byte_level_decode(tokens);
  }

  int32_t bos() const override { return bos_; }
  int32_t eos() const override { return -1; }
  int32_t unk() const override { return bpe_.unk(); }
  int32_t size() const override { return size_; }
  const char* type() const override { return "huggingface"; }

  Tokenizer::Piece piece(int32_t id) const override {
    Tokenizer::Piece p;
    const auto a = added_by_id_.find(id);
    if (a != added_by_id_.end()) {
      p.text = added_[a->second].content;
      p.type = added_[a->second].special ? 3 : 4;  // control, user-defined
    } else if (id >= 0 && static_cast<size_t>(id) < bpe_.tokens().size()) {
      p.text = bpe_.tokens()[static_cast<size_t>(id)];
    }
    return p;
  }

  std::string token_text(int32_t id) const override {
    if (id < 0 || id >= size_) return std::string("<").append(std::to_string(id)).append(">");
    const auto a = added_by_id_.find(id);
    if (a != added_by_id_.end()) return added_[a->second].content;
    if (static_cast<size_t>(id) >= bpe_.tokens().size()) return {};
    // A token's bytes; part of a character shows as "bytes:\xNN...", as a byte model's token does.
    const std::string bytes = hf::byte_level_bytes(bpe_.tokens()[static_cast<size_t>(id)]);
    if (hf::valid_utf8(bytes)) return bytes;
    static const char hex[] = "0123456789abcdef";
    std::string out = "bytes:";
    for (unsigned char b : bytes) out.append("\\x").append(1, hex[b >> 4]).append(1, hex[b & 15]);
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= size_) return {};
    const auto a = added_by_id_.find(id);
    if (a != added_by_id_.end()) return added_[a->second].special ? std::string() : added_[a->second].content;
    if (static_cast<size_t>(id) >= bpe_.tokens().size()) return {};
    return hf::byte_level_bytes(bpe_.tokens()[static_cast<size_t>(id)]);
  }

 private:
  void read_added(const Node& n) {
    AddedToken t;
    t.id = n.at("id").id();
    t.content = n.at("content").str();
    if (t.content.empty() || !hf::valid_utf8(t.content)) n.at("content").refuse("must be non-empty UTF-8");
    t.special = n.boolean_or("special", false);
    t.lstrip = n.boolean_or("lstrip", false);
    t.rstrip = n.boolean_or("rstrip", false);
    t.single_word = n.boolean_or("single_word", false);
    t.normalized = n.boolean_or("normalized", !t.special);
    if (added_by_id_.count(t.id)) n.at("id").refuse("repeats id " + std::to_string(t.id));
    added_by_id_[t.id] = added_.size();
    size_ = std::max(size_, t.id + 1);
    added_.push_back(std::move(t));
    by_first_byte_[static_cast<unsigned char>(added_.back().content[0])].push_back(added_.size() - 1);
    auto& list = by_first_byte_[static_cast<unsigned char>(added_.back().content[0])];
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
  }

  // Hugging Face's AddedVocabulary::find_matches: the added tokens (of one kind: normalized or
  // not) in `text`, leftmost-longest and not overlapping (its Aho-Corasick automaton's order),
  // with single_word, lstrip and rstrip applied.
  void split_added(std::string_view text, bool normalized, std::vector<Segment>& out) const {
    size_t start_offset = 0;
    for (size_t pos = 0; pos < text.size();) {
      const auto found = by_first_byte_.find(static_cast<unsigned char>(text[pos]));
      const AddedToken* match = nullptr;
      if (found != by_first_byte_.end())
        for (size_t i : found->second)
          if (added_[i].normalized == normalized && text.compare(pos, added_[i].content.size(), added_[i].content) == 0) {
            match = &added_[i];
            break;
          }
      if (!match) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + match->content.size();
      pos = stop;
      if (match->single_word) {
        const bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
        size_t len = 1;
        const bool stop_space = stop == text.size() || !is_word_char(hf::next_char(text, stop, &len));
        if (!start_space || !stop_space) continue;
      }
      if (match->lstrip) {
        size_t s = start;
        while (s > 0 && is_space(last_char(text.substr(0, s)))) {
          --s;
          while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        }
        start = std::max(s, start_offset);
      }
      if (match->rstrip) {
        size_t len = 1;
        while (stop < text.size() && is_space(hf::next_char(text, stop, &len))) stop += len;
      }
      if (start_offset < start) out.push_back({-1, std::string(text.substr(start_offset, start - start_offset))});
      out.push_back({match->id, {}});
      start_offset = stop;
    }
    if (start_offset < text.size()) out.push_back({-1, std::string(text.substr(start_offset))});
  }

  hf::Normalizer normalizer_;
  hf::PreTokenizer pre_;
  hf::Bpe bpe_;
  hf::PostProcessor post_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<unsigned char, std::vector<size_t>> by_first_byte_;  // longest first
  int32_t size_ = 0, bos_ = -1;
};

}  // namespace

void require_hf_tokenizer(const std::string&) {}

std::unique_ptr<Tokenizer::Impl> load_hf_tokenizer(const std::string& bytes, const std::string& path) {
  hf::json root;
  try {
    format::check_json_depth(bytes, path);
    root = format::parse_json(bytes);
  } catch (const hf::json::exception& e) {
    throw Error(ErrorKind::format, path + ": not valid JSON (truncated?): " + e.what());
  }
  try {
    return std::make_unique<HfTokenizer>(root);
  } catch (const hf::Refusal& r) {
    throw Error(ErrorKind::format, path + ": " + (r.path.empty() ? "the file" : r.path) + " " + r.why);
  }
}

}  // namespace lockstep::text
