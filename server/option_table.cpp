// The table of the tandem binary's subcommands and of every option they take (server/options.h
// says what reads it). An option is declared once per meaning: the few names two commands use
// differently (`--threads` is a count for `serve` and a list for `bench-cpu-attn`) are two
// entries with disjoint command sets. Defaults are written as they would be typed; a default
// known only at run time (the model's context) has none here and says what it is in `computed`.
// The KV, engine and HTTP defaults equal KvConfig's, EngineOptions' and HttpOptions' (checked by
// tests/test_options.cpp).
#include <algorithm>

#include "server/options.h"

namespace tandem {
namespace {

constexpr CommandSet kServe = command_bit(Command::kServe);
constexpr CommandSet kRun = command_bit(Command::kRun);
constexpr CommandSet kPerplexity = command_bit(Command::kPerplexity);
constexpr CommandSet kBenchDecode = command_bit(Command::kBenchDecode);
constexpr CommandSet kMakeModel = command_bit(Command::kMakeModel);
constexpr CommandSet kBenchSampler = command_bit(Command::kBenchSampler);
constexpr CommandSet kBench = command_bit(Command::kBench);
constexpr CommandSet kBenchCpuAttn = command_bit(Command::kBenchCpuAttn);
constexpr CommandSet kBenchKernels = command_bit(Command::kBenchKernels);
constexpr CommandSet kBenchGrammar = command_bit(Command::kBenchGrammar);
constexpr CommandSet kEvalRecall = command_bit(Command::kEvalRecall);
// The commands that load a model: they share the model, device and KV options.
constexpr CommandSet kLoads = kServe | kRun | kPerplexity | kBenchDecode | kEvalRecall;

constexpr OptGroup kCmd = OptGroup::kCommand, kModel = OptGroup::kModel, kKv = OptGroup::kKv;
constexpr int64_t kI64Max = INT64_MAX;

// The fields every entry has; the builders below add the type's own.
constexpr OptionSpec base(OptType t, std::string_view name, CommandSet c, OptGroup g,
                          std::string_view meta, std::string_view def, std::string_view help) {
  OptionSpec o;
  o.name = name;
  o.type = t;
  o.commands = c;
  o.group = g;
  o.meta = meta;
  o.def = def;
  o.help = help;
  return o;
}
constexpr OptionSpec flag(std::string_view name, CommandSet c, OptGroup g, std::string_view help) {
  return base(OptType::kBool, name, c, g, "", "", help);
}
constexpr OptionSpec integer(std::string_view name, CommandSet c, OptGroup g, std::string_view meta,
                             std::string_view def, int64_t lo, int64_t hi, std::string_view help) {
  OptionSpec o = base(OptType::kInt, name, c, g, meta, def, help);
  o.int_lo = lo;
  o.int_hi = hi;
  return o;
}
constexpr OptionSpec number(std::string_view name, CommandSet c, OptGroup g, std::string_view meta,
                            std::string_view def, double lo, double hi, std::string_view help) {
  OptionSpec o = base(OptType::kFloat, name, c, g, meta, def, help);
  o.lo = lo;
  o.hi = hi;
  return o;
}
constexpr OptionSpec text(std::string_view name, CommandSet c, OptGroup g, std::string_view meta,
                          std::string_view def, std::string_view help) {
  return base(OptType::kString, name, c, g, meta, def, help);
}
constexpr OptionSpec choice(std::string_view name, CommandSet c, OptGroup g,
                            std::string_view choices, std::string_view def, std::string_view help) {
  OptionSpec o = base(OptType::kEnum, name, c, g, choices, def, help);
  o.choices = choices;
  return o;
}
constexpr OptionSpec int_list(std::string_view name, CommandSet c, OptGroup g,
                              std::string_view meta, std::string_view def, int64_t lo, int64_t hi,
                              std::string_view help) {
  OptionSpec o = integer(name, c, g, meta, def, lo, hi, help);
  o.type = OptType::kIntList;
  return o;
}
constexpr OptionSpec number_list(std::string_view name, CommandSet c, OptGroup g,
                                 std::string_view meta, std::string_view def, double lo, double hi,
                                 std::string_view help) {
  OptionSpec o = number(name, c, g, meta, def, lo, hi, help);
  o.type = OptType::kFloatList;
  return o;
}
constexpr OptionSpec choice_list(std::string_view name, CommandSet c, OptGroup g,
                                 std::string_view meta, std::string_view choices,
                                 std::string_view def, std::string_view help) {
  OptionSpec o = base(OptType::kEnumList, name, c, g, meta, def, help);
  o.choices = choices;
  return o;
}

constexpr CommandSpec kCommands[] = {
    {Command::kServe, "serve", "--model DIR [options]",
     "Loads a model and serves the OpenAI-compatible HTTP API until SIGINT or SIGTERM (running "
     "requests get --shutdown-grace seconds to finish)."},
    {Command::kRun, "run", "--model DIR --prompt TEXT [options]",
     "Generates from one prompt: the text is streamed to stdout, prompt and decode tokens/s go to "
     "stderr."},
    {Command::kPerplexity, "perplexity", "--model DIR --file TEXT [options]",
     "Teacher-forced perplexity of a text through the decode path: the first --prefill tokens of "
     "each segment are prefilled, every later one is decoded, so the figure measures the hybrid "
     "KV cache (JSON)."},
    {Command::kBenchDecode, "bench-decode", "--model DIR [options]",
     "Prefill and decode speed of the forward pass by batch size and context depth, dense or "
     "hybrid KV (one JSON line each). Without KV options the cache is the dense one."},
    {Command::kMakeModel, "make-model", "--shape NAME --out DIR [options]",
     "Writes a checkpoint of a known shape with random weights, for benchmarks."},
    {Command::kBenchSampler, "bench-sampler", "[options]",
     "Time per draw of the sampler for greedy, temperature, top-k and top-p (JSON lines)."},
    {Command::kBench, "bench", "[--base-url URL] [options]",
     "Load-tests an OpenAI-compatible server with the flags of `vllm bench serve` (random "
     "and prefix_repetition datasets, multi-turn chats): progress on stderr, the result table on "
     "stdout, the figures as JSON with "
     "--save-result."},
    {Command::kBenchCpuAttn, "bench-cpu-attn", "[options]",
     "Bytes of host KV the host attention scans per second, against the memory's read bandwidth "
     "and the FMA roofline measured by the same run (JSON lines)."},
    {Command::kBenchKernels, "bench-kernels", "[options]",
     "GB/s of the CUDA merge and decode-attention kernels against the device's copy bandwidth, "
     "each checked against the CPU backend first (JSON lines; needs a CUDA device)."},
    {Command::kEvalRecall, "eval-recall", "--model DIR [--file JSONL] [options]",
     "Long-context retrieval accuracy through the decode path: each prompt of a recall set is "
     "prefilled, its answer decoded greedily and compared token for token; accuracy by context "
     "length and needle depth, with the share of host entries attended (JSON)."},
    {Command::kBenchGrammar, "bench-grammar", "--model DIR [--schema FILE] [options]",
     "Cost per decode step of grammar-constrained decoding (token mask + accept) on the model's "
     "tokenizer, at batch 1 and 8, walking valid documents of a few JSON Schemas (JSON lines)."},
};

constexpr OptionSpec kOptions[] = {
    // ---- Model and device: every command that loads a model ----
    text("model", kLoads, kModel, "DIR", "",
         "Hugging Face model folder (config.json, tokenizer.json, *.safetensors)")
        .needed(),
    integer("threads", kLoads, kModel, "N", "0", 0, 4096, "oneTBB worker threads (0: all cores)"),
    choice("device", kLoads, kModel, "cpu|cuda|auto", "auto",
           "backend of the forward pass; auto: cuda when this build has CUDA and a GPU is "
           "visible, else cpu (never the SIMT emulator)"),
    choice("weight-memory", kLoads, kModel, "auto|huge|map", "auto",
           "CPU backend: where the weights are read from: a copy in 2 MiB pages (huge; the "
           "decode reads them faster), or the checkpoint's memory map (map: no copy, the page "
           "cache shared between processes); auto: huge where transparent huge pages are on and "
           "the memory holds the copy, else map"),
    choice("device-check", kLoads, kModel, "auto|on|off", "auto",
           "compare a short GPU forward pass with the CPU's before use; auto: with --device auto, "
           "fall back to the CPU when they disagree; on: also with --device cuda, failing there"),

    // ---- KV cache: every command that loads a model ----
    flag("dense", kLoads, kKv, "one contiguous cache per sequence (no host tier): the reference"),
    integer("sinks", kLoads, kKv, "N", "4", 0, 4096, "first tokens kept on the device"),
    integer("window", kLoads, kKv, "N", "1024", 0, 1 << 24,
            "recent tokens kept on the device (0: everything on the host)"),
    integer("block", kLoads, kKv, "N", "64", 1, 4096, "tokens per block"),
    choice("sparse", kLoads, kKv, "full|hgca|topk|tau", "hgca",
           "which host entries attention reads: every one (exact), those whose moving-average "
           "attention weight exceeds --hgca-beta times the mean, --topk-blocks blocks, or the "
           "fewest whose attention mass reaches --tau"),
    number("hgca-beta", kLoads, kKv, "B", "1", 1e-6, 1e6, "threshold factor of --sparse hgca"),
    integer("topk-blocks", kLoads, kKv, "K", "16", 0, 1 << 24,
            "host blocks per KV head under --sparse topk"),
    integer("device-budget", kLoads, kKv, "N", "0", 0, 1 << 24,
            "--sparse topk: tokens of important host blocks each sequence keeps on the device per "
            "layer beside sinks and window, in whole blocks (chosen after prefill, recalled by "
            "--recall-interval; the CPU attends only selected blocks not there; 0: off)"),
    text("recall-interval", kLoads, kKv, "N|auto", "auto",
         "--device-budget: decode steps between recalls of a layer's important blocks to the "
         "device (0: never, the post-prefill set stays; auto: per layer, when its mean CPU "
         "compute ratio since its last recall would pass --recall-threshold at the next step)"),
    number("recall-threshold", kLoads, kKv, "R", "0.12", 1e-6, 1,
           "--recall-interval auto: the CPU compute ratio (CPU-attended host tokens / top-k "
           "budget tokens) above which a layer recalls"),
    number("tau", kLoads, kKv, "T", "0.9", 1e-6, 1,
           "--sparse tau: the share of the host entries' attention mass (over the query heads of "
           "a KV group) the selected entries reach (HCAttention Eq. 4)"),
    flag("similarity-reuse", kLoads, kKv,
         "--sparse topk or tau: a KV head reuses its last host selection while its query heads "
         "stay as similar to the query it was made for as their importance demands (CLO "
         "query-similarity cache; an error with full or hgca)"),
    number("reuse-eta", kLoads, kKv, "E", "0.95", -1, 1,
           "--similarity-reuse: cosine-similarity threshold of the most important heads; less "
           "important ones get lower thresholds (CLO Eq. 7-9)"),
    number("reuse-power", kLoads, kKv, "P", "2", 0, 64,
           "--similarity-reuse: exponent p of lambda = importance^p in the thresholds (larger: "
           "more reuse by heads of middling importance)"),
    flag("value-offload", kLoads, kKv,
         "--sparse tau or full: score the host entries from quantised keys (--key-bits) and sum "
         "the selected values with those approximate weights, never reading the host keys "
         "(HCAttention value offload; CPU backend; an error with hgca, topk, --dense or "
         "--similarity-reuse)"),
    choice("key-bits", kLoads, kKv, "8|4", "8",
           "--value-offload: bits of the key codes (per block, KV head and channel over the "
           "block's min/max)"),
    choice("cpu-attn", kLoads, kKv, "auto|parallel|ahead|ahead-oracle", "auto",
           "start of the host attention: with the layer's true query (parallel), one layer early "
           "with a predicted one (ahead), ahead fed the true query (ahead-oracle, a diagnosis "
           "mode); auto: ahead on a GPU, parallel on the CPU backend (no device work to hide it "
           "behind, and no second query product per layer)"),
    integer("cpu-threads", kLoads, kKv, "N", "0", 0, 4096, "host attention workers (0: all cores)"),
    number("maw-alpha", kLoads, kKv, "A", "0.1", 1e-6, 1,
           "moving-average factor of the attention weights --sparse hgca selects by"),
    choice("kv-dtype", kLoads, kKv, "f32|bf16|f16", "f32",
           "type of the stored KV: the hybrid store's blocks, or the dense cache with --dense"),
    number("kv-host-gib", kLoads, kKv, "G", "0", 0, 1 << 20,
           "bound of the host KV tier, cached prefixes included (0: half of MemAvailable at "
           "start-up)"),
    number("kv-device-gib", kLoads, kKv, "G", "0", 0, 1 << 20,
           "size of the device KV pool (0: enough for --max-batch sequences' sinks and windows)"),
    flag("no-prefix-cache", kLoads, kKv,
         "turn off the automatic prefix cache of the host tier (full blocks of finished, "
         "cancelled and preempted sequences kept for reuse, evicted least-recently-used)"),

    // ---- serve ----
    text("config", kServe, kCmd, "FILE", "",
         "JSON file of settings (keys are option names), a path or NAME[.json] in "
         "$TANDEM_CONFIG_DIR or configs/; the command line wins"),
    text("host", kServe, kCmd, "H", "127.0.0.1", "address to listen on"),
    integer("port", kServe, kCmd, "P", "8000", 0, 65535, "port to listen on (0: any free port)"),
    text("api-key", kServe, kCmd, "K", "",
         "every route but /health (and /metrics with --metrics-public) then needs "
         "`Authorization: Bearer K` (empty: no authentication)"),
    flag("metrics-public", kServe, kCmd,
         "with --api-key, serve /metrics without the key too (for a scraper on a trusted "
         "network)"),
    choice("tool-call-parser", kServe, kCmd, "auto|hermes|llama3_json|mistral|none", "auto",
           "how chat output is split into content and tool_calls when a request declares tools: "
           "`auto` reads the format from the chat template (none when it shows no tool syntax)"),
    choice("reasoning-parser", kServe, kCmd, "auto|think|none", "auto",
           "`think`: a leading <think>...</think> becomes reasoning_content; `auto`: when the "
           "chat template handles </think>"),
    text("allowed-origins", kServe, kCmd, "O,O", "*",
         "origins whose browser pages may call the API (CORS), comma-separated; `*` any; empty: "
         "no CORS headers"),
    text("served-model-name", kServe, kCmd, "NAME", "", "the model's name in the API")
        .computed("the model folder's name"),
    integer("max-batch", kServe, kCmd, "N", "64", 1, 4096, "running sequences at most"),
    integer("max-model-len", kServe, kCmd, "N", "", 1, 1 << 24,
            "prompt + generated tokens at most, up to the model's context")
        .computed("the model's context"),
    integer("max-waiting", kServe, kCmd, "N", "256", 0, 1 << 20,
            "requests queued beyond the running ones; more get 429"),
    integer("max-body-bytes", kServe, kCmd, "N", "8388608", 1, int64_t{1} << 34,
            "larger request bodies get 413"),
    integer("max-header-bytes", kServe, kCmd, "N", "16384", 1024, 1 << 24,
            "request line + headers larger than this get 431"),
    number("sse-keepalive-seconds", kServe, kCmd, "S", "15", 0, 86400,
           "a streamed response with nothing to send for S seconds (a long prefill) sends an SSE "
           "comment, so proxies and clients do not time out (0: never)"),
    number("request-timeout", kServe, kCmd, "S", "30", 0.01, 86400,
           "seconds to receive a whole request (headers and body) from its first byte; a "
           "slower client gets 408 and is disconnected"),
    integer("keep-alive-timeout", kServe, kCmd, "S", "3", 1, 3600,
            "seconds an idle connection is kept open between requests"),
    integer("http-threads", kServe, kCmd, "N", "", 4, 65536,
            "HTTP worker threads, one per open connection: the connection limit (one more "
            "gets 503 and is closed)")
        .computed("--max-batch + 64, at most 1024"),
    integer("prefill-chunk", kServe, kCmd, "N", "512", 1, 1 << 20,
            "prompt tokens of one sequence per step at most"),
    integer("step-token-budget", kServe, kCmd, "N", "2048", 1, 1 << 24,
            "tokens per engine step (decodes of running sequences always run)"),
    choice("log-level", kServe, kCmd, "trace|debug|info|warn|warning|error|err|critical|off",
           "info", "least severe log messages shown"),
    number("shutdown-grace", kServe, kCmd, "S", "5", 0, 3600,
           "seconds running requests get to finish after SIGINT/SIGTERM"),

    // ---- run (and serve: --seed) ----
    integer("seed", kServe | kRun, kCmd, "S", "", 0, kI64Max,
            "seed of sampling (serve: of requests without one); fixed, a sampled text repeats")
        .computed("random"),
    text("prompt", kRun, kCmd, "TEXT", "", "the prompt").needed(),
    integer("max-tokens", kRun, kCmd, "N", "128", 1, 1 << 24, "tokens to generate at most"),
    number("temperature", kRun, kCmd, "T", "", 0, 100, "sampling temperature (0: greedy)")
        .computed("the model's generation_config, else 0.8"),
    number("top-p", kRun, kCmd, "P", "", 0, 1, "nucleus sampling mass")
        .computed("the model's generation_config"),
    integer("top-k", kRun, kCmd, "K", "", 0, 1 << 24, "sample among the K likeliest (0: all)")
        .computed("the model's generation_config"),
    number("min-p", kRun, kCmd, "P", "0", 0, 1, "drop tokens below P times the likeliest's"),
    number("repetition-penalty", kRun, kCmd, "R", "", 0.01, 100,
           "penalty of tokens already in the sequence")
        .computed("the model's generation_config"),
    integer("ctx", kRun, kCmd, "N", "", 1, 1 << 24, "context of the sequence, up to the model's")
        .computed("the model's context"),
    flag("no-bos", kRun, kCmd, "do not prepend the beginning-of-sequence token"),
    flag("ignore-eos", kRun, kCmd, "generate --max-tokens even past end-of-sequence tokens"),

    // ---- perplexity ----
    text("file", kPerplexity, kCmd, "TEXT", "", "text file to evaluate").needed(),
    integer("ctx", kPerplexity, kCmd, "N", "", 2, 1 << 24,
            "tokens per segment (with the BOS token), up to the model's context")
        .computed("the model's context"),
    integer("prefill", kPerplexity, kCmd, "N", "1", 1, 1 << 24,
            "tokens of each segment prefilled; the rest are decoded (at most --ctx - 1)"),
    integer("max-segments", kPerplexity, kCmd, "N", "", 1, 1 << 30, "segments evaluated at most")
        .computed("every segment of the file"),
    text("file", kEvalRecall, kCmd, "JSONL", "",
         "the recall set: one JSON object per line with prompt_ids, answer_ids, context and depth "
         "(default: recall-eval.jsonl in the model folder)"),
    integer("max-samples", kEvalRecall, kCmd, "N", "", 1, 1 << 30,
            "samples evaluated at most (spread over the cells: every k-th line)"),
    integer("decode-last", kEvalRecall, kCmd, "N", "1", 0, 1 << 24,
            "the prompt's last N tokens go through decode steps, so that the KV policy decides "
            "the first answer token too (0: the whole prompt prefilled, exact attention)"),

    // ---- bench-decode ----
    int_list("batch", kBenchDecode, kCmd, "B,B", "1,8", 1, 1 << 24,
             "batch sizes; max: the largest whose KV fits the free memory (at most 1024)")
        .words("max"),
    int_list("depth", kBenchDecode, kCmd, "N,N", "", 1, 1 << 24,
             "tokens in the cache when decoding starts, each depth in fresh sequences")
        .computed("--prompt-len"),
    integer("prompt-len", kBenchDecode, kCmd, "N", "128", 1, 1 << 24,
            "the one depth when --depth is not given"),
    integer("gen", kBenchDecode, kCmd, "N", "32", 2, 1 << 24,
            "decode steps per depth, the first one a warm-up"),
    integer("chunk", kBenchDecode, kCmd, "N", "512", 1, 1 << 20, "prefill chunk, tokens"),
    choice("fill", kBenchDecode, kCmd, "prefill|import", "prefill",
           "how the context is built: chunked prefill (the real path, quadratic in the depth) or "
           "random K/V rows stored directly (hgca then selects no imported entry)"),
    number("window-frac", kBenchDecode, kCmd, "F", "0", 0, 1,
           "device window of each depth as a fraction of depth + gen, rounded up to a block (not "
           "with --dense or --window; 0: --window)"),
    number("reserve-gib", kBenchDecode, kCmd, "G", "2", 0, 1e6,
           "GiB kept free in each memory when --batch max sizes the batch"),
    integer("bw-bytes", kBenchDecode | kBenchCpuAttn, kCmd, "N", "1073741824", 1 << 20,
            int64_t{1} << 36, "bytes read to measure the memory's read bandwidth"),

    // ---- make-model ----
    text("shape", kMakeModel, kCmd, "NAME", "",
         "llama-3.2-1b, llama-3-8b, llama-3.1-8b (128K context) or tiny")
        .needed(),
    choice("dtype", kMakeModel, kCmd, "f32|bf16|f16", "bf16", "type of the weights"),
    text("out", kMakeModel, kCmd, "DIR", "", "folder to write (created)").needed(),
    integer("seed", kMakeModel, kCmd, "S", "1", 0, kI64Max, "seed of the weights"),

    // ---- bench-sampler ----
    integer("vocab", kBenchSampler, kCmd, "N", "128256", 2, 1 << 24, "logits per draw"),
    integer("iters", kBenchSampler, kCmd, "N", "200", 1, 1000000, "draws per setting"),

    // ---- bench (the flags of `vllm bench serve`) ----
    text("base-url", kBench, kCmd, "URL", "", "the server, http://HOST:PORT[/prefix]")
        .computed("http://--host:--port"),
    text("host", kBench, kCmd, "H", "127.0.0.1", "the server's host, without --base-url"),
    integer("port", kBench, kCmd, "P", "8000", 1, 65535, "the server's port, without --base-url"),
    choice("endpoint", kBench, kCmd, "/v1/completions|/v1/chat/completions", "",
           "the API route to load")
        .computed(
            "/v1/chat/completions for --backend openai-chat or --dataset-name multi_turn, else "
            "/v1/completions"),
    choice("backend", kBench, kCmd, "openai|vllm|openai-chat", "openai",
           "vllm's name for the API flavour"),
    choice("dataset-name", kBench, kCmd, "random|prefix_repetition|multi_turn", "random",
           "random: independent prompts; prefix_repetition: prompts sharing a few prefixes; "
           "multi_turn: --num-prompts chat conversations, each turn sent with the history"),
    text("model", kBench, kCmd, "NAME|DIR", "",
         "the served name, or a model folder (its tokenizer builds the prompts)")
        .computed("the server's first model (GET /v1/models)"),
    text("served-model-name", kBench, kCmd, "NAME", "", "the model name sent, over --model's"),
    text("tokenizer", kBench, kCmd, "DIR", "",
         "model folder whose tokenizer builds the prompts (without one: random words)")
        .computed("--model when it is a folder"),
    integer("num-prompts", kBench, kCmd, "N", "1000", 1, 1 << 24, "requests to send"),
    integer("max-concurrency", kBench, kCmd, "C", "0", 0, 4096,
            "requests in flight at most (0: no limit)"),
    text("request-rate", kBench, kCmd, "R|inf", "inf",
         "requests per second, Poisson arrivals (inf: all at once)"),
    number("burstiness", kBench, kCmd, "B", "1", 1e-3, 1e3,
           "gamma shape of the gaps between arrivals (1: Poisson)"),
    integer("random-input-len", kBench, kCmd, "I", "1024", 1, 1 << 24, "prompt tokens"),
    integer("random-output-len", kBench, kCmd, "O", "128", 1, 1 << 24, "max_tokens per request"),
    number("random-range-ratio", kBench, kCmd, "X", "0", 0, 0.999,
           "lengths uniform in [len * (1 - X), len * (1 + X)]"),
    integer("prefix-repetition-prefix-len", kBench, kCmd, "N", "256", 1, 1 << 24,
            "prefix_repetition: tokens of each shared prefix"),
    integer("prefix-repetition-suffix-len", kBench, kCmd, "N", "256", 1, 1 << 24,
            "prefix_repetition: tokens of each prompt's own suffix"),
    integer("prefix-repetition-num-prefixes", kBench, kCmd, "N", "10", 1, 1 << 24,
            "prefix_repetition: distinct prefixes (the prompts spread evenly over them)"),
    integer("prefix-repetition-output-len", kBench, kCmd, "N", "128", 1, 1 << 24,
            "prefix_repetition: max_tokens per request"),
    integer("multi-turn-turns", kBench, kCmd, "N", "4", 1, 1 << 16,
            "multi_turn: turns per conversation"),
    integer("multi-turn-input-len", kBench, kCmd, "N", "64", 1, 1 << 24,
            "multi_turn: tokens of each turn's new user message"),
    integer("multi-turn-output-len", kBench, kCmd, "N", "64", 1, 1 << 24,
            "multi_turn: max_tokens per turn"),
    flag("ignore-eos", kBench, kCmd, "ask the server to generate past end-of-sequence"),
    flag("stream", kBench, kCmd, "streamed responses (the default)"),
    flag("no-stream", kBench, kCmd, "whole responses"),
    text("api-key", kBench, kCmd, "K", "", "sent as `Authorization: Bearer K`")
        .computed("$OPENAI_API_KEY"),
    number("temperature", kBench, kCmd, "T", "0", 0, 100, "temperature sent (0: greedy)"),
    number("timeout", kBench, kCmd, "S", "600", 1, 86400, "seconds per request at most"),
    integer("seed", kBench, kCmd, "S", "0", 0, kI64Max, "seed of the prompts and arrivals"),
    choice_list("percentile-metrics", kBench, kCmd, "M,M", "ttft|tpot|itl|e2el", "ttft,tpot,itl",
                "metrics reported with percentiles"),
    number_list("metric-percentiles", kBench, kCmd, "P,P", "99", 0, 100,
                "percentiles reported of each metric"),
    text("goodput", kBench, kCmd, "M:MS ...", "",
         "service-level objectives, e.g. `ttft:500 tpot:50` (ttft, tpot, e2el in ms): goodput "
         "counts the requests meeting all")
        .several_words(),
    number("soak-seconds", kBench, kCmd, "S", "", 1, 1e7,
           "soak mode: requests back to back for S seconds (streamed, whole, aborted "
           "mid-stream and malformed ones), counted by status; prints and saves the summary "
           "instead of the benchmark's figures")
        .computed("off: --num-prompts requests"),
    number("abort-ratio", kBench, kCmd, "X", "0.1", 0, 1,
           "soak: share of requests aborted after their first streamed chunk"),
    number("malformed-ratio", kBench, kCmd, "X", "0.05", 0, 1,
           "soak: share of requests with a broken body (each must get a 4xx)"),
    number("stream-ratio", kBench, kCmd, "X", "0.5", 0, 1,
           "soak: share of the other requests that are streamed"),
    integer("soak-pid", kBench, kCmd, "PID", "0", 0, 1 << 30,
            "soak: the server process whose resident memory is sampled (0: none)"),
    number("sample-interval", kBench, kCmd, "S", "10", 0.1, 3600,
           "soak: seconds between memory samples and progress lines"),
    flag("no-warmup", kBench, kCmd, "no warm-up request first"),
    flag("quiet", kBench, kCmd, "no progress lines"),
    flag("disable-tqdm", kBench, kCmd, "no progress lines (vllm's name)"),
    flag("trust-remote-code", kBench, kCmd, "accepted for vllm's command lines; no effect"),
    text("save-result", kBench, kCmd, "[FILE]", "",
         "write the figures as JSON to FILE; alone, vllm's way: --result-dir/--result-filename")
        .value_optional(),
    text("result-dir", kBench, kCmd, "DIR", "", "folder of a bare --save-result's file"),
    text("result-filename", kBench, kCmd, "FILE", "", "file name of a bare --save-result")
        .computed("BACKEND-RATEqps[-concurrencyC]-MODEL-DATE.json"),

    // ---- bench-cpu-attn ----
    int_list("contexts", kBenchCpuAttn, kCmd, "N,N", "4096,8192,16384,32768,65536", 1, 1 << 30,
             "tokens of host KV per sequence"),
    int_list("batch", kBenchCpuAttn, kCmd, "B,B", "1,4", 1, 1 << 20, "sequences per call"),
    choice_list("dtypes", kBenchCpuAttn, kCmd, "T,T", "f32|bf16|f16", "bf16,f32", "KV types"),
    integer("heads-kv", kBenchCpuAttn, kCmd, "N", "8", 1, 256, "KV heads"),
    integer("group", kBenchCpuAttn, kCmd, "G", "4", 1, 64, "query heads per KV head"),
    integer("head-dim", kBenchCpuAttn, kCmd, "D", "128", 8, 1024, "head size, a multiple of 8"),
    integer("block", kBenchCpuAttn, kCmd, "N", "64", 1, 1 << 16, "tokens per host block"),
    int_list("threads", kBenchCpuAttn, kCmd, "N,N", "1,0", 0, 4096,
             "thread counts to measure (0: all cores)"),
    number("min-time", kBenchCpuAttn, kCmd, "S", "0.5", 0, 600,
           "seconds of calls per figure at least"),
    integer("footprint-mb", kBenchCpuAttn, kCmd, "MB", "1024", 1, 1 << 20,
            "MiB of layers rotated through, so that figures are memory's, not cache's"),
    integer("max-layer-mb", kBenchCpuAttn, kCmd, "MB", "2048", 1, 1 << 20,
            "configurations with a larger layer are skipped"),
    choice("pages", kBenchCpuAttn, kCmd, "huge|small", "huge",
           "pages of the KV layers: huge = 2 MiB (madvise, where THP allows), as the host store's "
           "pool; small = 4 KiB"),
    flag("huge-pages", kBenchCpuAttn, kCmd,
         "the same as --pages huge, now the default (kept so that older commands still run)"),

    // ---- bench-kernels ----
    integer("iters", kBenchKernels, kCmd, "N", "50", 1, 100000, "calls per timed round"),
    integer("reps", kBenchKernels, kCmd, "N", "5", 1, 1000, "rounds; the median is reported"),
    integer("copy-mb", kBenchKernels, kCmd, "MB", "1024", 16, 65536,
            "MiB copied to measure the device-to-device bandwidth"),

    // ---- bench-grammar ----
    text("model", kBenchGrammar, kCmd, "DIR", "", "model folder whose tokenizer.json is used")
        .needed(),
    text("schema", kBenchGrammar, kCmd, "FILE", "",
         "a JSON Schema file to measure instead of the built-in schemas"),
    integer("steps", kBenchGrammar, kCmd, "N", "512", 8, 100000,
            "longest document walked, in tokens"),
    integer("reps", kBenchGrammar, kCmd, "N", "5", 1, 1000,
            "walks per setting (cold ones each on a freshly compiled grammar)"),
};

}  // namespace

std::span<const CommandSpec> command_table() { return kCommands; }
std::span<const OptionSpec> option_table() { return kOptions; }

const CommandSpec* find_command(std::string_view name) {
  for (const CommandSpec& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

const CommandSpec& command_spec(Command c) {
  for (const CommandSpec& s : kCommands)
    if (s.id == c) return s;
  TANDEM_FAIL(kInternal, "command ", static_cast<int>(c), " is not in the table");
}

const OptionSpec* find_option(Command cmd, std::string_view name) {
  for (const OptionSpec& o : kOptions)
    if (o.name == name && (o.commands & command_bit(cmd)) != 0) return &o;
  return nullptr;
}

std::vector<const OptionSpec*> options_of(Command cmd) {
  std::vector<const OptionSpec*> out;
  for (const OptionSpec& o : kOptions)
    if ((o.commands & command_bit(cmd)) != 0) out.push_back(&o);
  return out;
}

}  // namespace tandem
