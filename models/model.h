// Model: a loaded checkpoint and its forward pass, run layer by layer on a Backend over a batch of
// sequences. Weights stay mapped in place where the backend reads host memory (CPU) and are
// uploaded once at load otherwise; the step's workspace is backend memory. The architecture files
// (arch_*.cpp) map their tensor names onto the shared ModelWeights; the forward pass below is
// shared by all of them.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kvstore/kv_step.h"
#include "kvstore/sequence_kv.h"
#include "models/config.h"
#include "models/safetensors.h"

namespace tandem {

// Weights of one transformer block. Empty views are absent tensors (no bias, no q/k norm...).
struct LayerWeights {
  TensorView attn_norm, attn_norm_b;  // [hidden]; _b only for LayerNorm
  TensorView wq, wk, wv, wo;          // [Hq*d, hidden], [Hkv*d, hidden] x2, [hidden, Hq*d]
  TensorView bq, bk, bv, bo;
  TensorView q_norm, k_norm;        // [head_dim] (Qwen3)
  TensorView ffn_norm, ffn_norm_b;  // [hidden]
  TensorView w_gate, w_up, w_down;  // gated: [ffn, hidden] x2, [hidden, ffn]; OPT: up=fc1, down=fc2
  TensorView b_gate, b_up, b_down;
};

struct ModelWeights {
  TensorView embed;        // [vocab, embed_dim]
  TensorView pos_embed;    // [max_context + pos_offset, hidden] (OPT)
  TensorView project_in;   // [hidden, embed_dim] (OPT-350m)
  TensorView project_out;  // [embed_dim, hidden]
  TensorView final_norm, final_norm_b;
  TensorView lm_head;  // [vocab, embed_dim]; == embed when tied
  std::vector<LayerWeights> layers;
  std::vector<Buffer> owned;  // small tensors converted to f32 (norms, biases)

  // Small 1-D tensors (norms, biases) are converted to f32 once; matrices stay mapped.
  TensorView small_f32(const TensorStore& store, const std::string& name, int64_t n);
  TensorView optional_small_f32(const TensorStore& store, const std::string& name, int64_t n);
};

// One sequence's share of a step: its new tokens and where its KV lives.
struct StepSequence {
  SequenceKv* kv = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every new token (perplexity, tests), else only the last
  bool decode = false;      // a decode step (sparse host attention allowed); else an exact prefill
  bool observe = false;     // the last prefill chunk of a prompt (seeds selection metadata)
};

// Where a model on the CPU backend reads its weights from (a device backend uploads them).
enum class WeightMemory : uint8_t {
  // The checkpoint's memory map: page cache in 4 KiB pages, no copy, shared between processes
  // that load the same files.
  kMap,
  // A copy in 2 MiB pages (host_heap_huge), the maps released: the decode's weight stream then
  // crosses no 4 KiB page boundary, where the hardware prefetchers stop (docs/decode-cpu.md,
  // 2026-11-30).
  kHuge,
  // kHuge where transparent huge pages are not "never" and MemAvailable holds the copy with room
  // to spare (Model::kWeightCopySlack), else kMap.
  kAuto,
};

class Model {
 public:
  // Loads dir (config.json, *.safetensors); throws tandem::Error naming the file on any fault.
  // `memory` applies on a host-accessible backend (Backend::host_accessible).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, Backend& backend,
                                     WeightMemory memory = WeightMemory::kMap);
  // Bytes MemAvailable must hold beyond the weights for WeightMemory::kAuto to copy them: the
  // larger of this and an eighth of the weights.
  static constexpr int64_t kWeightCopySlack = int64_t{1} << 30;

  const ModelConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  Backend& backend() { return backend_; }
  int64_t weight_bytes() const { return store_.total_bytes(); }
  // How the weights are held, for logs and benchmark JSON: "device" (uploaded), "huge" (copied
  // into 2 MiB pages) or "map" (the checkpoint's memory map); and why / how long the copy took
  // ("copied into 2 MiB pages in 0.6 s", "memory-mapped: transparent huge pages are never").
  std::string_view weight_memory() const { return weight_memory_; }
  const std::string& weight_memory_note() const { return weight_memory_note_; }
  DType weight_dtype() const { return store_.main_dtype(); }
  // Bytes of weights the matrix products of one step read (every layer matrix and lm_head).
  int64_t matmul_weight_bytes() const;
  KvShape kv_shape() const;

  // A plain contiguous cache for one sequence (the reference and --dense), in backend memory.
  std::unique_ptr<SequenceKv> new_dense_kv(int32_t capacity) const;

  // Runs one forward step: every sequence's new tokens go through all layers together (matrix
  // products over all rows of the batch). Returns logits f32 [rows, vocab] in host memory, rows
  // in batch order: n rows for a sequence with all_logits, else 1 (its last token). Valid until
  // the next call.
  TensorView forward(std::span<const StepSequence> batch);
  // forward without reading the logits back: they stay in backend memory (f32 [rows, vocab],
  // rows as above; the step may still be running), for Backend::sample, and logits_to_host
  // reads rows of them. Valid until the next step.
  TensorView forward_on_backend(std::span<const StepSequence> batch);
  // Rows [r0, r1) of the last step's logits in host memory (downloaded where the backend's
  // memory is not host-accessible; waits for the step). Valid until the next step.
  TensorView logits_to_host(int64_t r0, int64_t r1);

 private:
  Model(const std::filesystem::path& dir, Backend& backend, ModelConfig config, TensorStore store);
  // Every weight view of w_ (the empty ones too), each tensor once however many views share it
  // (lm_head tied to embed): the unique (data, bytes) keys in first-seen order, with the views.
  std::vector<std::pair<TensorView, std::vector<TensorView*>>> unique_weights();
  // Every weight view replaced by a copy in backend memory (backends the host cannot read).
  void upload_weights();
  // The weights copied into one 2 MiB-page buffer (host_heap_huge), each tensor 4 KiB aligned,
  // in parallel; every view re-pointed there.
  void copy_weights_huge();
  // The resolved choice of load(): copy_weights_huge() or nothing, with the note.
  void place_host_weights(WeightMemory memory);
  void ensure_workspace(int64_t n_tokens, int64_t n_logit_rows);
  void norm(const TensorView& in, const TensorView& w, const TensorView& b, const TensorView& out);
  // q of layer li for rows x: projection, q-norm, rope (into q).
  void query(int32_t li, const TensorView& in, const TensorView& pos, const TensorView& q);

  std::filesystem::path dir_;
  Backend& backend_;
  ModelConfig config_;
  TensorStore store_;
  ModelWeights w_;

  std::vector<Buffer> device_weights_;  // the uploaded weights, or the one 2 MiB-page copy
  std::string_view weight_memory_ = "map";
  std::string weight_memory_note_ = "memory-mapped";

  // Workspace in backend memory, grown on demand; sized for ws_tokens_ rows.
  int64_t ws_tokens_ = 0, ws_logit_rows_ = 0;
  Buffer ids_, pos_, pos_rows_, x_, h_, q_, k_, v_, o_, lse_, attn_out_, gate_, up_, emb_;
  Buffer logit_in_, logits_;
  int64_t last_rows_ = 0;   // logit rows of the last step
  Buffer pred_h_, pred_q_;  // layer-ahead predicted queries
  // Host side: ids and positions built here and uploaded; logits downloaded into host_logits_
  // when the backend's memory is not host-accessible.
  std::vector<int32_t> host_ids_, host_pos_;
  Buffer host_logits_;
};

// Architecture files: map checkpoint tensor names onto ModelWeights.
void map_llama_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w);  // + mistral
void map_qwen_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w);  // qwen2, qwen3
void map_opt_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w);

}  // namespace tandem
