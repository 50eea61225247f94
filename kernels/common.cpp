// Out-of-line error construction (keeps the check macros small at every call site).
#include "kernels/common.h"

namespace tandem {

void throw_error(ErrorKind kind, const std::string& msg, const char* file, int line) {
  throw Error(kind, cat(msg, " [", file, ":", line, "]"));
}

}  // namespace tandem
