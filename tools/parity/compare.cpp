// Comparing computed outputs with the stored references, and the report.
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "parity/parity.h"

namespace omni::parity {

namespace {

// The metric over a pair of same-shape tensors, in float64.
double measure(Metric metric, const torch::Tensor& ours, const torch::Tensor& reference) {
  if (ours.numel() == 0) return 0;
  const auto ref = reference.to(torch::kFloat64);
  switch (metric) {
    case Metric::exact: {
      // The reference stores float32: compare in that precision, exactly.
      const auto a = ours.to(torch::kFloat32).to(torch::kFloat64);
      return (a - ref).abs().max().item<double>();
    }
    case Metric::absolute:
      return (ours.to(torch::kFloat64) - ref).abs().max().item<double>();
    case Metric::relative:
      return ((ours.to(torch::kFloat64) - ref).abs() / ref.abs().clamp_min(1e-30))
          .max()
          .item<double>();
  }
  return NAN;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (v == 0) return "0";
  std::ostringstream s;
  s << std::scientific << std::setprecision(2) << v;
  return s.str();
}

std::string_view metric_name(Metric metric) {
  switch (metric) {
    case Metric::exact:
      return "exact";
    case Metric::absolute:
      return "max abs";
    case Metric::relative:
      return "max rel";
  }
  return "?";
}

}  // namespace

bool Check::ok() const {
  if (!problem.empty() || !has_tolerance) return false;
  if (std::isnan(error)) return false;
  return tolerance.metric == Metric::exact ? error == 0 : error <= tolerance.limit;
}

std::vector<Check> compare(const Fixture& fixture, const Computed& computed) {
  std::vector<Check> checks;
  for (const auto& name : fixture.output_names()) {
    Check c;
    c.name = name;
    const auto& reference = fixture.output(name);
    c.shape = reference.sizes().vec();
    const auto tolerance = tolerance_for(fixture.kind(), name);
    c.has_tolerance = tolerance.has_value();
    if (!tolerance) {
      c.problem = "no tolerance for " + fixture.kind() + " output '" + name + "' in the table";
      checks.push_back(c);
      continue;
    }
    c.tolerance = *tolerance;
    auto it = computed.find(name);
    if (it == computed.end()) {
      c.problem = "the runner did not produce '" + name + "'";
      checks.push_back(c);
      continue;
    }
    const auto ours = it->second.to(torch::kCPU);
    if (ours.sizes() != reference.sizes()) {
      c.problem = "computed shape " + shape_string(ours.sizes().vec()) + " differs";
      checks.push_back(c);
      continue;
    }
    if (c.tolerance.per_step && reference.dim() >= 1) {
      for (std::int64_t i = 0; i < reference.size(0); ++i) {
        const double e = measure(c.tolerance.metric, ours[i], reference[i]);
        if (!c.worst_step || e > c.error || std::isnan(e)) {
          c.error = e;
          c.worst_step = i;
          if (std::isnan(e)) break;
        }
      }
    } else {
      c.error = measure(c.tolerance.metric, ours, reference);
    }
    if (auto f32 = fixture.output_f32(name))
      c.reference_f32_error = measure(c.tolerance.metric, *f32, reference);
    checks.push_back(c);
  }
  return checks;
}

bool print_report(std::ostream& out, const Fixture& fixture, const std::vector<Check>& checks) {
  out << "omni-parity " << fixture.dir().string() << ": " << fixture.kind() << " (float32)\n";
  out << std::left << std::setw(26) << "output" << std::setw(22) << "shape" << std::setw(9)
      << "metric" << std::setw(14) << "error" << std::setw(11) << "tolerance" << std::setw(12)
      << "ref f32"
      << "result\n";
  std::vector<std::string> failed;
  for (const auto& c : checks) {
    std::string error = c.problem.empty() ? number(c.error) : "-";
    if (c.problem.empty() && c.worst_step && c.error != 0)
      error += " @" + std::to_string(*c.worst_step);
    const std::string tolerance = !c.has_tolerance                      ? "-"
                                  : c.tolerance.metric == Metric::exact ? "0"
                                                                        : number(c.tolerance.limit);
    out << std::left << std::setw(26) << c.name << std::setw(22) << shape_string(c.shape)
        << std::setw(9) << (c.has_tolerance ? metric_name(c.tolerance.metric) : "-")
        << std::setw(14) << error << std::setw(11) << tolerance << std::setw(12)
        << (c.reference_f32_error ? number(*c.reference_f32_error) : "-")
        << (c.ok() ? "ok" : "FAIL");
    if (!c.problem.empty()) out << "  (" << c.problem << ")";
    out << "\n";
    if (!c.ok()) failed.push_back(c.name);
  }
  if (checks.empty()) {
    out << "FAIL: the fixture stores no outputs\n";
    return false;
  }
  if (failed.empty()) {
    out << "ok: all " << checks.size() << " outputs within tolerance\n";
    return true;
  }
  out << "FAIL: " << failed.size() << " of " << checks.size() << " outputs out of tolerance:";
  for (const auto& n : failed) out << " " << n;
  out << "\n";
  return false;
}

}  // namespace omni::parity
