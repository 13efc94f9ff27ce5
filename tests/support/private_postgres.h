#pragma once
// A throwaway PostgreSQL cluster a test owns (initdb in a temporary directory, a free port), so
// it may stop, restart or pause it without touching the shared server of the run (or anybody
// else's: pause() signals only the processes of this cluster, found through its own
// postmaster.pid and their parent).

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "server_process.h"
#include "store_cases.h"

namespace outpost::testing {

class PrivateCluster {
 public:
  PrivateCluster() {
    bin_ = env("OUTPOST_TEST_PG_BIN").value_or("/usr/lib/postgresql/15/bin");
    dir_ = temp_dir() + "/pg_private_" + std::to_string(free_port());
    std::filesystem::create_directories(dir_);
    as_pg_ = ::geteuid() == 0 ? "runuser -u postgres -- " : "";
    run("chmod 755 " + temp_dir() + " " + dir_);
    if (!as_pg_.empty()) run("chown postgres:postgres " + dir_);
    data_ = dir_ + "/data";
    port_ = free_port();
    if (run(as_pg_ + bin_ + "/initdb -D " + data_ + " -A trust -U postgres --no-sync >" + dir_ +
            "/initdb.log 2>&1") != 0)
      throw std::runtime_error("initdb failed, see " + dir_ + "/initdb.log");
    std::ofstream conf(data_ + "/postgresql.conf", std::ios::app);
    conf << "port = " << port_ << "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '"
         << data_ << "'\nmax_connections = 100\nfsync = off\n";
    conf.close();
    start();
  }
  ~PrivateCluster() {
    resume();
    pg_ctl("-m immediate stop");
  }
  PrivateCluster(const PrivateCluster&) = delete;
  PrivateCluster& operator=(const PrivateCluster&) = delete;

  void start() {
    if (pg_ctl("start") != 0) throw std::runtime_error("pg_ctl start failed, see " + dir_ + "/log");
  }
  void stop() { pg_ctl("-m fast stop"); }
  void restart() { pg_ctl("-m fast restart"); }
  std::string url() const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/postgres";
  }
  std::uint16_t port() const { return port_; }

  // SIGSTOPs the postmaster, then every process it forked (backends, background workers): the
  // server hangs with its TCP connections up, accepting nothing. resume() undoes it.
  void pause() {
    pid_t postmaster = postmaster_pid();
    if (postmaster <= 0) throw std::runtime_error("no postmaster.pid in " + data_);
    ::kill(postmaster, SIGSTOP);  // first: it forks no new backend from here on
    paused_ = {postmaster};
    for (pid_t child : children_of(postmaster)) {
      ::kill(child, SIGSTOP);
      paused_.push_back(child);
    }
  }
  void resume() {
    for (auto it = paused_.rbegin(); it != paused_.rend(); ++it) ::kill(*it, SIGCONT);
    paused_.clear();
  }

 private:
  static int run(const std::string& cmd) { return std::system(cmd.c_str()); }
  int pg_ctl(const std::string& what) {
    return run(as_pg_ + bin_ + "/pg_ctl -D " + data_ + " -l " + dir_ + "/log -w -t 60 " + what +
               " >/dev/null 2>&1");
  }
  pid_t postmaster_pid() const {
    std::ifstream in(data_ + "/postmaster.pid");
    long pid = 0;
    in >> pid;
    return static_cast<pid_t>(pid);
  }
  // Processes whose parent is `parent` (field 4 of /proc/PID/stat, after the command in parens).
  static std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(entry.path() / "stat");
      std::string stat;
      std::getline(in, stat);
      auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      char state = 0;
      long ppid = 0;
      std::istringstream rest(stat.substr(close + 1));
      if (rest >> state >> ppid && ppid == parent) out.push_back(std::stoi(name));
    }
    return out;
  }

  std::string bin_, dir_, data_, as_pg_;
  std::uint16_t port_ = 0;
  std::vector<pid_t> paused_;
};

}  // namespace outpost::testing
