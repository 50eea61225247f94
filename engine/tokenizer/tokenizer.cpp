// Tokenizer: loading tokenizer.json / tokenizer_config.json, added-token splitting, encode,
// decode and StreamDecoder (see engine/tokenizer/tokenizer.h).
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pipeline.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"
#include "kernels/json_depth.h"

namespace tandem {
namespace tok {

using json = nlohmann::json;

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip;
};

// Byte trie over added-token contents: leftmost-longest matching, like the Rust AhoCorasick
// (MatchKind::LeftmostLongest) and the JS DictionarySplitter.
class AddedTrie {
 public:
  void insert(std::string_view s, int32_t token_index) {
    if (s.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    first_byte_[static_cast<uint8_t>(s[0])] = true;
    size_t n = 0;
    for (char c : s) {
      const uint8_t b = static_cast<uint8_t>(c);
      auto& kids = nodes_[n].kids;
      auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == b; });
      if (it == kids.end()) {
        kids.emplace_back(b, static_cast<int32_t>(nodes_.size()));
        n = nodes_.size();
        nodes_.emplace_back();
      } else {
        n = static_cast<size_t>(it->second);
      }
    }
    nodes_[n].token = token_index;
  }
  // Longest token starting at text[pos]: returns its index and length, or -1.
  int32_t match(std::string_view text, size_t pos, size_t* len) const {
    if (nodes_.empty() || !first_byte_[static_cast<uint8_t>(text[pos])]) return -1;
    int32_t best = -1;
    size_t n = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(text[i]);
      const auto& kids = nodes_[n].kids;
      auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == b; });
      if (it == kids.end()) break;
      n = static_cast<size_t>(it->second);
      if (nodes_[n].token >= 0) {
        best = nodes_[n].token;
        *len = i + 1 - pos;
      }
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;
    int32_t token = -1;
  };
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

struct TokenizerImpl {
  std::string name;
  BpeModel model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  PostProcessor post;
  DecoderPlan decoder;
  std::vector<AddedToken> added;
  StringMap<size_t> added_by_content;
  std::unordered_map<int32_t, size_t> added_by_id;
  std::unordered_set<int32_t> special_ids;
  AddedTrie trie_all;      // every added token
  AddedTrie trie_regular;  // non-special added tokens only (parse_special = false)
  std::optional<int32_t> bos, eos;
  int32_t vocab_size = 0;

  std::optional<int32_t> token_to_id(std::string_view t) const {
    if (const auto it = added_by_content.find(t); it != added_by_content.end()) {
      return added[it->second].id;
    }
    return model.token_to_id(t);
  }
  const std::string* id_to_token(int32_t id, bool* is_added) const {
    if (const auto it = added_by_id.find(id); it != added_by_id.end()) {
      *is_added = true;
      return &added[it->second].content;
    }
    *is_added = false;
    return model.id_to_token(id);
  }
};

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  TANDEM_REQUIRE(std::filesystem::is_regular_file(path, ec), kNotFound, path.string(),
                 ": file not found");
  std::ifstream in(path, std::ios::binary);
  TANDEM_REQUIRE(in.good(), kIo, path.string(), ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  TANDEM_REQUIRE(!in.bad(), kIo, path.string(), ": read error");
  return ss.str();
}

json parse_json(std::string_view text, const std::string& where) {
  // The pipeline objects (Sequence of Sequence ...) are built recursively.
  check_json_depth(text, kMaxFileJsonDepth, where);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    try {
      const json strict = json::parse(text);  // throws the parse error with its position
    } catch (const json::exception& e) {      // a parse_error, or out_of_range for 1e400
      TANDEM_FAIL(kInvalidArgument, where, ": invalid JSON: ", e.what());
    }
    TANDEM_FAIL(kInvalidArgument, where, ": invalid JSON");
  }
  TANDEM_REQUIRE(j.is_object(), kInvalidArgument, where, ": top level is not a JSON object");
  return j;
}

// A token name in tokenizer_config.json: "..." or {"content": "..."}; empty when absent/null.
std::string config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return {};
}

std::shared_ptr<TokenizerImpl> build(const json& tj, const json* config, const std::string& where) {
  auto impl = std::make_shared<TokenizerImpl>();
  impl->name = where;

  const auto model = tj.find("model");
  TANDEM_REQUIRE(model != tj.end() && model->is_object(), kInvalidArgument, where,
                 ": no \"model\" object");
  std::string type = model->value("type", "");
  if (type.empty() && model->contains("merges")) type = "BPE";  // old files omit the type
  TANDEM_REQUIRE(type == "BPE", kUnsupported, where, ": model type '", type,
                 "' is not supported (only BPE)");
  impl->model = BpeModel::from_json(*model, where);

  int32_t max_id = impl->model.max_id();
  if (const auto at = tj.find("added_tokens"); at != tj.end() && at->is_array()) {
    for (const json& a : *at) {
      TANDEM_REQUIRE(a.is_object() && a.contains("id") && a.contains("content") &&
                         a["content"].is_string() && a["id"].is_number_integer(),
                     kInvalidArgument, where, ": added token without id/content");
      const std::string content = a["content"].get<std::string>();
      AddedToken t{token_id(a["id"], where, "added token '" + content + "' id"), content,
                   a.value("special", false), a.value("lstrip", false), a.value("rstrip", false)};
      max_id = std::max(max_id, t.id);
      const size_t index = impl->added.size();
      impl->added_by_content[t.content] = index;
      impl->added_by_id[t.id] = index;
      if (t.special) impl->special_ids.insert(t.id);
      impl->trie_all.insert(t.content, static_cast<int32_t>(index));
      if (!t.special) impl->trie_regular.insert(t.content, static_cast<int32_t>(index));
      impl->added.push_back(std::move(t));
    }
  }
  // As for the vocabulary (bpe.cpp): tables downstream (the model's vocabulary check, the
  // grammar's token index) are indexed by id.
  const int64_t dense_enough = 2 * (static_cast<int64_t>(impl->model.max_id()) + 1 +
                                    static_cast<int64_t>(impl->added.size())) +
                               65536;
  TANDEM_REQUIRE(max_id < dense_enough, kInvalidArgument, where, ": added token id ", max_id,
                 " is far past the vocabulary (ids must be below ", dense_enough, ")");
  impl->vocab_size = max_id + 1;

  impl->normalizer = make_normalizer(tj.value("normalizer", json()), where);
  impl->pre_tokenizer = make_pre_tokenizer(tj.value("pre_tokenizer", json()), where);
  const auto lookup = [raw = impl.get()](std::string_view t) { return raw->token_to_id(t); };
  impl->post = make_post_processor(tj.value("post_processor", json()), lookup, where);
  impl->decoder = DecoderPlan::from_json(tj.value("decoder", json()), where);

  std::string bos_name, eos_name;
  if (config != nullptr) {
    bos_name = config_token(*config, "bos_token");
    eos_name = config_token(*config, "eos_token");
    if (const auto extra = config->find("additional_special_tokens");
        extra != config->end() && extra->is_array()) {
      for (const json& e : *extra) {
        const std::string name = e.is_string()   ? e.get<std::string>()
                                 : e.is_object() ? e.value("content", "")
                                                 : std::string();
        if (const auto id = impl->token_to_id(name); id && !name.empty())
          impl->special_ids.insert(*id);
      }
    }
    // transformers' LlamaTokenizerFast and GemmaTokenizerFast rebuild the post-processor from
    // add_bos_token / add_eos_token (defaults true / false) when they load.
    static const std::unordered_set<std::string> kRebuilds = {
        "LlamaTokenizer",         "LlamaTokenizerFast", "CodeLlamaTokenizer",
        "CodeLlamaTokenizerFast", "GemmaTokenizer",     "GemmaTokenizerFast"};
    if (kRebuilds.count(config->value("tokenizer_class", "")) != 0) {
      const bool add_bos = config->value("add_bos_token", true);
      const bool add_eos = config->value("add_eos_token", false);
      const auto bos = impl->token_to_id(bos_name), eos = impl->token_to_id(eos_name);
      if ((!add_bos || bos) && (!add_eos || eos)) {
        impl->post = PostProcessor{};
        if (add_bos) impl->post.prefix.push_back(*bos);
        if (add_eos) impl->post.suffix.push_back(*eos);
      }
    }
  }
  if (!bos_name.empty()) impl->bos = impl->token_to_id(bos_name);
  if (!impl->bos && config == nullptr && !impl->post.prefix.empty())
    impl->bos = impl->post.prefix[0];
  if (!eos_name.empty()) impl->eos = impl->token_to_id(eos_name);
  return impl;
}

std::shared_ptr<TokenizerImpl> build_checked(std::string_view text, std::string_view config_text,
                                             const std::string& where,
                                             const std::string& config_where) {
  const json tj = parse_json(text, where);
  json config;
  if (!config_text.empty()) config = parse_json(config_text, config_where);
  try {
    return build(tj, config_text.empty() ? nullptr : &config, where);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    TANDEM_FAIL(kInvalidArgument, where, ": unexpected content: ", e.what());
  }
}

}  // namespace
}  // namespace tok

// ---- Tokenizer ---------------------------------------------------------------------------------

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  std::error_code ec;
  TANDEM_REQUIRE(std::filesystem::is_directory(dir, ec), kNotFound, dir.string(),
                 ": tokenizer directory not found");
  const auto tj = dir / "tokenizer.json";
  const auto cfg = dir / "tokenizer_config.json";
  const std::string text = tok::read_file(tj);
  std::string config_text;
  if (std::filesystem::is_regular_file(cfg, ec)) {
    config_text = tok::read_file(cfg);
    if (config_text.empty()) config_text = "{}";
  }
  return Tokenizer(tok::build_checked(text, config_text, tj.string(), cfg.string()));
}

Tokenizer Tokenizer::from_json_file(const std::filesystem::path& tokenizer_json) {
  const std::string text = tok::read_file(tokenizer_json);
  return Tokenizer(tok::build_checked(text, {}, tokenizer_json.string(), {}));
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, std::string_view config_json,
                                    const std::string& name) {
  return Tokenizer(tok::build_checked(tokenizer_json, config_json, name, name + " (config)"));
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool add_special,
                                       bool parse_special) const {
  const tok::TokenizerImpl& t = *impl_;
  std::string repaired;
  std::string_view text = raw;
  if (!utf8::is_valid(raw)) {
    repaired = utf8::repair(raw);
    text = repaired;
  }

  // 1. Split on added tokens.
  struct Section {
    size_t b, e;
    int32_t added;  // index into t.added, or -1 for text
  };
  std::vector<Section> sections;
  const tok::AddedTrie& trie = parse_special ? t.trie_all : t.trie_regular;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const int32_t a = trie.match(text, i, &len);
    if (a < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({start, i, -1});
    sections.push_back({i, i + len, a});
    i += len;
    start = i;
  }
  if (start < text.size()) sections.push_back({start, text.size(), -1});

  // lstrip / rstrip: trim the whitespace of the neighbouring text (JS trimEnd / trimStart).
  const auto trim_end = [&](Section& s) {
    while (s.e > s.b) {
      size_t k = s.e - 1;
      while (k > s.b && utf8::is_continuation(text[k])) --k;
      size_t p = k;
      if (!unicode::is_js_space(utf8::next(text, p))) break;
      s.e = k;
    }
  };
  const auto trim_start = [&](Section& s) {
    while (s.b < s.e) {
      size_t p = s.b;
      if (!unicode::is_js_space(utf8::next(text, p))) break;
      s.b = p;
    }
  };
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].added < 0) continue;
    const tok::AddedToken& a = t.added[sections[i].added];
    if (a.lstrip && i > 0 && sections[i - 1].added < 0) trim_end(sections[i - 1]);
    if (a.rstrip && i + 1 < sections.size() && sections[i + 1].added < 0)
      trim_start(sections[i + 1]);
  }

  // 2. Normalize, pre-tokenize and run the model on each text section.
  std::vector<int32_t> ids;
  if (add_special) ids = t.post.prefix;
  std::vector<std::string> pieces;
  std::vector<int32_t> section_ids;
  for (const Section& s : sections) {
    if (s.added >= 0) {
      ids.push_back(t.added[s.added].id);
      continue;
    }
    if (s.e == s.b) continue;
    std::string piece(text.substr(s.b, s.e - s.b));
    if (t.normalizer) t.normalizer->apply(piece);
    if (piece.empty()) continue;
    pieces.clear();
    pieces.push_back(std::move(piece));
    if (t.pre_tokenizer) t.pre_tokenizer->apply(pieces, s.b == 0);
    section_ids.clear();
    for (const std::string& p : pieces) t.model.encode_word(p, section_ids);
    // fuse_unk joins runs of unk within the section (the JS port fuses across words too).
    const auto unk = t.model.unk_id();
    for (size_t i = 0; i < section_ids.size(); ++i) {
      if (t.model.fuse_unk() && unk && section_ids[i] == *unk && i > 0 &&
          section_ids[i - 1] == *unk) {
        continue;
      }
      ids.push_back(section_ids[i]);
    }
  }
  if (add_special) ids.insert(ids.end(), t.post.suffix.begin(), t.post.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  StreamDecoder d(*this, skip_special);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  out += d.flush();
  return out;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  bool added;
  const std::string* s = impl_->id_to_token(id, &added);
  return s ? *s : std::string();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view tok) const {
  return impl_->token_to_id(tok);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::is_special(int32_t id) const { return impl_->special_ids.count(id) != 0; }

// ---- StreamDecoder ---------------------------------------------------------------------------

struct StreamDecoder::State {
  explicit State(const tok::DecoderPlan& plan) : chars(plan.char_steps()) {}
  bool skip_special;
  bool first = true;
  utf8::Repairer repair;
  tok::CharStepper chars;
  std::string bytes, text;
};

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : impl_(tokenizer.impl_), state_(std::make_unique<State>(impl_->decoder)) {
  state_->skip_special = skip_special;
}
StreamDecoder::~StreamDecoder() = default;
StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
StreamDecoder& StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

namespace {

// Runs complete UTF-8 text through the decoder's character steps.
std::string through_chars(const tok::DecoderPlan& plan, tok::CharStepper& chars,
                          const std::string& text) {
  if (plan.char_steps().empty()) return text;
  std::string out;
  for (size_t pos = 0; pos < text.size();) chars.push(utf8::next(text, pos), out);
  return out;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  State& s = *state_;
  const tok::TokenizerImpl& t = *impl_;
  if (s.skip_special && t.special_ids.count(id) != 0) return {};
  bool added = false;
  const std::string* token = t.id_to_token(id, &added);
  if (token == nullptr) return {};  // an id outside the vocabulary is skipped
  s.bytes.clear();
  if (t.decoder.join_with_space() && !s.first) s.bytes.push_back(' ');
  t.decoder.token_bytes(*token, added, s.first, s.bytes);
  s.first = false;
  s.text.clear();
  s.repair.feed(s.bytes, s.text);
  return through_chars(t.decoder, s.chars, s.text);
}

std::string StreamDecoder::flush() {
  State& s = *state_;
  s.text.clear();
  s.repair.finish(s.text);
  std::string out = through_chars(impl_->decoder, s.chars, s.text);
  s.chars.flush(out);
  return out;
}

}  // namespace tandem
