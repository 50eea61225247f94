// TensorStore: the tensors of a checkpoint, memory-mapped from one *.safetensors file or from the
// shards listed in model.safetensors.index.json. Nothing is copied: views point into the maps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace tandem {

// A read-only memory map of a whole file (RAII).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // the file's, still after unmap()
  const std::string& path() const { return path_; }
  // Releases the map (data() becomes null); at most once, also done by the destructor.
  void unmap();

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

struct TensorEntry {
  std::string dtype_name;  // as written in the header ("F32", "BF16", ...)
  bool dtype_ok = false;   // F32, F16 or BF16
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  const MappedFile* file = nullptr;
};

// The parsed header of one safetensors file held in memory (data, size): its tensors, with data
// pointers into `data` (TensorEntry::file left null), and the __metadata__ aliases. Checks that
// every tensor's bytes lie inside the data. Throws tandem::Error(kInvalidArgument) naming `name`.
struct SafetensorsHeader {
  std::vector<std::pair<std::string, TensorEntry>> tensors;
  std::vector<std::pair<std::string, std::string>> aliases;  // alias -> stored name
};
// Headers larger than this are refused (the limit of the reference implementation).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& name);

// The weight_map of model.safetensors.index.json text: (tensor, shard file) pairs. Throws
// tandem::Error(kInvalidArgument) naming `name`.
std::vector<std::pair<std::string, std::string>> parse_safetensors_index(std::string_view text,
                                                                         const std::string& name);

class TensorStore {
 public:
  // Opens dir/model.safetensors.index.json if present, else every dir/*.safetensors. Checks
  // headers and that every tensor's bytes lie inside its file (a truncated file is an error).
  static TensorStore open(const std::filesystem::path& dir);

  bool has(const std::string& name) const;
  // The tensor `name` with exactly `shape`; throws naming the file and the tensor when it is
  // missing, mis-shaped or of an unsupported dtype.
  TensorView get(const std::string& name, std::initializer_list<int64_t> shape) const;
  size_t size() const { return tensors_.size(); }
  int64_t total_bytes() const;
  DType main_dtype() const;  // dtype of most weight bytes, for logs
  // Releases every file's map once the caller has copied what it needs (Model: the weights
  // uploaded to a device or copied into 2 MiB pages): views from get() dangle after it, and
  // get() itself is then an error (kInternal). has(), total_bytes() and main_dtype() still work.
  void unmap();
  bool mapped() const { return mapped_; }

 private:
  void add_file(const std::filesystem::path& path);
  const TensorEntry* find(const std::string& name) const;

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::unordered_map<std::string, TensorEntry> tensors_;
  std::unordered_map<std::string, std::string> aliases_;  // __metadata__ name -> stored name
  bool mapped_ = true;
};

}  // namespace tandem
