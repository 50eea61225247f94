// Declarations of the generated Unicode tables in engine/tokenizer/unicode_data.cpp (see the header
// of that file for the layout and how to regenerate it). Only engine/tokenizer/unicode.cpp reads
// these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::unicode_data {

extern const uint32_t kGeneralCategoryRanges[];
extern const size_t kGeneralCategoryRangesSize;
extern const uint32_t kCombiningClassRanges[];
extern const size_t kCombiningClassRangesSize;
extern const uint32_t kCanonicalDecompositionIndex[];
extern const size_t kCanonicalDecompositionIndexSize;
extern const uint32_t kCanonicalDecompositionData[];
extern const size_t kCanonicalDecompositionDataSize;
extern const uint32_t kCompatDecompositionIndex[];
extern const size_t kCompatDecompositionIndexSize;
extern const uint32_t kCompatDecompositionData[];
extern const size_t kCompatDecompositionDataSize;
extern const uint32_t kCompositions[];
extern const size_t kCompositionsSize;
extern const uint32_t kLowercaseIndex[];
extern const size_t kLowercaseIndexSize;
extern const uint32_t kLowercaseData[];
extern const size_t kLowercaseDataSize;
extern const char kUnicodeVersion[];

}  // namespace tandem::unicode_data
