"""The trainer of scripts/train_model.py (the entry: arguments and the stages in order), one job
per module:

- settings: repository and corpus paths, special tokens, evaluation sizes, the presets;
- corpus: the corpus files, the held-out split, the generated tables;
- tokenizer: the byte-level BPE (trainer and encoder);
- hf_format: the Hugging Face tokenizer.json, tokenizer_config.json, config.json, tensor names;
- safetensors_io: F32 safetensors written and read by hand;
- model: the Llama-architecture model;
- data: the tokenized corpus (cached) and the training stream;
- train_loop: the learning-rate schedule and the training loop with checkpoints;
- recall: the passkey task and the recall evaluation (dense greedy accuracy by context, depth);
- kv_recall: the key-value recall task (multi-query associative recall as text lines);
- evaluate: held-out perplexities;
- export: the checkpoint folder and the C++ test fixture;
- log: timestamped progress lines.
"""
