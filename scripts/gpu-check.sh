#!/usr/bin/env bash
# GPU check for the lent GPU machine (one H200; pip torch 2.x with CUDA; no
# package registries). Configures a minimal CUDA build against the LibTorch
# inside pip torch, builds `omni` and the `gpu` test binary, runs `ctest -L gpu`
# and `omni bench offload` on cuda:0 at a small and at the real scale, and
# leaves logs and JSON in $OUT.
#
#   scripts/gpu-check.sh vendor                                        (here, first)
#   scripts/gpu-check.sh [all|build|run|first-run|test|bench-small|bench-full|bench-streamed]
#                                                                      (there; default all)
#
# How a session runs it:
#   1. Here (Debian, the project's packages installed): `scripts/gpu-check.sh
#      vendor` copies what the GPU machine lacks into the git-ignored
#      third_party/ (nlohmann-json, CLI11 and stb headers, GoogleTest sources;
#      a few MiB) and prints the carry list. Ignored paths travel only when
#      carried.
#   2. One device call: run(command="scripts/gpu-check.sh all",
#      carry=["third_party"], timeout_s=600). $OUT comes back with summary.txt,
#      gpu-check.log, machine.txt, configure/build logs, ctest-gpu.log and
#      bench-offload-{small,full}.{txt,json}.
#
# `all` does everything in one command; the full-scale benchmark then gets
# whatever the build left of the budget. With two device commands, `build`
# first and `run` (ctest, 1/16 and full scale) second give the benchmark most
# of a command to itself: the build directory survives on a warm machine.
#
# Environment:
#   OUT                     where logs and JSON go (default: ./gpu-check-out)
#   OMNI_GPU_CHECK_BUDGET   seconds the whole run may take (default 540: under
#                           the 10-minute limit of one device command)
#   OMNI_GPU_BUILD_DIR      build directory (default build-gpu; kept between
#                           calls on a warm machine, so `build` then `bench-full`
#                           works as two calls)
#   OMNI_CMAKE_ARGS         extra configure arguments (after ours: they win)
#
# What the machine lacks must travel with the tree: the header-only
# nlohmann-json, CLI11 and stb are looked up under third_party/ (any layout:
# the directory holding nlohmann/json.hpp, CLI/CLI.hpp, stb/stb_image_write.h)
# and then under /usr/include; small CMake package shims are generated for
# them. GoogleTest: the sources in third_party/ when they travelled (built in
# the tree with torch's C++ ABI), else the system's when torch uses the C++11
# ABI; otherwise tests are off and ctest is skipped with a note. Only `omni`
# and the gpu test binary are built. Every step has a timeout inside the
# budget; each benchmark writes its JSON after every strategy, so a timeout
# keeps what ran.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
stage=${1:-all}
case "$stage" in vendor | all | build | run | first-run | test | bench-small | bench-full | bench-streamed) ;; *)
  echo "usage: $0 [vendor|all|build|run|first-run|test|bench-small|bench-full|bench-streamed]" >&2
  exit 2
  ;;
esac

# --- vendor: runs on the Debian machine, before the device call ----------------
if [ "$stage" = vendor ]; then
  # "source destination-under-third_party Debian-package"
  vendored=(
    "/usr/include/nlohmann include/nlohmann nlohmann-json3-dev"
    "/usr/include/CLI include/CLI libcli11-dev"
    "/usr/include/stb include/stb libstb-dev"
    "/usr/src/googletest googletest libgtest-dev"
  )
  for entry in "${vendored[@]}"; do
    read -r src dst package <<<"$entry"
    if [ ! -d "$src" ]; then
      echo "gpu-check vendor: $src is missing; install $package (scripts/setup) and run again" >&2
      exit 1
    fi
  done
  if ! git check-ignore -q third_party/; then
    echo "gpu-check vendor: third_party/ is not git-ignored; add /third_party/ to .gitignore" >&2
    exit 1
  fi
  rm -rf third_party
  for entry in "${vendored[@]}"; do
    read -r src dst package <<<"$entry"
    mkdir -p "third_party/$(dirname "$dst")"
    cp -rL "$src" "third_party/$dst" || exit 1
  done
  # Not needed to build the libraries.
  rm -rf third_party/googletest/googletest/{docs,samples,test} third_party/googletest/googlemock/{docs,test}
  echo "gpu-check vendor: third_party/ holds $(du -sh third_party | cut -f1) in $(find third_party -type f | wc -l) files"
  for entry in "${vendored[@]}"; do
    read -r src dst package <<<"$entry"
    echo "  third_party/$dst  <- $src ($package $(dpkg-query -W -f='${Version}' "$package" 2>/dev/null))"
  done
  echo 'device call: run(command="scripts/gpu-check.sh all", carry=["third_party"], timeout_s=600)'
  exit 0
fi

OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
BUILD=${OMNI_GPU_BUILD_DIR:-$ROOT/build-gpu}
BUDGET=${OMNI_GPU_CHECK_BUDGET:-540}
START=$(date +%s)
LOG="$OUT/gpu-check.log"
SUMMARY="$OUT/summary.txt"
exec > >(tee -a "$LOG") 2>&1

left() { echo $((BUDGET - ($(date +%s) - START))); }
say() { echo "[gpu-check +$(($(date +%s) - START))s] $*"; }
note() {
  say "$*"
  echo "$*" >>"$SUMMARY"
}
# step WANT NAME OUTFILE CMD...: runs CMD (a program, not a function) with a
# timeout of min(WANT, what is left of the budget minus a reserve), its output
# into OUTFILE ("-": the console), and records the outcome in the summary.
step() {
  local want=$1 name=$2 outfile=$3
  shift 3
  local limit
  limit=$(($(left) - 15))
  if [ "$want" -lt "$limit" ]; then limit=$want; fi
  if [ "$limit" -lt 20 ]; then
    note "SKIP $name: only $(left) s of the budget left"
    return 124
  fi
  say "$name (timeout ${limit}s): $*"
  local rc
  if [ "$outfile" = - ]; then
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
  else
    timeout --kill-after=10 "$limit" "$@" >"$outfile" 2>&1
    rc=$?
  fi
  if [ $rc -eq 0 ]; then
    note "OK   $name ($(($(date +%s) - START)) s into the run)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    note "FAIL $name: timed out after ${limit} s"
  else
    note "FAIL $name: exit $rc"
  fi
  return $rc
}

: >"$SUMMARY"
say "stage $stage, budget ${BUDGET}s, out $OUT, build $BUILD"

# --- the machine -------------------------------------------------------------
{
  echo "== date"; date -u
  echo "== nvidia-smi"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current --format=csv 2>&1
  timeout 20 nvidia-smi topo -m 2>&1 | head -20
  echo "== cpu/memory"; nproc; free -g
  echo "== tools"
  cmake --version 2>&1 | head -1; ninja --version 2>&1 | head -1; c++ --version 2>&1 | head -1
  command -v nvcc && nvcc --version | tail -2
  echo "== torch"
  timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "cxx11_abi", torch.compiled_with_cxx11_abi()); print(torch.utils.cmake_prefix_path)' 2>&1
} >"$OUT/machine.txt" 2>&1
say "machine: $(head -c 2000 "$OUT/machine.txt" | tr '\n' ' ' | cut -c1-400)"

# --- configure and build ---------------------------------------------------------
header_dir() { # prints the directory that holds $1 (a relative header path), or nothing
  local rel=$1 hit
  if [ -d third_party ]; then
    hit=$(find third_party -path "*/$rel" -print -quit 2>/dev/null)
    if [ -n "$hit" ]; then
      (cd "${hit%/"$rel"}" && pwd)
      return 0
    fi
  fi
  for d in /usr/local/include /usr/include; do
    if [ -f "$d/$rel" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

configure() {
  local shims="$BUILD/shims" args=() missing=()
  mkdir -p "$shims"
  local torch_prefix abi
  # The torch package itself, not torch.utils.cmake_prefix_path: TorchConfig
  # finds libc10.so with find_library, which takes a system LibTorch's (Debian's
  # /usr/lib) before the wheel's unless <prefix>/lib is torch/lib (scripts/build-cuda).
  torch_prefix=$(timeout 60 python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) || {
    note "FAIL configure: python3 cannot import torch"
    return 1
  }
  abi=$(timeout 60 python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))' 2>/dev/null || echo 1)

  local json_dir cli_dir stb_dir
  json_dir=$(header_dir nlohmann/json.hpp) || missing+=("nlohmann/json.hpp (nlohmann-json3-dev)")
  cli_dir=$(header_dir CLI/CLI.hpp) || missing+=("CLI/CLI.hpp (libcli11-dev)")
  stb_dir=$(header_dir stb/stb_image_write.h) || missing+=("stb/stb_image_write.h (libstb-dev)")
  if [ ${#missing[@]} -gt 0 ]; then
    note "FAIL configure: missing header-only dependencies: ${missing[*]}; copy them from a Debian machine into third_party/ (e.g. third_party/include/nlohmann, third_party/include/CLI, third_party/include/stb)"
    return 1
  fi
  mkdir -p "$shims/nlohmann_json" "$shims/CLI11"
  local major minor patch
  major=$(sed -n 's/^#define NLOHMANN_JSON_VERSION_MAJOR \([0-9]*\).*/\1/p' "$json_dir/nlohmann/json.hpp" | head -1)
  minor=$(sed -n 's/^#define NLOHMANN_JSON_VERSION_MINOR \([0-9]*\).*/\1/p' "$json_dir/nlohmann/json.hpp" | head -1)
  patch=$(sed -n 's/^#define NLOHMANN_JSON_VERSION_PATCH \([0-9]*\).*/\1/p' "$json_dir/nlohmann/json.hpp" | head -1)
  cat >"$shims/nlohmann_json/nlohmann_jsonConfig.cmake" <<EOF
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$json_dir")
endif()
EOF
  cat >"$shims/nlohmann_json/nlohmann_jsonConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "${major:-3}.${minor:-0}.${patch:-0}")
if(PACKAGE_FIND_VERSION_MAJOR AND NOT PACKAGE_FIND_VERSION_MAJOR EQUAL ${major:-3})
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
EOF
  cat >"$shims/CLI11/CLI11Config.cmake" <<EOF
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$cli_dir")
endif()
EOF
  args+=(-Dnlohmann_json_DIR="$shims/nlohmann_json" -DCLI11_DIR="$shims/CLI11" -DOMNI_STB_INCLUDE="$stb_dir")

  # GoogleTest: the sources in third_party/ when they travelled (built in the
  # tree with torch's C++ ABI), else the system's when torch uses the C++11 ABI.
  local tests=OFF gtest_src system_gtest=""
  for f in /usr/lib/*/cmake/GTest/GTestConfig.cmake /usr/lib/cmake/GTest/GTestConfig.cmake /usr/local/lib/cmake/GTest/GTestConfig.cmake; do
    if [ -f "$f" ]; then system_gtest=$f; fi
  done
  gtest_src=$(find third_party -maxdepth 3 -name CMakeLists.txt -path '*googletest*' -exec grep -l 'project(googletest-distribution' {} \; 2>/dev/null | head -1)
  if [ -n "$gtest_src" ]; then
    gtest_src=$(cd "$(dirname "$gtest_src")" && pwd)
    mkdir -p "$shims/GTest"
    cat >"$shims/GTest/GTestConfig.cmake" <<EOF
if(NOT TARGET GTest::gtest)
  set(CMAKE_CXX_FLAGS "\${CMAKE_CXX_FLAGS} -D_GLIBCXX_USE_CXX11_ABI=$abi")
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  add_subdirectory("$gtest_src" "\${CMAKE_BINARY_DIR}/_googletest" EXCLUDE_FROM_ALL)
  foreach(lib gtest gtest_main gmock gmock_main)
    if(TARGET \${lib} AND NOT TARGET GTest::\${lib})
      add_library(GTest::\${lib} ALIAS \${lib})
    endif()
  endforeach()
endif()
set(GTest_FOUND TRUE)
EOF
    args+=(-DGTest_DIR="$shims/GTest")
    tests=ON
    say "GoogleTest: sources in $gtest_src"
  elif [ "$abi" = 1 ] && [ -n "$system_gtest" ]; then
    tests=ON
    say "GoogleTest: the system's ($system_gtest)"
  else
    note "NOTE tests off: no usable GoogleTest (run 'scripts/gpu-check.sh vendor' on the Debian machine and carry third_party; the system GTest needs torch's C++ ABI = 1, here $abi)"
  fi
  echo "$tests" >"$BUILD/.tests"

  local generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  # shellcheck disable=SC2086
  step 120 configure "$OUT/configure.log" cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DOMNI_WITH_CUDA=ON \
    -DOMNI_BUILD_TOOLS=OFF -DOMNI_BUILD_BENCH=ON -DOMNI_BUILD_TESTS="$tests" \
    -DOMNI_WITH_VIDEO=OFF -DOMNI_WITH_TOKENIZER=OFF -DOMNI_WITH_SERVER=OFF \
    "${args[@]}" ${OMNI_CMAKE_ARGS:-}
}

build() {
  configure || {
    tail -30 "$OUT/configure.log"
    return 1
  }
  # Only what the check runs: the CLI (generate, bench) and the gpu test binary.
  local targets=(--target omni_cli)
  if [ "$(cat "$BUILD/.tests" 2>/dev/null)" = ON ]; then targets+=(omni_gpu_tests); fi
  step 330 build "$OUT/build.log" cmake --build "$BUILD" -j "$(nproc)" "${targets[@]}" || {
    grep -m 20 -E 'error|Error' "$OUT/build.log"
    tail -20 "$OUT/build.log"
    return 1
  }
}

run_tests() {
  if [ "$(cat "$BUILD/.tests" 2>/dev/null)" != ON ]; then
    note "SKIP ctest -L gpu: tests were not built"
    return 0
  fi
  step 120 "ctest -L gpu" "$OUT/ctest-gpu.log" ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 100
  local rc=$?
  tail -15 "$OUT/ctest-gpu.log"
  return $rc
}

OMNI="$BUILD/bin/omni"
bench() { # name timeout args...
  local name=$1 want=$2
  shift 2
  if [ ! -x "$OMNI" ]; then
    note "SKIP bench $name: $OMNI is not built"
    return 1
  fi
  # The table on stdout, progress on stderr: both into the .txt.
  step "$want" "bench $name" "$OUT/bench-offload-$name.txt" \
    "$OMNI" bench offload --device cuda:0 --json "$OUT/bench-offload-$name.json" "$@"
  local rc=$?
  cat "$OUT/bench-offload-$name.txt"
  if [ -f "$OUT/bench-offload-$name.json" ]; then
    python3 - "$OUT/bench-offload-$name.json" >>"$SUMMARY" <<'EOF' || true
import json, sys
j = json.load(open(sys.argv[1]))
print(f"  bench {j['scale']['text']} on {j['device']} (complete: {j['complete']}):")
for s in j["strategies"]:
    if s["status"] != "ok":
        print(f"    {s['name']:<12} {s['status']}: {s.get('reason', '')}")
        continue
    med = lambda x: (x or {}).get("median")
    e = s["expert_swap"]
    ts = med((s.get("per_request") or {}).get("transfer_seconds"))
    ex = med((s.get("per_request") or {}).get("exposed_transfer_seconds"))
    rq = med((s.get("per_request") or {}).get("seconds"))
    sw, gb = med(e["seconds"]), med(e["gbps"])
    print(f"    {s['name']:<12} expert swap "
          + (f"{sw:.4f} s, {gb:.1f} GB/s" if sw is not None and gb is not None else "n/a")
          + (f", transfer/request {ts:.3f} s" if ts is not None else "")
          + (f", exposed/request {ex:.3f} s" if ex is not None else "")
          + (f", request {rq:.3f} s" if rq is not None else "")
          + f", peak device {s['peak_device_bytes']} B"
          + f", d2h {s['d2h_bytes']} B, pinned peak {s['pinned_host_bytes_peak']} B")
for t in j["targets"]:
    verdict = "n/a " if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
    print(f"    {verdict} {t['name']}: {t['measured']} (target {t['target']})")
EOF
  fi
  return $rc
}

# The GPU review's first-run list (../shared/reference/gpu-path-review.md §5):
# B1 in a fresh process without any warm-up (the CLI's own path), layerwise
# under a small budget with the allocator's peak against it (H1: released
# blocks kept beyond the budget), and the overlap test that allocates after
# compute is queued (H3; disabled in the suite until the weight arena).
first_run() {
  if [ ! -x "$OMNI" ]; then
    note "SKIP first-run: $OMNI is not built"
    return 1
  fi
  local rc=0
  step 60 "B1: generate on cuda:0 with offload, no budget" "$OUT/b1-generate.log" \
    "$OMNI" generate example:wan-shaped --device cuda:0 --enable-cpu-offload --steps 4 \
    --size 32x32 --num-frames 1 --prompt "b1" --output "$OUT/b1.png" \
    --report-json "$OUT/b1-report.json" || rc=1
  tail -3 "$OUT/b1-generate.log"
  step 60 "H1: layerwise under a 2 MiB budget" "$OUT/h1-layerwise.log" \
    "$OMNI" generate example:wan-shaped --device cuda:0 --enable-layerwise-offload \
    --device-memory-budget 2MiB --steps 4 --size 32x32 --num-frames 1 --prompt "h1" \
    --output "$OUT/h1.png" --report-json "$OUT/h1-report.json" || rc=1
  python3 - "$OUT/h1-report.json" >>"$SUMMARY" <<'EOF' || true
import json, sys
r = json.load(open(sys.argv[1]))
print(f"  H1 layerwise: allocator peak {r.get('device_peak_allocated_bytes')} B, "
      f"ledger peak {r.get('peak_resident_bytes')} B, planned {r.get('planned_peak_bytes')} B "
      f"(budget 2097152 B; the allocator's peak adds activations)")
EOF
  if [ -x "$BUILD/tests/omni_gpu_tests" ]; then
    step 60 "H3: upload allocated after queued compute" "$OUT/h3-overlap.log" \
      "$BUILD/tests/omni_gpu_tests" --gtest_also_run_disabled_tests \
      --gtest_filter='*AnUploadAllocatedAfterQueuedComputeOverlapsIt*'
    grep -E "upload|OK|FAILED" "$OUT/h3-overlap.log" | head -5 >>"$SUMMARY"
  fi
  return $rc
}

status=0
case "$stage" in
  all)
    build || status=1
    first_run || status=1
    # Small first: its figures survive whatever happens to the big run.
    bench small 150 --scale 1/16 --requests 4 --repeats 3 || status=1
    run_tests || status=1
    # Streaming against whole swaps and no offload, modeled compute at 1/4 scale.
    bench streamed 200 --scale 1/4 --strategies all-resident,omni,omni-streamed \
      --requests 3 --repeats 1 || status=1
    bench full 600 --scale 1 --requests 3 --repeats 1 || status=1
    ;;
  build) build || status=1 ;;
  run)
    first_run || status=1
    run_tests || status=1
    bench small 120 --scale 1/16 --requests 4 --repeats 3 || status=1
    bench full 600 --scale 1 --requests 4 --repeats 1 || status=1
    ;;
  test) run_tests || status=1 ;;
  first-run) first_run || status=1 ;;
  bench-small) bench small 300 --scale 1/16 --requests 4 --repeats 3 || status=1 ;;
  bench-full) bench full 600 --scale 1 --requests 4 --repeats 1 || status=1 ;;
  bench-streamed)
    bench streamed 400 --scale 1/4 --strategies all-resident,omni,omni-streamed \
      --requests 3 --repeats 1 || status=1
    ;;
esac
say "done in $(($(date +%s) - START)) s, status $status"
echo "== summary"
cat "$SUMMARY"
exit $status
