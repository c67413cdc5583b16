// A model's tokenizer: text <-> token ids, for models whose vocabulary is not the 256 bytes.
// A model directory names it in model.json's `tokenizer` field, {"type": "sentencepiece",
// "file": "tokenizer.model", "sha256": "<hex>"} (docs/FORMAT.md, "The tokenizer").
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
  // model.json names none. Refuses (Error naming the file) one that is missing, changed (SHA-256)
  // or unreadable.
  static std::unique_ptr<Tokenizer> for_model(std::string_view model_path);
  // A SentencePiece model file.
  static std::unique_ptr<Tokenizer> sentencepiece(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids of `text`, without BOS.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  int32_t bos() const;  // -1: none
  int32_t eos() const;  // -1: none
  int32_t unk() const;  // -1: none
  int32_t size() const;

  struct Piece {
    std::string text;
    float score = 0.0f;
    int32_t type = 1;  // llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte
  };
  Piece piece(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
