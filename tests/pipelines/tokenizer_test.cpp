// io::Tokenizer (SentencePiece, T5 conventions) on a tiny model trained here
// with spm_train. It lives with the pipeline tests, whose prompts it encodes.
#include "omni/io/tokenizer.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sstream>

#include "omni/error.h"
#include "pipelines/tiny_wan.h"

using omni::io::Tokenizer;
namespace fs = std::filesystem;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace tokenizer_test {

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!Tokenizer::available() || !tiny_wan::have_spm_train()) return;
    dir_ = new fs::path(tiny_wan::temp_dir("tokenizer"));
    model_ = new fs::path(tiny_wan::train_spiece(*dir_));
  }
  static void TearDownTestSuite() {
    if (dir_) fs::remove_all(*dir_);
    delete dir_;
    delete model_;
    dir_ = model_ = nullptr;
  }
  void SetUp() override {
    if (!Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
    if (!model_) GTEST_SKIP() << "spm_train (Debian: sentencepiece) not found";
  }
  static inline fs::path* dir_ = nullptr;
  static inline fs::path* model_ = nullptr;
};

// The ids SentencePiece's own command-line encoder gives.
std::vector<std::int64_t> spm_encode(const fs::path& model, const std::string& text) {
  const std::string command = "printf '%s\\n' '" + text + "' | spm_encode --model='" +
                              model.string() + "' --output_format=id";
  std::vector<std::int64_t> ids;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return ids;
  std::array<char, 4096> buffer{};
  std::string out;
  while (std::fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  pclose(pipe);
  std::istringstream in(out);
  for (std::int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

}  // namespace tokenizer_test
using namespace tokenizer_test;

TEST_F(TokenizerTest, SpecialIdsAreT5s) {
  const auto t = Tokenizer::from_file(*model_);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_GT(t.vocab_size(), 3);
  EXPECT_LE(t.vocab_size(), 100) << "must fit the tiny UMT5's vocabulary";
}

TEST_F(TokenizerTest, EncodeMatchesSentencePiecesOwnEncoder) {
  const auto t = Tokenizer::from_file(*model_);
  for (const std::string text : {"a red circle moving right", "the cat sat", "zebra quux"}) {
    const auto ids = t.encode(text);
    EXPECT_FALSE(ids.empty()) << text;
    EXPECT_EQ(ids, spm_encode(*model_, text)) << text;
    for (auto id : ids) EXPECT_NE(id, t.eos_id()) << "no special tokens in encode()";
  }
}

TEST_F(TokenizerTest, TokenizeAppendsEosAndPads) {
  const auto t = Tokenizer::from_file(*model_);
  const auto pieces = t.encode("a red circle");
  const std::int64_t max_length = static_cast<std::int64_t>(pieces.size()) + 4;
  const auto batch = t.tokenize({"a red circle", ""}, max_length);
  ASSERT_EQ(batch.input_ids.sizes(), (std::vector<std::int64_t>{2, max_length}));
  EXPECT_EQ(batch.input_ids.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.attention_mask.scalar_type(), torch::kInt64);
  const auto n = static_cast<std::int64_t>(pieces.size());
  ASSERT_EQ(batch.lengths, (std::vector<std::int64_t>{n + 1, 1}));
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(batch.input_ids[0][i].item<std::int64_t>(), pieces[i]);
  EXPECT_EQ(batch.input_ids[0][n].item<std::int64_t>(), 1);
  for (std::int64_t i = n + 1; i < max_length; ++i)
    EXPECT_EQ(batch.input_ids[0][i].item<std::int64_t>(), 0);
  EXPECT_EQ(batch.input_ids[1][0].item<std::int64_t>(), 1) << "an empty prompt is just EOS";
  EXPECT_EQ(batch.attention_mask.sum(1)[0].item<std::int64_t>(), n + 1);
  EXPECT_EQ(batch.attention_mask.sum(1)[1].item<std::int64_t>(), 1);
  EXPECT_TRUE(torch::equal(batch.attention_mask, (batch.input_ids != 0).to(torch::kInt64)));
}

TEST_F(TokenizerTest, TruncationKeepsEos) {
  const auto t = Tokenizer::from_file(*model_);
  const auto pieces = t.encode("a green triangle spins slowly over a white floor");
  ASSERT_GT(pieces.size(), 4u);
  const auto batch = t.tokenize({"a green triangle spins slowly over a white floor"}, 4);
  EXPECT_EQ(batch.lengths, (std::vector<std::int64_t>{4}));
  const std::vector<std::int64_t> expected = {pieces[0], pieces[1], pieces[2], 1};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(batch.input_ids[0][i].item<std::int64_t>(), expected[i]);
  EXPECT_THROW(t.tokenize({"x"}, 0), omni::InvalidRequest);
}

TEST_F(TokenizerTest, BadFilesAreFormatErrors) {
  EXPECT_THROW(Tokenizer::from_file(*dir_ / "missing.model"), omni::FormatError);
  const auto garbage = *dir_ / "garbage.model";
  std::ofstream(garbage) << "this is not a protobuf";
  try {
    Tokenizer::from_file(garbage);
    ADD_FAILURE() << "garbage loaded";
  } catch (const omni::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.model"), std::string::npos) << e.what();
  }
}
