// A `tandem serve` child process (TANDEM_TANDEM_BIN) on a free port of 127.0.0.1, its log in a
// temporary file; killed with the test. Shared by the server end-to-end tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tandem::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A `tandem serve` child process on a free port; its log goes to a file.
class ServerProcess {
 public:
  ServerProcess(const fs::path& model, const std::vector<std::string>& extra) {
    static int count = 0;
    log_ = fs::temp_directory_path() /
           ("tandem-serve-" + std::to_string(getpid()) + "-" + std::to_string(count++) + ".log");
    std::vector<std::string> args = {TANDEM_TANDEM_BIN, "serve", "--model", model.string(),
                                     "--port",          "0",     "--host",  "127.0.0.1"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log_path = log_.string();
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan server if the test dies
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // The server logs "listening on http://127.0.0.1:PORT" once it accepts connections.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string text = log();
      const size_t at = text.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + 30);
        if (port_ > 0) return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("tandem serve exited early:\n" << text);
      }
      std::this_thread::sleep_for(10ms);
    }
    const std::string text = log();
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    FAIL("tandem serve did not start:\n" << text);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove(log_, ec);
  }

  int port() const { return port_; }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Sends sig and waits up to `wait` for the exit; returns the exit code (-1: still running
  // or killed by a signal).
  int stop(int sig = SIGTERM, std::chrono::seconds wait = 20s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  fs::path log_;
};

}  // namespace tandem::test
