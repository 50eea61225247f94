// safetensors parsing and memory mapping. Format: u64 little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw bytes
// (offsets relative to the end of the header).
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/json_depth.h"

namespace tandem {
namespace {

using json = nlohmann::json;

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else
    return false;
  return true;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path.string()) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TANDEM_FAIL(kNotFound, path_, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    TANDEM_FAIL(kIo, path_, ": cannot stat");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      TANDEM_FAIL(kIo, path_, ": mmap failed: ", std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
}

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 8) TANDEM_FAIL(kInvalidArgument, name, ": truncated (no safetensors header)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > size - 8)
    TANDEM_FAIL(kInvalidArgument, name, ": truncated (header of ", header_len, " bytes, file of ",
                size, ")");
  if (header_len > kMaxSafetensorsHeaderBytes)
    TANDEM_FAIL(kInvalidArgument, name, ": safetensors header of ", header_len, " bytes (at most ",
                kMaxSafetensorsHeaderBytes, ")");
  const std::string_view text(reinterpret_cast<const char*>(data) + 8, header_len);
  check_json_depth(text, kMaxFileJsonDepth, name);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    TANDEM_FAIL(kInvalidArgument, name, ": invalid safetensors header: ", e.what());
  }
  if (!header.is_object()) TANDEM_FAIL(kInvalidArgument, name, ": header is not a JSON object");
  const uint8_t* base = data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  SafetensorsHeader out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      // Some writers record tied tensors as metadata aliases: {"embed": "lm_head"}.
      if (it.value().is_object())
        for (auto m = it.value().begin(); m != it.value().end(); ++m)
          if (m.value().is_string())
            out.aliases.emplace_back(m.key(), m.value().get<std::string>());
      continue;
    }
    const json& t = it.value();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") ||
        !t.contains("data_offsets") || !t["dtype"].is_string() || !t["shape"].is_array() ||
        !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
      TANDEM_FAIL(kInvalidArgument, name, ": malformed header entry for tensor \"", it.key(), "\"");
    TensorEntry e;
    e.dtype_name = t["dtype"].get<std::string>();
    e.dtype_ok = parse_dtype(e.dtype_name, &e.dtype);
    // The element count may not overflow: a shape whose bytes exceed the data is refused below,
    // but only if the product was computed without wrapping around.
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        TANDEM_FAIL(kInvalidArgument, name, ": bad shape for tensor \"", it.key(), "\"");
      e.shape.push_back(d.get<int64_t>());
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(e.shape.back()), &numel);
    }
    const json& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      TANDEM_FAIL(kInvalidArgument, name, ": bad data_offsets for tensor \"", it.key(), "\"");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      TANDEM_FAIL(kInvalidArgument, name, ": truncated: tensor \"", it.key(),
                  "\" needs bytes up to ", end, " but the file has ", data_size, " bytes of data");
    uint64_t bytes = 0;
    if (e.dtype_ok &&
        (overflow ||
         __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &bytes) ||
         bytes != end - begin))
      TANDEM_FAIL(kInvalidArgument, name, ": tensor \"", it.key(), "\" has ", end - begin,
                  " bytes for shape ", shape_str(e.shape), " of ", e.dtype_name);
    e.data = base + begin;
    out.tensors.emplace_back(it.key(), std::move(e));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_safetensors_index(std::string_view text,
                                                                         const std::string& name) {
  check_json_depth(text, kMaxFileJsonDepth, name);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TANDEM_FAIL(kInvalidArgument, name, ": invalid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    TANDEM_FAIL(kInvalidArgument, name, ": missing \"weight_map\"");
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      TANDEM_FAIL(kInvalidArgument, name, ": bad weight_map entry \"", it.key(), "\"");
    out.emplace_back(it.key(), it.value().get<std::string>());
  }
  return out;
}

void TensorStore::add_file(const std::filesystem::path& path) {
  auto file = std::make_unique<MappedFile>(path);
  SafetensorsHeader h = parse_safetensors(file->data(), file->size(), file->path());
  for (auto& [alias, stored] : h.aliases) aliases_[alias] = stored;
  for (auto& [tname, e] : h.tensors) {
    e.file = file.get();
    tensors_[tname] = std::move(e);
  }
  files_.push_back(std::move(file));
}

TensorStore TensorStore::open(const std::filesystem::path& dir) {
  TensorStore s;
  s.dir_ = dir;
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    std::ifstream in(index, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) TANDEM_FAIL(kIo, index.string(), ": cannot read");
    const auto weight_map = parse_safetensors_index(text.str(), index.string());
    std::map<std::string, int> shards;
    for (const auto& [tensor, shard] : weight_map) shards[shard] = 1;
    for (const auto& [shard, unused] : shards) {
      const std::filesystem::path p = dir / shard;
      if (!std::filesystem::exists(p))
        TANDEM_FAIL(kNotFound, p.string(), ": shard listed in ", index.filename().string(),
                    " not found");
      s.add_file(p);
    }
    for (const auto& [tensor, shard] : weight_map)
      if (!s.tensors_.count(tensor))
        TANDEM_FAIL(kInvalidArgument, (dir / shard).string(), ": tensor \"", tensor,
                    "\" listed in the index is not in the shard");
  } else {
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(dir))
      for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    if (files.empty())
      TANDEM_FAIL(kNotFound, (dir / "model.safetensors").string(),
                  ": no *.safetensors weights in the model folder");
    std::sort(files.begin(), files.end());
    for (const auto& p : files) s.add_file(p);
  }
  return s;
}

const TensorEntry* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return &it->second;
  auto a = aliases_.find(name);
  if (a != aliases_.end()) {
    it = tensors_.find(a->second);
    if (it != tensors_.end()) return &it->second;
  }
  return nullptr;
}

bool TensorStore::has(const std::string& name) const { return find(name) != nullptr; }

void TensorStore::unmap() {
  for (auto& f : files_) f->unmap();
  mapped_ = false;
}

TensorView TensorStore::get(const std::string& name, std::initializer_list<int64_t> shape) const {
  TANDEM_CHECK(mapped_, "tensor \"", name,
               "\" asked for after the checkpoint's maps were released");
  const TensorEntry* e = find(name);
  if (e == nullptr)
    TANDEM_FAIL(kInvalidArgument,
                (dir_ / (files_.size() == 1 ? std::filesystem::path(files_[0]->path()).filename()
                                            : "model.safetensors.index.json"))
                    .string(),
                ": missing tensor \"", name, "\"");
  const std::vector<int64_t> want(shape);
  if (!e->dtype_ok)
    TANDEM_FAIL(kUnsupported, e->file->path(), ": tensor \"", name, "\" has unsupported dtype ",
                e->dtype_name, " (F32, F16 and BF16 are supported)");
  if (e->shape != want)
    TANDEM_FAIL(kInvalidArgument, e->file->path(), ": tensor \"", name, "\" has shape ",
                shape_str(e->shape), ", expected ", shape_str(want));
  TensorView v(const_cast<void*>(e->data), e->dtype, shape);
  return v;
}

int64_t TensorStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& f : files_) n += static_cast<int64_t>(f->size());
  return n;
}

DType TensorStore::main_dtype() const {
  std::map<DType, int64_t> bytes;
  for (const auto& [name, e] : tensors_)
    if (e.dtype_ok) {
      int64_t n = dtype_size(e.dtype);
      for (int64_t d : e.shape) n *= d;
      bytes[e.dtype] += n;
    }
  DType best = DType::kF32;
  int64_t most = -1;
  for (const auto& [t, n] : bytes)
    if (n > most) most = n, best = t;
  return best;
}

}  // namespace tandem
