// Tokenizer: a SentencePiece model (`tokenizer/spiece.model`) used with the
// conventions of transformers' T5 tokenizers, which the Wan pipelines call as
// tokenizer(texts, padding="max_length", max_length=L, truncation=True,
// add_special_tokens=True, return_attention_mask=True):
//
//   auto tokenizer = omni::io::Tokenizer::from_file(dir / "tokenizer" / "spiece.model");
//   auto batch = tokenizer.tokenize({"a red circle", ""}, 512);
//   // batch.input_ids  int64 [2, 512]: pieces, then EOS (id 1), then PAD (id 0)
//   // batch.attention_mask int64 [2, 512]: 1 for pieces and EOS, 0 for padding
//   // batch.lengths   {n0 + 1, 1}: real tokens per row, EOS included
//
// Differences from transformers' T5TokenizerFast, which converts the same
// model: text is encoded with SentencePiece's own normaliser (what the slow
// T5Tokenizer does); added special tokens (`<extra_id_N>`) written in the
// text are not recognised as single tokens.
//
// SentencePiece is optional (CMake option OMNI_WITH_TOKENIZER) and runs in a
// module opened at first use (Note [SentencePiece in its own module] in
// tokenizer.cpp); without it, loading a model is a ConfigError that says so.
//
// Threading: a loaded Tokenizer is immutable; tokenize() may be called from
// several threads at once. Copies share the loaded model.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace omni::io {

struct TokenizedBatch {
  torch::Tensor input_ids;            // int64 [B, max_length]
  torch::Tensor attention_mask;       // int64 [B, max_length]
  std::vector<std::int64_t> lengths;  // real tokens per row (EOS included), ≤ max_length
};

class Tokenizer {
 public:
  // Loads a SentencePiece model file. FormatError naming the file when it
  // cannot be read or parsed, or when it defines no EOS or PAD piece (T5
  // models define `</s>` and `<pad>`); ConfigError when omni was built
  // without OMNI_WITH_TOKENIZER or its SentencePiece module cannot be opened.
  static Tokenizer from_file(const std::filesystem::path& spiece_model);

  // True when this build can load SentencePiece models (the module opens).
  static bool available();

  // The ids of `text`'s pieces, without special tokens.
  std::vector<std::int64_t> encode(std::string_view text) const;

  // T5 conventions: each text becomes its pieces truncated to max_length − 1,
  // then EOS, then PAD up to max_length. InvalidRequest when max_length < 1.
  TokenizedBatch tokenize(const std::vector<std::string>& texts, std::int64_t max_length) const;

  std::int64_t eos_id() const { return eos_id_; }
  std::int64_t pad_id() const { return pad_id_; }
  // Number of pieces in the model (ids are below it).
  std::int64_t vocab_size() const { return vocab_size_; }
  const std::string& source() const { return source_; }

 private:
  struct Model;  // the SentencePiece processor (kept out of this header)
  Tokenizer() = default;
  std::shared_ptr<const Model> model_;
  std::int64_t eos_id_ = 1;
  std::int64_t pad_id_ = 0;
  std::int64_t vocab_size_ = 0;
  std::string source_;
};

}  // namespace omni::io
