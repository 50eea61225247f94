// GuardedServer: the worker pool that refuses instead of queueing, the socket stream that
// enforces the per-request deadline and byte caps, and the keep-alive loop of one connection.
#include "server/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;

// Set while the pool runs a connection on the accepting thread to refuse it.
thread_local bool t_refuse = false;

// Milliseconds from now until t, rounded up, at least 0.
int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

int poll_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r;
}

// httplib::ThreadPool queues every connection it cannot serve yet; this pool hands a connection
// to an idle worker or, when none is idle, runs it at once on the accepting thread with t_refuse
// set (GuardedServer then answers 503 without reading). The accepting thread never blocks on a
// client: the refusal is one non-blocking send.
// Idle workers are reused most recent first. glibc's malloc keeps a cache of freed blocks per
// thread (tcache) and touched stack pages stay resident: handing connections round-robin to all
// --http-threads workers (as httplib's pool does, through its condition variable) warms every
// thread in turn, and the server's resident memory crept up for as long as there were cold
// threads left (~400 bytes per request in a soak). Most-recent-first keeps the work on as few
// threads as the concurrency needs; the others stay cold.
class NoQueuePool final : public httplib::TaskQueue {
 public:
  explicit NoQueuePool(int n) : workers_(static_cast<size_t>(n)) {
    for (Worker& w : workers_) w.thread = std::thread([this, &w] { work(w); });
    // Connections may arrive as soon as the pool exists: wait until every worker can take one.
    std::unique_lock<std::mutex> lock(mu_);
    started_.wait(lock, [&] { return idle_.size() == workers_.size(); });
  }
  ~NoQueuePool() override = default;

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!shutdown_ && !idle_.empty()) {
        Worker* w = idle_.back();
        idle_.pop_back();
        w->job = std::move(fn);
        w->cv.notify_one();
        return;
      }
    }
    t_refuse = true;
    fn();
    t_refuse = false;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      for (Worker& w : workers_) w.cv.notify_one();
    }
    for (Worker& w : workers_) w.thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::condition_variable cv;
    std::function<void()> job;  // set by enqueue while the worker is idle
  };

  void work(Worker& w) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      idle_.push_back(&w);
      if (idle_.size() == workers_.size()) started_.notify_all();
      w.cv.wait(lock, [&] { return shutdown_ || w.job; });
      if (!w.job) return;  // shut down while idle
      std::function<void()> fn = std::move(w.job);
      w.job = nullptr;
      lock.unlock();
      fn();
      fn = nullptr;  // the connection's state goes before the worker counts as idle
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable started_;
  std::vector<Worker> workers_;
  std::vector<Worker*> idle_;  // the most recently idle last
  bool shutdown_ = false;
};

// One connection's socket as httplib reads and writes it. httplib's own SocketStream waits at
// most its read timeout per recv(); this one also fails every read past the request's deadline
// and counts the bytes of the request, so that neither a trickle nor a flood holds the worker.
class LimitedStream final : public httplib::Stream {
 public:
  LimitedStream(int fd, const ConnectionLimits& lim)
      : fd_(fd),
        lim_(lim),
        // Chunked bodies carry framing (size lines, CR LF) beyond the decoded bytes that
        // httplib's own limit would count; an eighth more and a page cover any sane chunking.
        body_cap_(lim.max_body_bytes + lim.max_body_bytes / 8 + 4096) {}

  // Waits up to the keep-alive time for the first byte of the next request (false: none came,
  // the client closed, or the server is stopping: `listening` became invalid).
  bool wait_request(const std::atomic<socket_t>& listening) {
    if (pos_ < len_) return true;  // a pipelined request is buffered
    const auto until = Clock::now() + std::chrono::seconds(lim_.keep_alive_s);
    while (listening != INVALID_SOCKET) {
      const int left = ms_until(until);
      if (left <= 0) return false;
      // Slices of 100 ms: a stopping server does not wait out an idle connection.
      const int r = poll_fd(fd_, POLLIN, std::min(left, 100));
      if (r != 0) return r > 0;
    }
    return false;
  }

  // Arms the deadline and resets the counters for the request whose first byte is here.
  void begin_request() {
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(lim_.request_timeout_s));
    hit_ = ReadLimit::kNone;
    close_ = false;
    in_headers_ = true;
    tail_ = 0;
    header_bytes_ = body_bytes_ = 0;
  }
  ReadLimit hit() const { return hit_; }
  void close_after_response() { close_ = true; }
  bool must_close() const { return close_ || hit_ != ReadLimit::kNone; }

  // After a refused request: stop sending, then read and drop what the client still sends for
  // a short while, so that closing does not reset the connection before the client read the
  // error (a close with unread bytes sends RST, which may discard the response at the client).
  void drain() {
    ::shutdown(fd_, SHUT_WR);
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    size_t dropped = 0;
    char sink[4096];
    while (dropped < (1u << 20) && poll_fd(fd_, POLLIN, ms_until(until)) > 0) {
      const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
      if (n <= 0) break;
      dropped += static_cast<size_t>(n);
    }
  }

  bool is_readable() const override { return pos_ < len_ || poll_fd(fd_, POLLIN, 0) > 0; }

  bool is_writable() const override {
    if (poll_fd(fd_, POLLOUT, write_ms()) <= 0) return false;
    // Alive unless the client closed: a peek sees EOF (0) then, data or nothing otherwise.
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (hit_ != ReadLimit::kNone) return -1;
    if (pos_ == len_) {
      const int r = poll_fd(fd_, POLLIN, ms_until(deadline_));
      if (r == 0) hit_ = ReadLimit::kTimeout;
      if (r <= 0) return -1;
      ssize_t n;
      do {
        n = ::recv(fd_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, len_ - pos_);
    if (!account(buf_ + pos_, k)) return -1;
    std::memcpy(ptr, buf_ + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (poll_fd(fd_, POLLOUT, write_ms()) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) name_of(a, len, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) name_of(a, len, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  static void name_of(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv,
                      sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  int write_ms() const { return static_cast<int>(lim_.write_timeout_s * 1000); }

  // Counts bytes handed to httplib: request line and headers up to the blank line, then body.
  bool account(const char* p, size_t k) {
    size_t i = 0;
    while (in_headers_ && i < k) {
      tail_ = (tail_ << 8) | static_cast<uint8_t>(p[i++]);
      if (++header_bytes_ > lim_.max_header_bytes) {
        hit_ = ReadLimit::kHeaderTooLarge;
        return false;
      }
      if (tail_ == 0x0d0a0d0au) in_headers_ = false;  // CR LF CR LF ends the headers
    }
    body_bytes_ += k - i;
    if (body_bytes_ > body_cap_) {
      hit_ = ReadLimit::kBodyTooLarge;
      return false;
    }
    return true;
  }

  int fd_;
  const ConnectionLimits& lim_;
  size_t body_cap_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;  // unread bytes of buf_: [pos_, len_)
  Clock::time_point deadline_;
  ReadLimit hit_ = ReadLimit::kNone;
  bool close_ = false;  // close_after_response() was called
  bool in_headers_ = true;
  uint32_t tail_ = 0;  // the last four header bytes
  size_t header_bytes_ = 0, body_bytes_ = 0;
};

thread_local LimitedStream* t_stream = nullptr;

// The whole answer to a connection beyond the workers.
const std::string& refusal() {
  static const std::string r = [] {
    const std::string body =
        "{\"error\":{\"message\":\"the server is at its connection limit; retry later\","
        "\"type\":\"server_error\",\"param\":null,\"code\":\"service_unavailable\"}}";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  }();
  return r;
}

}  // namespace

ReadLimit current_read_limit() { return t_stream ? t_stream->hit() : ReadLimit::kNone; }

void close_after_response() {
  if (t_stream) t_stream->close_after_response();
}

GuardedServer::GuardedServer(const ConnectionLimits& limits) : limits_(limits) {
  const int n = std::max(1, limits_.workers);
  new_task_queue = [n] { return new NoQueuePool(n); };
  set_payload_max_length(limits_.max_body_bytes);
  set_keep_alive_timeout(limits_.keep_alive_s);  // the Keep-Alive header's figure
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  if (t_refuse) {
    if (on_refused) on_refused();
    // A fresh socket's send buffer is empty: the short answer fits without blocking.
    const std::string& r = refusal();
    (void)::send(sock, r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(sock, SHUT_WR);
    ::close(sock);
    return false;
  }
  LimitedStream strm(sock, limits_);
  t_stream = &strm;
  bool ok = false;
  // As httplib's loop: at most keep_alive_max_count_ requests, the last one told to close.
  for (size_t left = keep_alive_max_count_; left > 0 && strm.wait_request(svr_sock_); --left) {
    strm.begin_request();
    bool closed = false;
    ok = process_request(strm, left == 1, closed, nullptr);
    if (!ok || closed || strm.must_close()) break;
  }
  if (strm.must_close()) strm.drain();
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace tandem
