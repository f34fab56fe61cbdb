#include "omni/io/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "omni/error.h"

namespace fs = std::filesystem;
using omni::FormatError;
using namespace omni::io;

namespace {

fs::path temp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("omni_io_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write_raw(const fs::path& path, const std::string& header, std::size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
}

std::string error_of(const fs::path& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Safetensors, ReadsFixtureWithExactKeys) {
  auto file =
      SafetensorsFile::open(fs::path(OMNI_TEST_DATA) / "wan/umt5_encoder/weights.safetensors");
  EXPECT_EQ(file->tensors().size(), 23u);
  auto shared = file->view("shared.weight");
  EXPECT_EQ(shared.sizes(), (std::vector<int64_t>{100, 32}));
  EXPECT_EQ(shared.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(shared, file->view("encoder.embed_tokens.weight")));
}

TEST(Safetensors, RoundTripKeepsDtypesValuesAndOrder) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"b.f32", torch::randn({3, 5})},
      {"a.bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"c.f16", torch::randn({2, 2, 2}).to(torch::kFloat16)},
      {"d.i64", torch::arange(6, torch::kInt64).reshape({2, 3})},
      {"e.empty", torch::empty({0, 4})},
  };
  auto path = temp_path("roundtrip.safetensors");
  save_safetensors(path, tensors, {{"format", "pt"}});
  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  EXPECT_EQ(file->header().metadata.at("format"), "pt");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file->tensors()[i].name, tensors[i].first) << "data order must follow input order";
    auto back = file->view(tensors[i].first);
    EXPECT_EQ(back.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(back, tensors[i].second)) << tensors[i].first;
  }
}

// Views alias a private copy-on-write mapping: a tensor changed in place
// (weights reloaded after offload is disabled, L5 of the GPU review) changes
// this process's copy, with no SIGSEGV, and the file stays as written.
TEST(Safetensors, WritingToAViewChangesOnlyThisProcesssCopy) {
  const auto original = torch::arange(1024, torch::kFloat32);
  auto path = temp_path("cow.safetensors");
  save_safetensors(path, {{"w", original}});
  auto file = SafetensorsFile::open(path);
  auto view = file->view("w");
  view.add_(1);
  EXPECT_TRUE(torch::equal(view, original + 1));
  EXPECT_TRUE(torch::equal(file->view("w"), original + 1)) << "the same mapping";
  EXPECT_TRUE(torch::equal(SafetensorsFile::open(path)->view("w"), original))
      << "the file is unchanged";
  EXPECT_TRUE(torch::equal(load_safetensors(path).at(0).second, original));
}

TEST(Safetensors, RejectsTruncatedFile) {
  auto path = temp_path("truncated.safetensors");
  save_safetensors(path, {{"w", torch::randn({16, 16})}});
  fs::resize_file(path, fs::file_size(path) - 10);
  auto msg = error_of(path);
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("past the data section"), std::string::npos) << msg;
}

TEST(Safetensors, RejectsHeaderLengthBeyondFile) {
  auto path = temp_path("hugeheader.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    std::uint64_t n = 1000;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << "{}";
  }
  auto msg = error_of(path);
  EXPECT_NE(msg.find("runs past the end of the file"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
}

TEST(Safetensors, RejectsBadHeaders) {
  struct Case {
    std::string header;
    std::size_t data;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{not json", 0, "invalid JSON"},
      {R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1, "unknown dtype 'Q4'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "needs 8"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
       8, "overlaps"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "reversed"},
      {"{\"w\xff\":{}}", 0, "not valid UTF-8"},
  };
  for (const auto& c : cases) {
    auto path = temp_path("bad.safetensors");
    write_raw(path, c.header, c.data);
    auto msg = error_of(path);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " → " << msg;
  }
}

// Every rejection of the hostile-input list names the file, and the tensor
// when one is at fault; the header is parsed from the file and from memory.
TEST(Safetensors, RejectionsNameTheFileAndTheTensor) {
  struct Case {
    const char* what;
    std::string header;
    std::size_t data;
    std::string expect;
    std::string tensor;  // empty: no tensor is at fault
  };
  const std::vector<Case> cases = {
      {"offsets out of range", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
       "run past the data section (8 bytes)", "w"},
      {"overlapping",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlaps tensor 'a'", "b"},
      {"byte size mismatch", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", 4,
       "holds 4 bytes but BF16 × shape needs 6", "w"},
      {"unknown dtype", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2,
       "unknown dtype 'F8_E4M3'", "w"},
      {"duplicate name",
       R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
       2, "appears twice", "w"},
      {"duplicate field", R"({"w":{"dtype":"U8","shape":[1],"dtype":"F32","data_offsets":[0,1]}})",
       1, "field 'dtype' appears twice", "w"},
      {"non-UTF-8 name", "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       "not valid UTF-8 at byte 11 (after '{\"w')", ""},
      {"non-UTF-8 overlong",
       "{\"w\":{\"dtype\":\"U8\xc0\xae\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       "not valid UTF-8 at byte 25 (after '{\"w\":{\"dtype\":\"U8')", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto path = temp_path("hostile.safetensors");
    write_raw(path, c.header, c.data);
    const auto msg = error_of(path);
    EXPECT_NE(msg.find(path.string() + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    if (!c.tensor.empty())
      EXPECT_NE(msg.find("tensor '" + c.tensor + "'"), std::string::npos) << msg;
    // read_safetensors_header (omni inspect) rejects it the same way.
    try {
      read_safetensors_header(path);
      ADD_FAILURE() << "read_safetensors_header accepted it";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  }
}

TEST(Safetensors, RejectsAbsurdHeaderLengthWithoutAllocating) {
  auto path = temp_path("absurd.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = 1ull << 62;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << "{}";
  }
  const auto msg = error_of(path);
  EXPECT_NE(msg.find(path.string() + ": header length 4611686018427387904 exceeds the limit"),
            std::string::npos)
      << msg;
  try {
    read_safetensors_header(path);
    ADD_FAILURE() << "read_safetensors_header accepted it";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
}

// Found by fuzz/safetensors_fuzz.cpp: a zero in the shape made the byte size
// 0 and passed every check, but LibTorch overflowed computing the other
// dimensions' strides and crashed (SEGV) on the view's first use.
TEST(Safetensors, RejectsZeroSizedShapeWhoseStridesOverflow) {
  auto path = temp_path("strides.safetensors");
  write_raw(path,
            R"({"w":{"dtype":"F32","shape":[0,4611686018423693951,4611686018427387903],)"
            R"("data_offsets":[0,0]}})",
            0);
  const auto msg = error_of(path);
  EXPECT_NE(msg.find(path.string() + ": tensor 'w': shape overflows"), std::string::npos) << msg;

  // A zero-sized tensor whose strides fit is fine.
  write_raw(path, R"({"w":{"dtype":"F32","shape":[0,1048576,4096],"data_offsets":[0,0]}})", 0);
  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->view("w").clone().sizes(), (std::vector<std::int64_t>{0, 1048576, 4096}));
}
