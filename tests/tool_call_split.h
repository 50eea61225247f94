// Test helper for the tool-call parser: the parse of a text fed in pieces, and the check that
// every way of cutting it (at each byte, byte by byte, at random points) gives the one-shot parse.
#pragma once

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls/tool_call_parser.h"

namespace tandem::test {

inline tool_calls::ParsedOutput parse_in_pieces(std::string_view text,
                                                const tool_calls::ParserOptions& options,
                                                uint64_t seed, const std::vector<size_t>& cuts) {
  tool_calls::ToolCallParser parser(options, seed);
  tool_calls::ParsedOutput out;
  size_t from = 0;
  for (size_t cut : cuts) {
    tool_calls::accumulate(out, parser.push(text.substr(from, cut - from)));
    from = cut;
  }
  tool_calls::accumulate(out, parser.push(text.substr(from)));
  tool_calls::accumulate(out, parser.finish());
  return out;
}

// The one-shot parse of text, after checking that every split of it agrees.
inline tool_calls::ParsedOutput parse_checked(std::string_view text,
                                              const tool_calls::ParserOptions& options,
                                              uint64_t seed = 7) {
  const tool_calls::ParsedOutput whole = tool_calls::parse_all(text, options, seed);
  for (size_t i = 0; i <= text.size(); ++i) {
    INFO("cut at byte " << i << " of: " << text);
    REQUIRE(parse_in_pieces(text, options, seed, {i}) == whole);
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  INFO("1-byte deltas of: " << text);
  REQUIRE(parse_in_pieces(text, options, seed, bytes) == whole);
  std::mt19937_64 rng(text.size());
  for (int round = 0; round < 20 && text.size() > 1; ++round) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 4 == 0) cuts.push_back(i);
    REQUIRE(parse_in_pieces(text, options, seed, cuts) == whole);
  }
  return whole;
}

}  // namespace tandem::test
