#pragma once
// Running the `outpost` binary from tests (cli_test, crash_test): arguments, stdin text,
// captured stdout/stderr and the exit code, with a timeout after which the child is killed.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "outpost/json.h"

#ifndef OUTPOST_BIN
#error "OUTPOST_BIN (path of the outpost executable) must be defined by the build"
#endif

namespace outpost::testing {

struct CliResult {
  int code = -1;  // exit code; -1 when killed (timeout) or crashed
  std::string out;
  std::string err;
  std::string all() const { return out + err; }
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every event id in a JSON-lines text (what the file sink writes), in order, as a reader of
// the file sees them. A relay or consumer killed in the middle of a write leaves a torn line;
// its events were not acked, so they are delivered again, and the next writer starts a new line
// (docs/sinks_file_http.md). Were the next event glued to the fragment, it would be lost to
// every reader, and is not counted here either.
inline std::vector<std::string> event_ids_in(const std::string& text) {
  std::vector<std::string> ids;
  const std::string marker = "\"id\":\"";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!outpost::is_json_value(line)) continue;
    for (auto pos = line.find(marker); pos != std::string::npos; pos = line.find(marker, pos)) {
      pos += marker.size();
      if (pos + 36 <= line.size() && line[pos + 36] == '"') ids.push_back(line.substr(pos, 36));
    }
  }
  return ids;
}

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "outpost-cli-XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Runs OUTPOST_BIN with `args`; `input` is its stdin.
inline CliResult run_cli(const std::vector<std::string>& args, const std::string& input = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  TempDir io;
  auto in_path = io / "stdin", out_path = io / "stdout", err_path = io / "stderr";
  {
    std::ofstream in(in_path, std::ios::binary);
    in << input;
  }
  std::vector<std::string> argv{OUTPOST_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int i = ::open(in_path.c_str(), O_RDONLY);
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(i, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  CliResult r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (status != -1 && WIFEXITED(status)) r.code = WEXITSTATUS(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// A long-running `outpost` child (e.g. a relay) with stdout+stderr in `log_path`; killed with
// SIGKILL by the destructor if still running.
class CliProcess {
 public:
  CliProcess(const std::vector<std::string>& args, std::string log_path)
      : args_(args), log_path_(std::move(log_path)) {
    start();
  }
  ~CliProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;

  void start() {
    std::vector<std::string> argv{OUTPOST_BIN};
    argv.insert(argv.end(), args_.begin(), args_.end());
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    // Returns once the child has exec'd outpost (the pipe's write end closes on exec), as a
    // supervisor or subprocess.Popen does: a signal sent after start() reaches outpost, not the
    // forked copy of the test.
    int exec_done[2];
    if (::pipe2(exec_done, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int i = ::open("/dev/null", O_RDONLY);
      int o = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(i, 0);
      ::dup2(o, 1);
      ::dup2(o, 2);
      ::execv(cargs[0], cargs.data());
      ::_exit(127);
    }
    ::close(exec_done[1]);
    char byte;
    while (::read(exec_done[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::close(exec_done[0]);
    pid_ = pid;
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Reaps the child: its exit code, 128+signal if killed, or -1 if still running at `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return last_;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        last_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return last_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

 private:
  std::vector<std::string> args_;
  std::string log_path_;
  pid_t pid_ = -1;
  int last_ = -1;
};

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream s(text);
  std::string line;
  while (std::getline(s, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace outpost::testing
