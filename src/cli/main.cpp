// The omni command line: thin front end over omni::Omni (engine/).
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "omni/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "omni: run multi-component diffusion pipelines on one accelerator, with model-level "
      "CPU offload (--enable-cpu-offload)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "omni 0.1.0");
  omni::cli::add_generate_command(app);
  omni::cli::add_bench_command(app);
  omni::cli::add_inspect_command(app);
  omni::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
