// tokenizer.json regexes on PCRE2 (see engine/tokenizer/regex.h for the dialect and the limits).
#define PCRE2_CODE_UNIT_WIDTH 32
#include "engine/tokenizer/regex.h"

#include <pcre2.h>

#include <chrono>
#include <optional>

#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem {

namespace {

bool is_hex(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Oniguruma's \uHHHH is \x{HHHH} in PCRE2 (whose own \u is an error); everything else is passed
// through, escapes included, so that \\u stays a backslash and a 'u'.
std::vector<char32_t> translate(std::string_view pattern) {
  const std::vector<char32_t> in = utf8::code_points(pattern);
  std::vector<char32_t> out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 >= in.size()) {
      out.push_back(in[i]);
      continue;
    }
    if (in[i + 1] == 'u' && i + 5 < in.size() && is_hex(in[i + 2]) && is_hex(in[i + 3]) &&
        is_hex(in[i + 4]) && is_hex(in[i + 5])) {
      for (char32_t c : {U'\\', U'x', U'{', in[i + 2], in[i + 3], in[i + 4], in[i + 5], U'}'})
        out.push_back(c);
      i += 5;
      continue;
    }
    out.push_back(in[i]);
    out.push_back(in[++i]);
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, 256);
  if (n < 0) return "error " + std::to_string(code);
  std::string out;
  for (int i = 0; i < n; ++i) utf8::append(out, static_cast<char32_t>(buf[i]));
  return out;
}

// Per-thread match state: match data and the match context are written by every search, and a
// JIT stack may be used by one thread at a time. 1 MiB of JIT stack lets a match backtrack over a
// whitespace run of some hundred thousand characters; past that the interpreter (heap frames,
// PCRE2's 20 MB heap limit) takes over.
struct ThreadState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  ThreadState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  ThreadState(const ThreadState&) = delete;
  ThreadState& operator=(const ThreadState&) = delete;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::shared_ptr<const Regex::Code> Regex::compile_code(const std::vector<char32_t>& units,
                                                       uint32_t options, std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(units.data()), units.size(),
                                   options | PCRE2_UTF, &err, &offset, nullptr);
  TANDEM_REQUIRE(code != nullptr, kUnsupported, "regex '", pattern, "': ", pcre2_message(err),
                 " at code point ", offset);
  auto c = std::make_shared<Regex::Code>();
  c->code = code;
  // Without JIT (a platform PCRE2 has none for) the interpreter runs the same pattern, slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return c;
}

Regex Regex::compile(std::string_view pattern) {
  Regex re;
  re.pattern_ = std::string(pattern);
  re.code_ = compile_code(translate(pattern), PCRE2_UCP, pattern);
  return re;
}

Regex Regex::literal(std::string_view text) {
  Regex re;
  re.pattern_ = std::string(text);
  re.code_ = compile_code(utf8::code_points(text), PCRE2_LITERAL, text);  // (UCP not allowed)
  return re;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const char32_t* text, size_t n) const {
  using Clock = std::chrono::steady_clock;
  ThreadState& ts = thread_state();
  pcre2_set_match_limit(ts.context,
                        static_cast<uint32_t>(std::min<uint64_t>(limits_.match_limit, UINT32_MAX)));
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                         limits_.seconds + limits_.seconds_per_char * static_cast<double>(n)));
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text);
  const auto fail = [&](const std::string& why) {
    TANDEM_FAIL(kInvalidArgument, "the text is too hard for the tokenizer's regex '", pattern_,
                "' (", why, " after ", n, " characters); split or simplify the text");
  };

  std::vector<std::pair<size_t, size_t>> out;
  std::optional<size_t> last_end;
  size_t from = 0;
  for (uint32_t calls = 0; from <= n; ++calls) {
    // Clock reads are kept off the per-match path: every 16 searches.
    if ((calls & 15) == 15 && Clock::now() > deadline) fail("time budget exceeded");
    // The subject is code points decoded from valid UTF-8: no surrogates, nothing past U+10FFFF.
    int rc = pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK, ts.data, ts.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, ts.data,
                       ts.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT) {
      fail(cat("step limit of ", limits_.match_limit, " exceeded: ", pcre2_message(rc)));
    }
    TANDEM_CHECK(rc >= 0, "PCRE2 match of '", pattern_, "' failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.data);
    const size_t b = ov[0], e = ov[1];
    if (b == e && last_end == e) {  // the Rust iterator's rule: no empty match at the last end
      from = e + 1;
      continue;
    }
    out.emplace_back(b, e);
    last_end = e;
    from = e > b ? e : e + 1;
  }
  return out;
}

}  // namespace tandem
