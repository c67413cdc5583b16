// A model's tokenizer: text <-> token ids, for models whose vocabulary is not the 256 bytes.
// A model directory names it in model.json's `tokenizer` field, {"type": "sentencepiece",
// "file": "tokenizer.model", "sha256": "<hex>"} or {"type": "huggingface", "file":
// "tokenizer.json", "sha256": "<hex>"} (docs/FORMAT.md, "The tokenizer").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

class Tokenizer {
 public:
  // The tokenizer of the model at `model_path` (as Model::load resolves it), or null when its
  // model.json names none. Refuses (Error naming the file) one that is missing, changed (SHA-256),
  // unreadable, or whose piece count is not the model's vocab_size (a tokenizer.json may hold
  // fewer: a padded embedding's extra ids are never produced by text and decode to nothing).
  static std::unique_ptr<Tokenizer> for_model(std::string_view model_path);
  // A SentencePiece model file.
  static std::unique_ptr<Tokenizer> sentencepiece(const std::string& path);
  // A Hugging Face tokenizer.json (byte-level BPE). Refuses (Error naming the file and the key,
  // e.g. `pre_tokenizer.pretokenizers[2].type "Metaspace" is not supported`) anything else.
  static std::unique_ptr<Tokenizer> hf_json(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids of `text`. add_special_tokens: what the file adds around a text, the one rule every
  // front end uses (SentencePiece: BOS before it; tokenizer.json: its post_processor, e.g. Llama
  // 3's <|begin_of_text|>). Special tokens' strings inside the text become their ids.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // The text of `ids` (special tokens decode to nothing; a character the ids leave unfinished is
  // U+FFFD; ids in the model's vocabulary past the tokenizer's decode to nothing).
  std::string decode(std::span<const int32_t> ids) const;
  int32_t bos() const;  // -1: none (tokenizer.json: the special token its post_processor puts first)
  int32_t eos() const;  // -1: none
  int32_t unk() const;  // -1: none
  int32_t size() const;
  const char* type() const;  // "sentencepiece" or "huggingface"
  // The file it was read from (for_model: the name in the model directory) and its SHA-256.
  const std::string& file() const;
  const std::string& sha256() const;

  struct Piece {
    std::string text;
    float score = 0.0f;
    int32_t type = 1;  // llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte
  };
  Piece piece(int32_t id) const;
  // How a single token shows on its own (the HTTP API's logprobs): a normal piece with its
  // spaces (U+2581) as ' ', a byte piece as "bytes:\xNN", a control or unknown piece as itself.
  std::string token_text(int32_t id) const;
  // The bytes a token adds to a generated text, as a grammar matches them (lockstep/grammar.hpp):
  // a piece with SentencePiece's U+2581 as ' ', a byte piece or a byte-level BPE token as its
  // bytes (possibly part of a character), a non-special added token as its text; a control,
  // special or unknown token, or an id past the tokenizer, as nothing.
  std::string token_bytes(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The text of a generation as it comes, through a tokenizer, given out only once no later token
// can change it. A token's text depends on what precedes it (SentencePiece drops the leading
// space of the text's first piece only; byte pieces join into one UTF-8 character across
// tokens), so the text is that of the prompt and generated ids decoded together: each push
// decodes a window of the latest ids (from a point where the text before it is settled, so the
// window's decoding continues the whole one's) and gives out its new text less any trailing
// U+FFFD, which a later byte piece may still turn into a character. Every front end (`lockstep
// generate`, the HTTP API, Python's generate()) gives this text, so they agree; its pieces joined
// are the generated text, whatever the tokens.
class TextStream {
 public:
  // `prompt`: the ids before the generated ones. `stops`: the generated text ends right after
  // the first of these to end in it (it keeps the stop string, as `generate --stop` does).
  TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stops = {});
  // The prompt's text, less a trailing unfinished character (which comes with the generated text).
  const std::string& prompt_text() const { return prompt_text_; }
  // A generated token: the text it settles (possibly empty); nothing once stopped().
  std::string push(int32_t token);
  // The end: the text still held back (an unfinished character, as U+FFFD); nothing if stopped().
  std::string finish();
  // A stop string ended the text.
  bool stopped() const { return stopped_; }
  // The generated text given out so far.
  const std::string& text() const { return text_; }

 private:
  std::string settle(bool final);
  std::string stop_cut(std::string out);

  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  std::vector<std::string> stops_;
  size_t start_ = 0;    // the window: ids_[start_:]
  size_t read_ = 0;     // ids_[start_:read_] decode to before_, all of it given out (or the prompt's)
  std::string before_;  // ids_[start_:] decode to before_ + the text of ids_[read_:]
  size_t given_ = 0;    // how much of the text of ids_[read_:] is given out
  std::string prompt_text_, text_;
  bool stopped_ = false;
};

}  // namespace lockstep
