// What one completion's answer may take of the server's memory (docs/HTTP.md, "Limits and
// timeouts"; docs/PROTOCOL.md, "Memory"). A non-streamed answer is held until its last token,
// so its estimated size, choices x tokens x bytes a token (more with every logprob asked), must
// stay within max_answer_bytes; a streamed one holds only what is in flight, but each choice's
// first event carries its echoed prompt (with its scores), so the echo counts there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "serve/http_api.hpp"

namespace lockstep::serve {

inline constexpr uint64_t max_answer_bytes = uint64_t{64} << 20;
// An answer this large gives the allocator's free pages back once it is written (glibc keeps
// them otherwise).
inline constexpr size_t trim_after_bytes = size_t{1} << 20;

// How long a token's text can be in logprobs, as JSON (quotes and escapes included): a byte
// model's "bytes:\\xNN" (13), a token id's "<1048575>" (11), a tokenizer's piece taken as at most
// 16 characters of 3 bytes (48; an estimate: pieces are rarely longer).
inline constexpr uint64_t byte_token_text = 13, id_token_text = 11, piece_token_text = 48;

// What the estimate depends on.
struct AnswerShape {
  uint64_t prompts = 0, prompt_tokens = 0;  // prompt_tokens: over every prompt
  uint64_t n = 1, max_tokens = 0;
  int32_t logprobs = -1;
  bool echo = false, stream = false;
  uint64_t token_text = byte_token_text;
};
AnswerShape answer_shape(const CompletionRequest& r, uint64_t token_text);

// Each choice's echoed prompt tokens (echo) and, not streamed, its max_tokens, each at
//   4 + 2 T bytes (its text, id and offset) + with logprobs N: (N + 1) x (64 + 5 T)
// (a log-probability and the token's text for the token and each of its top N, as completions'
// four arrays or chat's content entries give them, chat's with the token's bytes), T the longest
// token text.
uint64_t answer_bytes(const AnswerShape& s);

// Throws ApiError 400 when answer_bytes passes max_answer_bytes, naming in `param` the first
// field (max_tokens, n, logprobs, echo) whose lowering alone brings it within (else the one that
// brings it lowest), and in the message the estimate and how many max_tokens would fit.
void check_answer_budget(const CompletionRequest& r, uint64_t token_text);

}  // namespace lockstep::serve
