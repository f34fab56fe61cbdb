// The omni command line: thin front end over omni::Omni (engine/).
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "omni/build_info.h"
#include "omni/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "omni: run multi-component diffusion pipelines on one accelerator, with model-level "
      "CPU offload (--enable-cpu-offload)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", omni::version_line());
  omni::cli::add_generate_command(app);
  omni::cli::add_bench_command(app);
  omni::cli::add_inspect_command(app);
  omni::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a bad command
    // line: exit 2, as the README documents (CLI11's own codes are 100+).
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
