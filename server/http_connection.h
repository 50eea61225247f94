// The connection layer under HttpServer: cpp-httplib's server with Tandem's limits on each
// connection. httplib 0.11 (Debian 12) serves a connection on one pool thread for as long as the
// client keeps it, queues connections beyond its threads without bound, reads headers of any
// total size, reads chunked or length-less bodies without the payload limit, and times out only
// single recv() calls — so a client trickling a byte every few seconds holds a thread forever.
// GuardedServer keeps httplib's parsing and routing (Server::process_request) but owns the
// connection loop and the socket stream:
// - a worker pool that never queues: a connection arriving when every worker is busy gets a
//   503 and is closed on the accepting thread, without reading it;
// - a deadline for reading one whole request (request line, headers and body), armed when its
//   first byte arrives; past it the read fails and the client gets 408;
// - a cap on the bytes of request line + headers (431) and on raw body bytes (413);
// - the idle time between requests of a kept-alive connection.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>

namespace tandem {

struct ConnectionLimits {
  int workers = 64;                  // connections served at once; more are refused (503)
  size_t max_header_bytes = 16384;   // request line + headers; more: 431
  size_t max_body_bytes = 8u << 20;  // decoded body; raw bytes get a margin for chunk framing
  double request_timeout_s = 30;     // reading one whole request; past it: 408
  int keep_alive_s = 3;              // idle time between two requests of a connection
  double write_timeout_s = 10;       // one send() waiting for the client to read
};

// Why reading the request being served on this thread failed (kNone: it did not, or no
// request is being served here). HttpServer's error handler turns it into the status.
enum class ReadLimit : uint8_t { kNone, kHeaderTooLarge, kBodyTooLarge, kTimeout };
ReadLimit current_read_limit();
// Closes the connection served on this thread after the response being prepared (a handler that
// answers without reading a declared body calls it: those bytes cannot be skipped cheaply).
void close_after_response();

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(const ConnectionLimits& limits);
  int listen_fd() const { return static_cast<int>(svr_sock_); }
  // Called on the accepting thread for each connection refused because every worker was busy.
  std::function<void()> on_refused;

 private:
  // httplib calls this on a pool thread for every accepted socket (a virtual of Server).
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
};

}  // namespace tandem
