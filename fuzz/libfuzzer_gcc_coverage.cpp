// Coverage for libFuzzer from GCC's -fsanitize-coverage=trace-pc (Note
// [libFuzzer with GCC] in CMakeLists.txt): GCC calls __sanitizer_cov_trace_pc
// at the start of every basic block; this hashes the (previous, current)
// block pair into libFuzzer's extra counters, which it reads as coverage
// features after every input. trace-cmp's integer hooks are libFuzzer's own;
// GCC's floating-point comparison hooks have no libFuzzer counterpart and are
// ignored. Never instrumented or sanitized itself: it runs in every block.
#include <cstddef>
#include <cstdint>

#define OMNI_COVERAGE_HOOK \
  extern "C" __attribute__((no_sanitize_coverage, no_sanitize_address, no_sanitize("undefined")))

namespace {

constexpr std::size_t kCounters = 1 << 16;

// libFuzzer finds this section by its __start_/__stop_ symbols.
__attribute__((section("__libfuzzer_extra_counters"), used)) std::uint8_t counters[kCounters];

thread_local std::uintptr_t previous_block = 0;

}  // namespace

OMNI_COVERAGE_HOOK void __sanitizer_cov_trace_pc() {
  const auto pc = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
  const std::uintptr_t block = ((pc ^ (pc >> 15)) * 0x9E3779B97F4A7C15ull) >> 48;
  ++counters[(block ^ previous_block) & (kCounters - 1)];
  previous_block = block >> 1;
}

OMNI_COVERAGE_HOOK void __sanitizer_cov_trace_cmpf(float, float) {}
OMNI_COVERAGE_HOOK void __sanitizer_cov_trace_cmpd(double, double) {}
