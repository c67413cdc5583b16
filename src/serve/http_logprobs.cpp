// The prompt's own scores of an echo with logprobs (OpenAI's legacy completions; lm-evaluation-
// harness scores a continuation so): each prompt token with the offset of its text in the echoed
// prompt, and its log-probability and top N where it has them. Logprobs are JSON text
// (logprobs_text.hpp), never a tree.
#include <algorithm>

#include "serve/http_session.hpp"

namespace lockstep::serve {

void HttpSession::add_prompt_logprobs(LogprobsText& out, const Choice& c, const std::vector<TokenLogprobs>& scores) const {
  const Tokenizer* tokenizer = context_.tokenizer.get();
  const std::vector<int32_t>& prompt = completion_.prompts[c.prompt];
  const std::string& prompt_text = prompt_texts_[c.prompt];
  const TokenNames names = token_names();
  // Where each prompt token's text starts in the echoed text: a byte each, or as the tokenizer's
  // text of the prompt settles token by token (TextStream), within the echoed prompt_text.
  std::optional<TextStream> text;
  if (tokenizer) text.emplace(*tokenizer, std::span<const int32_t>{});
  size_t at = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    size_t offset = 0;
    if (bytes_model()) {
      offset = i;
    } else if (text) {
      offset = std::min(at, prompt_text.size());
      try {
        at += text->push(prompt[i]).size();
      } catch (const std::exception&) {
      }
    }
    const bool scored = i >= c.unscored && i - c.unscored < scores.size();
    out.add(names, prompt[i], scored ? &scores[i - c.unscored] : nullptr, offset);
  }
}

}  // namespace lockstep::serve
