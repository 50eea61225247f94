// BPE model: loading from tokenizer.json and merging words (see engine/tokenizer/bpe.h).
#include "engine/tokenizer/bpe.h"

#include <nlohmann/json.hpp>
#include <queue>

#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem {

using json = nlohmann::json;

BpeModel::BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  vocab_ = std::move(o.vocab_);
  id_to_token_ = std::move(o.id_to_token_);
  has_id_ = std::move(o.has_id_);
  merges_ = std::move(o.merges_);
  std::copy(std::begin(o.byte_ids_), std::end(o.byte_ids_), std::begin(byte_ids_));
  unk_id_ = o.unk_id_;
  fuse_unk_ = o.fuse_unk_;
  byte_fallback_ = o.byte_fallback_;
  ignore_merges_ = o.ignore_merges_;
  prefix_ = std::move(o.prefix_);
  suffix_ = std::move(o.suffix_);
  return *this;
}

namespace {

std::string string_or_empty(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

BpeModel BpeModel::from_json(const json& model, const std::string& where) {
  BpeModel m;
  const auto vocab = model.find("vocab");
  TANDEM_REQUIRE(vocab != model.end() && vocab->is_object(), kInvalidArgument, where,
                 ": BPE model has no \"vocab\" object");
  int32_t max_id = -1;
  m.vocab_.reserve(vocab->size());
  for (const auto& [token, id_json] : vocab->items()) {
    TANDEM_REQUIRE(id_json.is_number_integer() && id_json.get<int64_t>() >= 0 &&
                       id_json.get<int64_t>() < (int64_t{1} << 30),
                   kInvalidArgument, where, ": vocab entry '", token, "' has a bad id");
    const int32_t id = id_json.get<int32_t>();
    m.vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  // Tables are indexed by id: one id far past the others would allocate gigabytes for nothing
  // (a fuzzer's id 100012292 in a 12-entry vocabulary asked for 3.2 GB). Real vocabularies are
  // dense; a few holes are fine.
  const int64_t dense_enough = 2 * static_cast<int64_t>(vocab->size()) + 65536;
  TANDEM_REQUIRE(max_id < dense_enough, kInvalidArgument, where, ": vocab id ", max_id,
                 " is far past the ", vocab->size(),
                 " entries of the vocabulary (ids must be "
                 "below ",
                 dense_enough, ")");
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m.has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : m.vocab_) {
    m.id_to_token_[id] = token;
    m.has_id_[id] = true;
  }

  const std::string unk = string_or_empty(model, "unk_token");
  if (!unk.empty()) {
    if (auto id = m.token_to_id(unk)) m.unk_id_ = *id;
  }
  m.fuse_unk_ = bool_or(model, "fuse_unk", false);
  m.byte_fallback_ = bool_or(model, "byte_fallback", false);
  m.ignore_merges_ = bool_or(model, "ignore_merges", false);
  m.prefix_ = string_or_empty(model, "continuing_subword_prefix");
  m.suffix_ = string_or_empty(model, "end_of_word_suffix");
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto id = m.token_to_id(name);
    m.byte_ids_[b] = id ? *id : -1;
  }

  const auto merges = model.find("merges");
  if (merges != model.end() && !merges->is_null()) {
    TANDEM_REQUIRE(merges->is_array(), kInvalidArgument, where, ": \"merges\" is not an array");
    m.merges_.reserve(merges->size());
    int32_t rank = 0;
    for (const json& entry : *merges) {
      std::string a, b;
      if (entry.is_string()) {
        // Legacy form "a b": the pair is split at the first space (tokens never contain one).
        const std::string& s = entry.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        TANDEM_REQUIRE(space != std::string::npos, kInvalidArgument, where, ": merge '", s,
                       "' is not of the form \"a b\"");
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                 entry[1].is_string()) {
        a = entry[0].get<std::string>();
        b = entry[1].get<std::string>();
      } else {
        TANDEM_FAIL(kInvalidArgument, where, ": merge #", rank, " is neither \"a b\" nor [a, b]");
      }
      const auto ia = m.token_to_id(a), ib = m.token_to_id(b), iab = m.token_to_id(a + b);
      // A merge whose parts or result are not in the vocabulary can never fire; skip it.
      if (ia && ib && iab) m.merges_.emplace(pair_key(*ia, *ib), Merge{rank, *iab});
      ++rank;
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() >= kMaxCachedWord) {
    merge_word(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols start as single characters; id -1 marks a character missing from the vocabulary
  // (it never merges and is resolved by byte fallback or unk at the end).
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t byte_begin, byte_end;  // the source character, for byte fallback
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    utf8::next(word, pos);
    piece.clear();
    if (begin > 0) piece += prefix_;
    piece.append(word.substr(begin, pos - begin));
    if (pos == word.size()) piece += suffix_;
    const auto id = token_to_id(piece);
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back(
        {id ? *id : -1, n - 1, n + 1, static_cast<uint32_t>(begin), static_cast<uint32_t>(pos)});
  }
  sym.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol: ties go to the leftmost pair
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[left].next;
    if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    const auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, sym[left].id, sym[right].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = sym[c.pos];
    // Stale entries: the left symbol was merged away or changed, or its right neighbour did.
    if (left.id != c.left_id || left.next < 0 || sym[left.next].id != c.right_id) continue;
    const int32_t right = left.next;
    left.id = merges_.at(pair_key(c.left_id, c.right_id)).id;
    left.next = sym[right].next;
    left.byte_end = sym[right].byte_end;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    sym[right].id = -2;  // dead
    push_pair(left.prev);
    push_pair(c.pos);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (uint32_t b = s.byte_begin; b < s.byte_end; ++b) {
        all = all && byte_ids_[static_cast<uint8_t>(word[b])] >= 0;
      }
      if (all) {
        for (uint32_t b = s.byte_begin; b < s.byte_end; ++b) {
          out.push_back(byte_ids_[static_cast<uint8_t>(word[b])]);
        }
        continue;
      }
    }
    if (unk_id_) out.push_back(*unk_id_);
  }
}

}  // namespace tandem
