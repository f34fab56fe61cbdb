#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace omni::cli {

void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// Runs a command body, translating errors once (Note [Two kinds of failure]):
// a one-line reason on stderr and a non-zero exit status.
int run_guarded(const std::function<int()>& body);

}  // namespace omni::cli
