// The BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges (either JSON form),
// byte fallback to <0xNN> tokens, unk, ignore_merges (Llama-3), continuing_subword_prefix and
// end_of_word_suffix. Merging uses a priority queue ordered by (rank, position), which is what
// both the Rust library and the JS port compute. Results per word are cached.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

// Hash/equality that let unordered_map<std::string, V> be probed with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, StringEq>;

class BpeModel {
 public:
  // `where` names the file in error messages.
  static BpeModel from_json(const nlohmann::json& model, const std::string& where);

  BpeModel() = default;
  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of one pre-tokenized word. Characters that are not in the vocabulary become
  // their <0xNN> byte tokens (byte_fallback, when all exist) or unk; without unk they are dropped.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when the id is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  bool fuse_unk() const { return fuse_unk_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix

  // Word cache (words shorter than kMaxCachedWord bytes), cleared when it grows too large.
  static constexpr size_t kMaxCachedWord = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace tandem
