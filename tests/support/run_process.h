// Runs a program (the real `omni` binary) and collects its exit status,
// output, wall time and peak memory, for tests that exercise the front end.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace omni::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
  double seconds = 0;
  long max_rss_kb = 0;  // the child's peak resident set
  // stderr's lines, for "a one-line reason" checks.
  int err_lines() const {
    int n = 0;
    for (char ch : err) n += ch == '\n';
    return n + (!err.empty() && err.back() != '\n');
  }
};

inline std::string slurp_fd(int fd) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

// argv[0] is the program's path. Output goes to unlinked temporary files, so
// a chatty child can never block on a full pipe.
inline ProcessResult run_process(const std::vector<std::string>& argv) {
  char out_name[] = "/tmp/omni_test_outXXXXXX";
  char err_name[] = "/tmp/omni_test_errXXXXXX";
  const int out_fd = ::mkstemp(out_name);
  const int err_fd = ::mkstemp(err_name);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("mkstemp failed");
  ::unlink(out_name);
  ::unlink(err_name);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  ProcessResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kb = usage.ru_maxrss;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp_fd(out_fd);
  r.err = slurp_fd(err_fd);
  return r;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace omni::testing
