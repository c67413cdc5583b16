// tokenizer.json's `pre_tokenizer`: how a text is cut into the words BPE sees alone. Split (a
// regex, as Llama 3 and Qwen2 write theirs), Digits (SmolLM), ByteLevel (GPT-2), or a Sequence of
// them. Regexes run on Oniguruma, the engine Hugging Face's tokenizers itself uses (the onig
// crate, Oniguruma 6.9.8 as Debian's), so \p{L}, (?i:...) and (?!\S) mean what they mean there.
#include <oniguruma.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "lockstep/error.hpp"
#include "text/hf.hpp"

namespace lockstep::text::hf {

class Regex {
 public:
  Regex(const std::string& pattern, const Node& where) {
    static std::once_flag once;
    std::call_once(once, [] {
      OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
      onig_initialize(encodings, 1);
    });
    OnigErrorInfo info;
    const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
    // The onig crate's Regex::new: no options, Oniguruma's default (Ruby) syntax.
    const int r = onig_new(&re_, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
    if (r != ONIG_NORMAL) {
      OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(message, r, &info);
      where.refuse("is not a regex Oniguruma accepts: " + std::string(reinterpret_cast<const char*>(message)));
    }
  }
  ~Regex() { onig_free(re_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Hugging Face's find_matches for a regex: the text as (start, end, matched) spans, matches as
  // the onig crate's find_iter gives them (an empty match right after the previous one is
  // skipped by a character).
  void spans(std::string_view text, std::vector<std::array<size_t, 3>>& out) const {
    out.clear();
    if (text.empty()) return out.push_back({0, 0, 0});
    const auto* s = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = s + text.size();
    const std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> owned(onig_region_new(),
                                                                    [](OnigRegion* r) { onig_region_free(r, 1); });
    OnigRegion* region = owned.get();
    size_t from = 0, prev = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (from <= text.size()) {
      const int r = onig_search(re_, s, end, s + from, end, region, ONIG_OPTION_NONE);
      if (r == ONIG_MISMATCH) break;
      if (r < 0) {  // e.g. Oniguruma's retry limit on a pathological pattern: never a silent cut
        OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(message, r);
        throw Error(ErrorKind::invalid_argument,
                    "the tokenizer's regex failed on the text: " + std::string(reinterpret_cast<const char*>(message)));
      }
      const auto b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
      if (b == e && have_last && last_end == e) {
        size_t len = 1;
        if (from < text.size()) next_char(text, from, &len);
        from += len;
        continue;
      }
      from = e;
      have_last = true;
      last_end = e;
      if (prev != b) out.push_back({prev, b, 0});
      out.push_back({b, e, 1});
      prev = e;
    }
    if (prev != text.size()) out.push_back({prev, text.size(), 0});
  }

 private:
  OnigRegex re_ = nullptr;
};

namespace {

// GPT-2's pattern, which ByteLevel's use_regex applies.
constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// NormalizedString::split: the spans kept by `behavior`, as (start, end).
void split(std::string_view text, const PreTokenizer::Step& step, std::vector<std::string>& out,
           std::vector<std::array<size_t, 3>>& spans) {
  step.regex->spans(text, spans);
  if (step.invert)
    for (auto& s : spans) s[2] = !s[2];
  std::vector<std::array<size_t, 3>> kept;  // start, end, removed
  bool previous = false;
  switch (step.behavior) {
    case Behavior::isolated:
      for (const auto& s : spans) kept.push_back({s[0], s[1], 0});
      break;
    case Behavior::removed:
      kept = spans;
      break;
    case Behavior::contiguous:  // runs of matches (and of non-matches) join
      for (const auto& s : spans) {
        if (s[2] == previous && !kept.empty()) kept.back()[1] = s[1];
        else kept.push_back({s[0], s[1], 0});
        previous = s[2];
      }
      break;
    case Behavior::merged_with_previous:  // a match joins the piece before it
      for (const auto& s : spans) {
        if (s[2] && !previous && !kept.empty()) kept.back()[1] = s[1];
        else kept.push_back({s[0], s[1], 0});
        previous = s[2];
      }
      break;
    case Behavior::merged_with_next:  // a match joins the piece after it (walked backwards)
      for (auto s = spans.rbegin(); s != spans.rend(); ++s) {
        if ((*s)[2] && !previous && !kept.empty()) kept.back()[0] = (*s)[0];
        else kept.push_back({(*s)[0], (*s)[1], 0});
        previous = (*s)[2];
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& k : kept)  // empty pieces vanish (PreTokenizedString::split)
    if (!k[2] && k[1] > k[0]) out.emplace_back(text.substr(k[0], k[1] - k[0]));
}

PreTokenizer::Step split_step(const Node& n) {
  PreTokenizer::Step step;
  const Node pattern = n.at("pattern");
  const std::string behavior = n.at("behavior").str();
  static const std::pair<const char*, Behavior> names[] = {
      {"Removed", Behavior::removed}, {"Isolated", Behavior::isolated}, {"MergedWithPrevious", Behavior::merged_with_previous},
      {"MergedWithNext", Behavior::merged_with_next}, {"Contiguous", Behavior::contiguous}};
  bool known = false;
  for (const auto& [name, b] : names)
    if (behavior == name) step.behavior = b, known = true;
  if (!known) n.at("behavior").refuse("\"" + behavior + "\" is not a split behavior");
  step.invert = n.at("invert").boolean();
  pattern.object();
  if (pattern.has("Regex")) {
    step.regex = std::make_shared<Regex>(pattern.at("Regex").str(), pattern.at("Regex"));
  } else if (pattern.has("String")) {
    // A literal: each character escaped, as Hugging Face's regex::escape does.
    std::string escaped;
    for (char c : pattern.at("String").str()) {
      if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) escaped += '\\';
      escaped += c;
    }
    step.regex = std::make_shared<Regex>(escaped, pattern.at("String"));
  } else {
    pattern.refuse("must be {\"Regex\": ...} or {\"String\": ...}");
  }
  return step;
}

void read_step(const Node& n, std::vector<PreTokenizer::Step>& steps) {
  const std::string type = n.type();
  if (type == "Sequence") {
    const Node list = n.at("pretokenizers");
    for (size_t i = 0; i < list.array().size(); ++i) read_step(list.at(i), steps);
  } else if (type == "Split") {
    steps.push_back(split_step(n));
  } else if (type == "Digits") {
    // Rust's char::is_numeric is the general category N, as Oniguruma's \p{N}: one digit per
    // piece, or runs of them (Contiguous).
    PreTokenizer::Step step;
    const bool individual = n.boolean_or("individual_digits", false);
    step.regex = std::make_shared<Regex>("\\p{N}", n);
    step.behavior = individual ? Behavior::isolated : Behavior::contiguous;
    steps.push_back(step);
  } else if (type == "ByteLevel") {
    PreTokenizer::Step step;
    step.kind = PreTokenizer::Step::Kind::byte_level;
    step.add_prefix_space = n.boolean_or("add_prefix_space", true);
    if (n.boolean_or("use_regex", true)) step.regex = std::make_shared<Regex>(gpt2_pattern, n);
    steps.push_back(step);
  } else {
    n.unsupported_type();
  }
}

}  // namespace

void PreTokenizer::apply(std::vector<std::string>& pieces) const {
  std::vector<std::string> next;
  std::vector<std::array<size_t, 3>> spans;
  for (const Step& step : steps) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.kind == Step::Kind::split) {
        split(piece, step, next, spans);
        continue;
      }
      // ByteLevel: a space before the piece if asked, GPT-2's split if asked, then each byte as
      // its character of the byte-level alphabet.
      if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') piece.insert(0, 1, ' ');
      const size_t first = next.size();
      if (step.regex) {
        Step isolated = step;
        isolated.behavior = Behavior::isolated;
        split(piece, isolated, next, spans);
      } else {
        next.push_back(std::move(piece));
      }
      for (size_t i = first; i < next.size(); ++i) {
        std::string mapped;
        mapped.reserve(next[i].size() * 2);
        for (unsigned char b : next[i]) mapped += byte_chars()[b];
        next[i] = std::move(mapped);
      }
    }
    pieces.swap(next);
  }
}

PreTokenizer read_pre_tokenizer(const Node& n) {
  PreTokenizer out;
  if (!n.null()) read_step(n, out.steps);
  return out;
}

}  // namespace lockstep::text::hf
