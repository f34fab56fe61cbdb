#include "omni/offload/report.h"

#include <cstdio>
#include <sstream>

#include "omni/device/device.h"

namespace omni::offload {

std::string_view to_string(Direction direction) {
  switch (direction) {
    case Direction::h2d:
      return "h2d";
    case Direction::d2h:
      return "d2h";
  }
  return "?";
}

const ComponentReport* OffloadReport::component(std::string_view name) const {
  for (const auto& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

std::string OffloadReport::to_table() const {
  using device::format_bytes;
  std::ostringstream out;
  out << "offload report — device " << device << (stand_in ? " (simulated stand-in)" : "")
      << ", strategy " << strategy << (streaming ? " (streamed)" : "") << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %-9s %12s %8s %10s %9s %10s %10s  %-7s\n", "component",
                "role", "bytes", "uploads", "upload s", "GB/s", "exposed s", "hidden s", "now");
  out << line;
  for (const auto& c : components) {
    std::snprintf(line, sizeof line, "  %-16s %-9s %12s %8llu %10.4f %9.2f %10.4f %10.4f  %-7s\n",
                  c.name.c_str(), std::string(to_string(c.role)).c_str(),
                  format_bytes(c.bytes).c_str(), static_cast<unsigned long long>(c.uploads),
                  c.upload_seconds, c.gbps(), c.exposed_seconds, c.hidden_seconds(),
                  std::string(to_string(c.where)).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line,
                "  transfer exposed to compute %.4f s, hidden behind it %.4f s\n",
                exposed_transfer_seconds, hidden_transfer_seconds);
  out << line;
  out << "  peak resident weights " << format_bytes(peak_resident_bytes) << " (planned "
      << format_bytes(planned_peak_bytes) << "; without offload "
      << format_bytes(planned_peak_without_offload_bytes) << ")\n";
  out << "  host homes: pinned " << format_bytes(pinned_host_bytes) << ", pageable "
      << format_bytes(pageable_host_bytes) << "; moved h2d " << format_bytes(h2d_bytes) << ", d2h "
      << format_bytes(d2h_bytes) << " in " << transfers.size() << " transfers\n";
  for (const auto& l : loras)
    out << "  LoRA on " << l.component << ": " << l.path << ", scale " << l.scale << ", "
        << l.tensors << " tensors changed, " << l.unused_pairs << " of " << l.pairs
        << " updates unused\n";
  if (host_plan) {
    out << "  mapped homes " << format_bytes(mapped_host_bytes) << ", pinned staging ring "
        << format_bytes(staging_host_bytes) << "\n";
    std::istringstream plan(host_plan->to_table());
    for (std::string l; std::getline(plan, l);) out << "  " << l << "\n";
  }
  return out.str();
}

nlohmann::json OffloadReport::to_json() const {
  nlohmann::json j;
  j["device"] = device;
  j["simulated"] = stand_in;
  j["strategy"] = strategy;
  j["streaming"] = streaming;
  j["peak_resident_bytes"] = peak_resident_bytes;
  j["planned_peak_bytes"] = planned_peak_bytes;
  j["planned_peak_without_offload_bytes"] = planned_peak_without_offload_bytes;
  j["pinned_host_bytes"] = pinned_host_bytes;
  j["pageable_host_bytes"] = pageable_host_bytes;
  j["mapped_host_bytes"] = mapped_host_bytes;
  j["staging_host_bytes"] = staging_host_bytes;
  j["host_plan"] = host_plan ? host_plan->to_json() : nlohmann::json(nullptr);
  j["h2d_bytes"] = h2d_bytes;
  j["d2h_bytes"] = d2h_bytes;
  j["device_peak_allocated_bytes"] = device_peak_allocated_bytes;
  j["exposed_transfer_seconds"] = exposed_transfer_seconds;
  j["hidden_transfer_seconds"] = hidden_transfer_seconds;
  j["components"] = nlohmann::json::array();
  for (const auto& c : components)
    j["components"].push_back({{"name", c.name},
                               {"role", to_string(c.role)},
                               {"bytes", c.bytes},
                               {"swappable", c.swappable},
                               {"uploads", c.uploads},
                               {"offloads", c.offloads},
                               {"upload_bytes", c.upload_bytes},
                               {"upload_seconds", c.upload_seconds},
                               {"gbps", c.gbps()},
                               {"exposed_transfer_seconds", c.exposed_seconds},
                               {"hidden_transfer_seconds", c.hidden_seconds()},
                               {"where", to_string(c.where)}});
  j["transfers"] = nlohmann::json::array();
  for (const auto& t : transfers)
    j["transfers"].push_back({{"component", t.component},
                              {"direction", to_string(t.direction)},
                              {"bytes", t.bytes},
                              {"seconds", t.seconds},
                              {"gbps", t.gbps()},
                              {"pinned", t.pinned}});
  j["loras"] = nlohmann::json::array();
  for (const auto& l : loras)
    j["loras"].push_back({{"component", l.component},
                          {"path", l.path},
                          {"scale", l.scale},
                          {"style", l.style},
                          {"tensors", l.tensors},
                          {"pairs", l.pairs},
                          {"unused_pairs", l.unused_pairs}});
  return j;
}

}  // namespace omni::offload
