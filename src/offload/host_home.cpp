#include "omni/offload/host_home.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>
#include <set>
#include <thread>
#include <tuple>

#include "omni/error.h"

namespace omni::offload {

namespace {
constexpr std::size_t kMaxCopyThreads = 8;  // a memory bus saturates before this
std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

bool has_own_tensors(torch::nn::Module& module) {
  return !module.named_parameters(/*recurse=*/false).is_empty() ||
         !module.named_buffers(/*recurse=*/false).is_empty();
}

bool is_index(const std::string& name) {
  return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

// Note [Block groups]
// A component's tensors are grouped by the block they belong to, so that
// offload can move a component block by block. A group is the shallowest
// module on a tensor's path that has tensors of its own or is an element of
// a list (blocks.7, encoder.block.23); modules with no tensors of their own
// (a ModuleList, an encoder stack, an embedding container) are looked
// through. The component's own tensors form the group "".
void collect(torch::nn::Module& module, const std::string& prefix, const std::string* group,
             std::set<const c10::TensorImpl*>& seen, std::vector<TensorEntry>& out) {
  const std::string own_group = group ? *group : "";
  for (const auto& p : module.named_parameters(/*recurse=*/false))
    if (seen.insert(p.value().unsafeGetTensorImpl()).second)
      out.push_back({prefix + p.key(), p.value(), own_group});
  for (const auto& b : module.named_buffers(/*recurse=*/false))
    if (seen.insert(b.value().unsafeGetTensorImpl()).second)
      out.push_back({prefix + b.key(), b.value(), own_group});
  for (const auto& child : module.named_children()) {
    const std::string path = prefix + child.key();
    if (group && !group->empty()) {
      collect(*child.value(), path + ".", group, seen, out);
    } else if (has_own_tensors(*child.value()) || is_index(child.key())) {
      collect(*child.value(), path + ".", &path, seen, out);
    } else {
      collect(*child.value(), path + ".", nullptr, seen, out);
    }
  }
}
}  // namespace

std::vector<TensorEntry> unique_tensors(torch::nn::Module& module) {
  std::set<const c10::TensorImpl*> seen;
  std::vector<TensorEntry> out;
  const std::string root;
  collect(module, "", &root, seen, out);
  return out;
}

std::uint64_t tensor_bytes(torch::nn::Module& module) {
  std::uint64_t n = 0;
  for (const auto& e : unique_tensors(module))
    n += static_cast<std::uint64_t>(e.tensor.numel()) * e.tensor.element_size();
  return n;
}

HostRegion::HostRegion(std::size_t bytes, device::Device& device, std::size_t max_pin_chunk_bytes,
                       bool pin, bool* pin_refused)
    : bytes_(bytes) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = align_up(std::max<std::size_t>(bytes, 1), page);
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw DeviceOutOfMemory(detail::concat("host: cannot map ", device::format_bytes(mapped_),
                                           " for weight homes: ", std::strerror(errno)));
  data_ = static_cast<std::byte*>(p);
  const std::size_t chunk = std::max(page, align_up(max_pin_chunk_bytes, page));
  for (std::size_t begin = 0; begin < bytes_; begin += chunk) {
    const std::size_t end = std::min(bytes_, begin + chunk);
    std::shared_ptr<void> handle;
    if (pin && !*pin_refused) {
      handle = device.pin_host(data_ + begin, std::min(mapped_ - begin, chunk));
      if (!handle) {
        *pin_refused = true;
        std::cerr << "omni: warning: the host refused to pin more memory on " << device.name()
                  << "; the remaining weight homes stay pageable (uploads from them are slower)\n";
      }
    }
    const bool pinned = handle != nullptr;
    pieces_.push_back({begin, end, pinned, std::move(handle)});
  }
}

HostRegion::~HostRegion() {
  pieces_.clear();  // unpin before unmapping
  if (data_) ::munmap(data_, mapped_);
}

std::uint64_t HostRegion::pinned_bytes() const {
  std::uint64_t n = 0;
  for (const auto& piece : pieces_)
    if (piece.pinned) n += piece.end - piece.begin;
  return n;
}

std::uint64_t HostHome::payload_bytes(std::size_t g) const {
  std::uint64_t n = 0;
  for (auto s : groups_.at(g).slots) n += slots_[s].bytes;
  return n;
}

std::unique_ptr<HostHome> HostHome::build(const std::string& component, torch::nn::Module& module,
                                          device::Device& device, const HostHomeOptions& options,
                                          bool* pin_refused,
                                          const std::function<void(TensorSlot&)>& on_copied) {
  auto home = std::unique_ptr<HostHome>(new HostHome());
  home->component_ = component;
  const auto entries = unique_tensors(module);
  std::size_t offset = 0;
  for (const auto& e : entries) {
    if (home->groups_.empty() || home->groups_.back().name != e.group) {
      if (!home->groups_.empty()) home->groups_.back().end = offset;
      home->groups_.push_back({e.group, offset, offset, {}});
    }
    OMNI_CHECK(!device::is_unusable_placeholder(e.tensor), ConfigError, component, ": tensor '",
               e.name, "' is not materialised (offloaded by another backend?)");
    TensorSlot slot;
    slot.name = e.name;
    slot.live = e.tensor;
    slot.origin = e.tensor.device();
    slot.offset = offset;
    slot.bytes = static_cast<std::size_t>(e.tensor.numel()) * e.tensor.element_size();
    home->payload_bytes_ += slot.bytes;
    offset = align_up(offset + slot.bytes, kTensorAlignment);
    home->groups_.back().slots.push_back(home->slots_.size());
    home->slots_.push_back(std::move(slot));
  }
  if (!home->groups_.empty()) home->groups_.back().end = offset;
  const auto& plan = options.mapped.plan;
  if (plan && plan->kind_of(component) == HomeKind::mapped) {
    OMNI_CHECK(options.mapped.staging != nullptr, ConfigError, component,
               ": a mapped home needs a pinned staging ring");
    home->kind_ = HomeKind::mapped;
    home->staging_ = options.mapped.staging;
    home->region_ = std::make_shared<HostRegion>(0, device, options.max_pin_chunk_bytes,
                                                 /*pin=*/false, pin_refused);
    for (auto& slot : home->slots_) {
      // Note [Mapped homes]: the tensor as loaded is the home; a copy only
      // for one that is not a contiguous host tensor.
      const auto& src = slot.live;
      // detach(): a handle of its own, which rebinding `live` leaves alone.
      slot.home =
          (src.device().is_cpu() ? src.contiguous() : src.to(torch::kCPU).contiguous()).detach();
      if (on_copied) on_copied(slot);
    }
    return home;
  }
  home->region_ = std::make_shared<HostRegion>(offset, device, options.max_pin_chunk_bytes,
                                               options.pin_memory, pin_refused);
  auto region = home->region_;
  // Batches of about kCopyBatchBytes, each copied by a few threads; the
  // originals of a batch are released (on_copied) before the next begins.
  constexpr std::size_t kCopyBatchBytes = 256ull << 20;
  const std::size_t threads =
      std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, kMaxCopyThreads);
  for (std::size_t first = 0; first < home->slots_.size();) {
    std::size_t last = first, batch_bytes = 0;
    while (last < home->slots_.size() && (last == first || batch_bytes < kCopyBatchBytes))
      batch_bytes += home->slots_[last++].bytes;
    std::vector<torch::Tensor> sources(last - first);
    for (std::size_t i = first; i < last; ++i) {
      const auto& src = home->slots_[i].live;
      sources[i - first] =
          src.device().is_cpu() ? src.contiguous() : src.to(torch::kCPU).contiguous();
    }
    // Whole slots split among threads by bytes; big tensors split too.
    std::vector<std::tuple<std::byte*, const std::byte*, std::size_t>> pieces;
    for (std::size_t i = first; i < last; ++i) {
      const auto& slot = home->slots_[i];
      const auto* from = static_cast<const std::byte*>(sources[i - first].data_ptr());
      constexpr std::size_t kPiece = 16ull << 20;
      for (std::size_t done = 0; done < slot.bytes; done += kPiece)
        pieces.emplace_back(region->data() + slot.offset + done, from + done,
                            std::min(kPiece, slot.bytes - done));
    }
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      for (std::size_t k; (k = next.fetch_add(1)) < pieces.size();) {
        const auto& [to, from, n] = pieces[k];
        std::memcpy(to, from, n);
      }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < std::min(threads, pieces.size()); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    sources.clear();
    for (std::size_t i = first; i < last; ++i) {
      auto& slot = home->slots_[i];
      slot.home = torch::from_blob(
          region->data() + slot.offset, slot.live.sizes(), [region](void*) {},
          torch::TensorOptions().dtype(slot.live.scalar_type()));
      if (on_copied) on_copied(slot);
    }
    first = last;
  }
  return home;
}

}  // namespace omni::offload
