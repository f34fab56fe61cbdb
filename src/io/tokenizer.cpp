#include "omni/io/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "omni/error.h"

#if OMNI_WITH_TOKENIZER
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#endif

namespace omni::io {

#if OMNI_WITH_TOKENIZER

// Note [SentencePiece in its own module]
// Debian's libsentencepiece carries its own copy of protobuf 3.14 and exports
// its symbols; Debian's LibTorch loads the system libprotobuf (3.21). Linked
// into one program, whichever loads first serves both, and the program dies
// at start-up (a crash in protobuf's static initialisers, or protobuf's
// version check aborting). So SentencePiece lives in a small module,
// libomni_sentencepiece.so, that this file opens with dlopen: RTLD_LOCAL keeps
// its symbols out of everyone else's way, RTLD_DEEPBIND makes it (and
// libsentencepiece under it) bind to its own protobuf first. The module is
// looked up in $OMNI_SENTENCEPIECE_MODULE, next to the running program and in
// its ../lib, then where the build put it. It is opened once per process and
// never closed.

namespace {

constexpr int kModuleAbiVersion = 1;
constexpr std::size_t kErrorBytes = 1024;

struct SentencePieceModule {
  int (*abi_version)() = nullptr;
  void* (*load)(const char*, char*, std::size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*piece_size)(const void*) = nullptr;
  int (*eos_id)(const void*) = nullptr;
  int (*pad_id)(const void*) = nullptr;
  int (*piece_id)(const void*, const char*) = nullptr;
  int (*encode)(const void*, const char*, std::size_t, void (*)(void*, const int*, std::size_t),
                void*, char*, std::size_t) = nullptr;
};

std::vector<std::string> module_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("OMNI_SENTENCEPIECE_MODULE"); env && *env) out.push_back(env);
  char exe[PATH_MAX];
  const auto n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    const auto dir = std::filesystem::path(std::string(exe, n)).parent_path();
    out.push_back((dir / "libomni_sentencepiece.so").string());
    out.push_back((dir / ".." / "lib" / "libomni_sentencepiece.so").string());
  }
#ifdef OMNI_SENTENCEPIECE_MODULE
  out.push_back(OMNI_SENTENCEPIECE_MODULE);
#endif
  return out;
}

template <typename Fn>
void bind(void* handle, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
}

// The module, or the reason it could not be opened.
struct ModuleState {
  SentencePieceModule module;
  std::string error;  // empty when usable
};

const ModuleState& module_state() {
  static const ModuleState state = [] {
    ModuleState s;
    std::string tried;
    void* handle = nullptr;
    for (const auto& path : module_candidates()) {
      if (!std::filesystem::exists(path)) continue;
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle) break;
      tried += "; " + path + ": " + ::dlerror();
    }
    if (!handle) {
      s.error = "libomni_sentencepiece.so not found (set OMNI_SENTENCEPIECE_MODULE)" + tried;
      return s;
    }
    std::string missing;
    auto& m = s.module;
    bind(handle, "omni_spm_abi_version", m.abi_version, missing);
    bind(handle, "omni_spm_load", m.load, missing);
    bind(handle, "omni_spm_free", m.free, missing);
    bind(handle, "omni_spm_piece_size", m.piece_size, missing);
    bind(handle, "omni_spm_eos_id", m.eos_id, missing);
    bind(handle, "omni_spm_pad_id", m.pad_id, missing);
    bind(handle, "omni_spm_piece_id", m.piece_id, missing);
    bind(handle, "omni_spm_encode", m.encode, missing);
    if (!missing.empty())
      s.error = "libomni_sentencepiece.so lacks " + missing;
    else if (m.abi_version() != kModuleAbiVersion)
      s.error = "libomni_sentencepiece.so has interface version " +
                std::to_string(m.abi_version()) + ", expected " + std::to_string(kModuleAbiVersion);
    return s;
  }();
  return state;
}

const SentencePieceModule& module() {
  const auto& s = module_state();
  OMNI_CHECK(s.error.empty(), ConfigError, "SentencePiece tokenizer unavailable: ", s.error);
  return s.module;
}

}  // namespace

struct Tokenizer::Model {
  void* processor = nullptr;
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() {
    if (processor) module_state().module.free(processor);
  }
};

bool Tokenizer::available() {
  return module_state().error.empty();
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& spiece_model) {
  const std::string label = spiece_model.string();
  OMNI_CHECK(std::filesystem::is_regular_file(spiece_model), FormatError, label,
             ": SentencePiece model not found");
  const auto& m = module();
  auto model = std::make_shared<Model>();
  char error[kErrorBytes] = {};
  model->processor = m.load(label.c_str(), error, sizeof(error));
  OMNI_CHECK(model->processor != nullptr, FormatError, label,
             ": not a readable SentencePiece model: ", error);
  Tokenizer t;
  t.source_ = label;
  t.vocab_size_ = m.piece_size(model->processor);
  // The model's own setting, else the piece by name (what transformers' T5Tokenizer looks up).
  const auto special = [&](int configured, const char* piece) -> std::int64_t {
    return configured >= 0 ? configured : m.piece_id(model->processor, piece);
  };
  t.eos_id_ = special(m.eos_id(model->processor), "</s>");
  t.pad_id_ = special(m.pad_id(model->processor), "<pad>");
  OMNI_CHECK(t.eos_id_ >= 0, FormatError, label, ": the model defines no EOS piece ('</s>')");
  OMNI_CHECK(t.pad_id_ >= 0, FormatError, label, ": the model defines no PAD piece ('<pad>')");
  t.model_ = std::move(model);
  return t;
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text) const {
  OMNI_INTERNAL_ASSERT(model_ != nullptr, "encode on a tokenizer that was never loaded");
  std::vector<std::int64_t> ids;
  char error[kErrorBytes] = {};
  const auto sink = [](void* context, const int* data, std::size_t n) {
    static_cast<std::vector<std::int64_t>*>(context)->assign(data, data + n);
  };
  const int rc = module().encode(model_->processor, text.data(), text.size(), sink, &ids, error,
                                 sizeof(error));
  OMNI_CHECK(rc == 0, InvalidRequest, source_, ": cannot tokenize the prompt: ", error);
  return ids;
}

#else  // !OMNI_WITH_TOKENIZER

struct Tokenizer::Model {};

bool Tokenizer::available() {
  return false;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& spiece_model) {
  throw ConfigError(
      detail::concat(spiece_model.string(),
                     ": this build of omni has no SentencePiece tokenizer (configure with "
                     "-DOMNI_WITH_TOKENIZER=ON); text prompts cannot be encoded"));
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view) const {
  OMNI_INTERNAL_ASSERT(false, "encode on a tokenizer that cannot exist in this build");
  return {};
}

#endif

TokenizedBatch Tokenizer::tokenize(const std::vector<std::string>& texts,
                                   std::int64_t max_length) const {
  OMNI_CHECK(max_length >= 1, InvalidRequest, "max_sequence_length must be at least 1, got ",
             max_length);
  const auto batch = static_cast<std::int64_t>(texts.size());
  TokenizedBatch out;
  out.input_ids = torch::full({batch, max_length}, pad_id_, torch::kInt64);
  out.attention_mask = torch::zeros({batch, max_length}, torch::kInt64);
  auto ids = out.input_ids.accessor<std::int64_t, 2>();
  auto mask = out.attention_mask.accessor<std::int64_t, 2>();
  for (std::int64_t row = 0; row < batch; ++row) {
    auto pieces = encode(texts[row]);
    // truncation=True with add_special_tokens: the pieces give way to EOS.
    pieces.resize(std::min<std::size_t>(pieces.size(), max_length - 1));
    pieces.push_back(eos_id_);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      ids[row][i] = pieces[i];
      mask[row][i] = 1;
    }
    out.lengths.push_back(static_cast<std::int64_t>(pieces.size()));
  }
  return out;
}

}  // namespace omni::io
