#include "omni/device/device.h"

#include <cmath>
#include <cstdio>
#include <iostream>

#include "device/copy_back.h"
#include "device/cpu_device.h"
#include "device/sim_device.h"
#include "omni/error.h"
#if OMNI_WITH_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace omni::device {

DeviceSpec DeviceSpec::parse(std::string_view text) {
  DeviceSpec spec;
  if (text == "auto") return spec;
  if (text == "cpu") {
    spec.kind = DeviceKind::cpu;
    return spec;
  }
  if (text == "sim") {
    spec.kind = DeviceKind::sim;
    return spec;
  }
  if (text == "cuda") {
    spec.kind = DeviceKind::cuda;
    return spec;
  }
  if (text.starts_with("cuda:")) {
    const auto digits = text.substr(5);
    bool ok = !digits.empty() && digits.size() <= 3;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      spec.kind = DeviceKind::cuda;
      spec.index = std::stoi(std::string(digits));
      return spec;
    }
  }
  throw ConfigError(
      detail::concat("unknown device '", text, "': expected auto, cpu, sim, cuda or cuda:N"));
}

std::string DeviceSpec::to_string() const {
  switch (kind) {
    case DeviceKind::automatic:
      return "auto";
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::sim:
      return "sim";
    case DeviceKind::cuda:
      return "cuda:" + std::to_string(index);
  }
  return "?";
}

bool cuda_available() {
#if OMNI_WITH_CUDA
  return cuda::cuda_device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Device> make_device(const DeviceSpec& spec, bool offload_enabled,
                                    const DeviceOptions& options) {
  DeviceSpec resolved = spec;
  if (resolved.kind == DeviceKind::automatic) {
    if (cuda_available())
      resolved = DeviceSpec{DeviceKind::cuda, 0};
    else
      resolved.kind = offload_enabled ? DeviceKind::sim : DeviceKind::cpu;
  }
  switch (resolved.kind) {
    case DeviceKind::cpu:
      return std::make_unique<CpuDevice>();
    case DeviceKind::sim:
      return std::make_unique<SimDevice>(options);
    case DeviceKind::cuda:
#if OMNI_WITH_CUDA
      return cuda::make_cuda_device(resolved.index, options);
#else
      throw ConfigError(detail::concat(
          "device '", resolved.to_string(),
          "' is not available: this build has no CUDA support (configure with -DOMNI_WITH_CUDA=ON "
          "against a CUDA LibTorch); use --device sim or cpu"));
#endif
    case DeviceKind::automatic:
      break;
  }
  OMNI_INTERNAL_ASSERT(false, "unresolved device kind");
}

std::uint64_t parse_byte_size(std::string_view text) {
  std::string s(text);
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (...) {
    throw ConfigError(detail::concat("invalid byte size '", text, "'"));
  }
  std::string unit = s.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  OMNI_CHECK(scale > 0 && value >= 0 && std::isfinite(value), ConfigError, "invalid byte size '",
             text, "': use a number with an optional unit B, KiB, MiB, GiB, KB, MB or GB");
  // 2^64: past it the conversion below is undefined (L6 of the GPU review).
  OMNI_CHECK(value * scale < 18446744073709551616.0, ConfigError, "byte size '", text,
             "' is too large: at most 16 EiB (2^64 bytes)");
  return static_cast<std::uint64_t>(value * scale);
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

// Note [Unusable placeholders]
// On the sim device compute runs on the host, so an offloaded parameter that
// still pointed at a host tensor would silently keep working and hide
// residency bugs. Instead it points at a tensor of the same shape and dtype
// whose storage is empty and whose dispatch key (PrivateUse1) has no kernels:
// every operator that reads it throws, sizes() still work. set_data() refuses
// such a tensor, so rebinding uses TensorImpl::shallow_copy_from (see
// offload/rebind.h).
torch::Tensor make_unusable_placeholder(const torch::Tensor& like) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, c10::Device(c10::DeviceType::PrivateUse1, 0)), nullptr,
                       false);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_contiguous(like.sizes());
  return t;
}

bool is_unusable_placeholder(const torch::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

CopyBack& copy_back(Device& device) {
  auto* seam = dynamic_cast<CopyBack*>(&device);
  OMNI_INTERNAL_ASSERT(seam != nullptr, "device ", device.name(), " has no bench seam (CopyBack)");
  return *seam;
}

}  // namespace omni::device
