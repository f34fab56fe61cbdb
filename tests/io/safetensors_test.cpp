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
  auto file = SafetensorsFile::open(fs::path(OMNI_TEST_DATA) / "wan/umt5_encoder/weights.safetensors");
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
      {"{\"w\xff\":{}}", 0, "invalid JSON"},
  };
  for (const auto& c : cases) {
    auto path = temp_path("bad.safetensors");
    write_raw(path, c.header, c.data);
    auto msg = error_of(path);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " → " << msg;
  }
}
