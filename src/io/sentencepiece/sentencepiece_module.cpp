// libomni_sentencepiece: SentencePiece behind a small C interface, loaded by
// io/tokenizer.cpp with dlopen (Note [SentencePiece in its own module]).
// Nothing here may throw across the interface: every failure is a return
// value plus a message.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#define OMNI_SPM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
void copy_error(const std::string& message, char* error, std::size_t error_size) {
  if (!error || error_size == 0) return;
  const auto n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

const sentencepiece::SentencePieceProcessor& processor(const void* handle) {
  return *static_cast<const sentencepiece::SentencePieceProcessor*>(handle);
}
}  // namespace

// Bumped whenever a signature below changes.
OMNI_SPM_EXPORT int omni_spm_abi_version() {
  return 1;
}

// A loaded model, or null with the reason in `error`.
OMNI_SPM_EXPORT void* omni_spm_load(const char* path, char* error, std::size_t error_size) {
  try {
    auto* p = new sentencepiece::SentencePieceProcessor();
    const auto status = p->Load(path);
    if (!status.ok()) {
      copy_error(status.ToString(), error, error_size);
      delete p;
      return nullptr;
    }
    return p;
  } catch (const std::exception& e) {
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown error", error, error_size);
  }
  return nullptr;
}

OMNI_SPM_EXPORT void omni_spm_free(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

OMNI_SPM_EXPORT int omni_spm_piece_size(const void* handle) {
  return processor(handle).GetPieceSize();
}
OMNI_SPM_EXPORT int omni_spm_eos_id(const void* handle) {
  return processor(handle).eos_id();
}
OMNI_SPM_EXPORT int omni_spm_pad_id(const void* handle) {
  return processor(handle).pad_id();
}

// The id of exactly `piece`, or -1 when the model does not hold it.
OMNI_SPM_EXPORT int omni_spm_piece_id(const void* handle, const char* piece) {
  const auto& p = processor(handle);
  const int id = p.PieceToId(piece);
  return id >= 0 && id < p.GetPieceSize() && p.IdToPiece(id) == piece ? id : -1;
}

// Encodes `text` (UTF-8, `length` bytes) and hands the ids to `sink` once.
// Returns 0, or -1 with the reason in `error`.
OMNI_SPM_EXPORT int omni_spm_encode(const void* handle, const char* text, std::size_t length,
                                    void (*sink)(void* context, const int* ids, std::size_t n),
                                    void* context, char* error, std::size_t error_size) {
  try {
    std::vector<int> ids;
    const auto status = processor(handle).Encode(std::string(text, length), &ids);
    if (!status.ok()) {
      copy_error(status.ToString(), error, error_size);
      return -1;
    }
    sink(context, ids.data(), ids.size());
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown error", error, error_size);
  }
  return -1;
}
