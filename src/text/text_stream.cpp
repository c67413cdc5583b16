// TextStream (include/lockstep/tokenizer.hpp): a generation's text through its tokenizer, as it
// settles. Apart from the Tokenizer so that a build without SentencePiece (the Arm cross build's
// text/no_tokenizer/tokenizer.cpp) has it too.
#include <algorithm>
#include <string>
#include <string_view>

#include "lockstep/error.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep {

namespace {

constexpr std::string_view replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stops)
    : tokenizer_(tokenizer), ids_(prompt.begin(), prompt.end()), stops_(std::move(stops)) {
  for (const std::string& s : stops_)
    if (s.empty()) throw Error(ErrorKind::invalid_argument, "a stop string must not be empty");
  prompt_text_ = settle(false);
}

std::string TextStream::settle(bool final) {
  const std::string now = tokenizer_.decode(std::span<const int32_t>(ids_).subspan(start_));
  // Text already given out changed (not seen with SentencePiece's decoding): wait for more.
  if (now.compare(0, before_.size(), before_) != 0) return {};
  const std::string_view tail = std::string_view(now).substr(before_.size());
  size_t settled = tail.size();
  if (!final)
    while (settled >= replacement.size() && tail.substr(settled - replacement.size(), replacement.size()) == replacement)
      settled -= replacement.size();
  if (settled <= given_) return {};
  std::string out(tail.substr(given_, settled - given_));
  given_ = settled;
  if (settled == tail.size()) {
    // All given out: the next window starts at read_, unless its ids alone decode to nothing (then
    // the first piece after them would lose its leading space), when it keeps its start.
    std::string from_read = tokenizer_.decode(std::span<const int32_t>(ids_).subspan(read_));
    if (!from_read.empty()) {
      start_ = read_;
      before_ = std::move(from_read);
    } else {
      before_ = now;
    }
    read_ = ids_.size();
    given_ = 0;
  }
  return out;
}

std::string TextStream::stop_cut(std::string out) {
  const size_t old = text_.size();
  text_ += out;
  if (stops_.empty() || out.empty()) return out;
  size_t end = std::string::npos;
  for (const std::string& s : stops_) {
    // A new match ends in the new text: it starts past old - s.size().
    const size_t from = old >= s.size() ? old - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) end = std::min(end, at + s.size());
  }
  if (end == std::string::npos) return out;
  stopped_ = true;
  text_.resize(end);
  out.resize(end - old);
  return out;
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  ids_.push_back(token);
  return stop_cut(settle(false));
}

std::string TextStream::finish() {
  if (stopped_) return {};
  return stop_cut(settle(true));
}

}  // namespace lockstep
