// Errors and checks shared by every room: TANDEM_CHECK throws a typed tandem::Error that
// carries the source location; library code never calls exit().
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tandem {

// What went wrong, coarse enough for the server to pick an HTTP status.
enum class ErrorKind : uint8_t {
  kInvalidArgument,  // bad input from a user (400)
  kNotFound,         // missing file, unknown model or route (404)
  kUnsupported,      // a valid input this build cannot handle (400)
  kOutOfMemory,      // a pool or allocation is exhausted (503/429)
  kIo,               // reading or mapping a file failed
  kInternal,         // a broken invariant: a bug
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string msg) : std::runtime_error(std::move(msg)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Concatenates anything streamable into one string: cat("n=", n, " too big").
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(ErrorKind kind, const std::string& msg, const char* file, int line);

}  // namespace tandem

// Internal invariant: failure is a bug; the message names the file and line.
#define TANDEM_CHECK(cond, ...)                                                                \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                    \
                            ::tandem::cat("check failed: " #cond ": ", __VA_ARGS__), __FILE__, \
                            __LINE__);                                                         \
  } while (0)

// User-facing failure of a given kind; the message is shown as is (no source location).
#define TANDEM_FAIL(kind, ...) \
  throw ::tandem::Error(::tandem::ErrorKind::kind, ::tandem::cat(__VA_ARGS__))
#define TANDEM_REQUIRE(cond, kind, ...)          \
  do {                                           \
    if (!(cond)) TANDEM_FAIL(kind, __VA_ARGS__); \
  } while (0)
