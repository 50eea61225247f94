#!/usr/bin/env bash
# Accuracy of the sparse host policies against --dense: perplexity through the decode path for
# full, hgca (beta 0.5, 1, 2) and topk (12.5% and 25% of the host blocks) in both start modes, at
# window = 25% and 50% of the context. Writes the model's section docs/accuracy/MODEL.md and its raw
# JSON lines docs/accuracy/MODEL.jsonl, then rebuilds docs/accuracy.md from every section plus
# docs/accuracy/notes.md (the reading of the figures, written by hand).
#   scripts/accuracy.sh [MODEL_DIR TEXT_FILE CTX BLOCK]
# TEXT_FILE may be heldout:N — the first 16,000 bytes (about 4K tokens) of each of the first N
# long held-out files that MODEL_DIR/eval.json lists (long_files, from /usr/lib/python3.11), so a
# model trained by scripts/train_model.py is measured on text it never saw, e.g.
#   scripts/accuracy.sh models/tandem-long heldout:3 4096 64
# `scripts/accuracy.sh --policies [RECALL_DIR [LONG_DIR]]` writes the table of every policy and
# option at 25% and 12.5% device budgets (docs/accuracy/policies.md, scripts/accuracy_policies.py).
# `scripts/accuracy.sh --assemble` only rebuilds docs/accuracy.md (after editing notes.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

assemble() {
  {
    echo "# Accuracy of the host policies"
    echo
    echo "One section per model, each written by \`scripts/accuracy.sh\` (command in the section)."
    echo
    for f in docs/accuracy/*.md; do
      [[ "$f" == docs/accuracy/notes.md ]] && continue
      cat "$f"
      echo
    done
    [[ -f docs/accuracy/notes.md ]] && cat docs/accuracy/notes.md
  } > docs/accuracy.md
}

if [[ "${1:-}" == --assemble ]]; then assemble; exit 0; fi
if [[ "${1:-}" == --policies ]]; then
  # Every policy and option at 25% and 12.5% device budgets: needle accuracy on a recall model,
  # perplexity on a language model (scripts/accuracy_policies.py).
  recall="${2:-models/tandem-recall}"
  long="${3:-models/tandem-long}"
  [[ -x build/tandem ]] || scripts/build.sh >&2
  mapfile -t files < <(python3 -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))["long_files"][:3]))' "$long/eval.json")
  text=$(mktemp /tmp/tandem-heldout.XXXXXX)
  trap 'rm -f "$text"' EXIT
  for f in "${files[@]}"; do head -c 16000 "/usr/lib/python3.11/$f"; done > "$text"
  mkdir -p docs/accuracy
  python3 scripts/accuracy_policies.py --recall "$recall" --long "$long" --text "$text" \
    --text-label "the first 16,000 bytes of each of ${files[*]} (held-out)" \
    --out docs/accuracy/policies
  assemble
  exit 0
fi
model="${1:-../shared/models/tinystories-656k}"
text="${2:-tests/fixtures/text/tinystories-sampled.txt}"
ctx="${3:-512}"
block="${4:-16}"
[[ -x build/tandem ]] || scripts/build.sh >&2
if [[ "$text" == heldout:* ]]; then
  n="${text#heldout:}"
  mapfile -t files < <(python3 -c 'import json, sys
print("\n".join(json.load(open(sys.argv[1]))["long_files"][:int(sys.argv[2])]))' "$model/eval.json" "$n")
  text=$(mktemp /tmp/tandem-heldout.XXXXXX)
  trap 'rm -f "$text"' EXIT
  for f in "${files[@]}"; do head -c 16000 "/usr/lib/python3.11/$f"; done > "$text"
  text_label="heldout:$n"
  text_note="Text: the first 16,000 bytes of each of ${files[*]} (held-out files of /usr/lib/python3.11)."
else
  text_label="$text"
  text_note=""
fi
name=$(basename "$model")
mkdir -p docs/accuracy
out=docs/accuracy/$name.md
raw=docs/accuracy/$name.jsonl
: > "$raw"
run() { build/tandem perplexity --model "$model" --file "$text" --ctx "$ctx" --prefill 1 --block "$block" "$@" | tee -a "$raw"; }

run --dense >/dev/null
for w in $((ctx / 4)) $((ctx / 2)); do
  host_blocks=$(( (ctx - w + block - 1) / block ))
  for mode in parallel ahead; do
    run --window "$w" --sparse full --cpu-attn "$mode" >/dev/null
    for beta in 0.5 1 2; do run --window "$w" --sparse hgca --hgca-beta "$beta" --cpu-attn "$mode" >/dev/null; done
    for frac in 8 4; do  # 1/8 = 12.5%, 1/4 = 25%
      k=$(( (host_blocks + frac - 1) / frac ))
      run --window "$w" --sparse topk --topk-blocks "$k" --cpu-attn "$mode" >/dev/null
    done
  done
done

{
  echo "## $name"
  echo
  echo "Produced by \`scripts/accuracy.sh $model $text_label $ctx $block\` on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(date -u +%Y-%m-%d). Perplexity is teacher-forced through the decode path (\`tandem perplexity --prefill 1\`):"
  echo "every token after the first is a decode step, so the window, the host tier, the policy and the start"
  echo "mode are what is measured. sinks 4, block $block, context $ctx. \"host attended\" is the fraction of"
  echo "(host token, KV head) entries the policy selected, averaged over decode steps and layers."
  if [[ -n "$text_note" ]]; then echo "$text_note"; fi
  echo
  echo "| window | mode | policy | ppl | vs dense | host attended |"
  echo "|---|---|---|---|---|---|"
  dense=$(head -1 "$raw" | sed 's/.*"ppl":\([0-9.e+-]*\).*/\1/')
  tail -n +2 "$raw" | while read -r line; do
    w=$(sed 's/.*"window":\([0-9]*\).*/\1/' <<<"$line")
    mode=$(sed 's/.*"cpu_attn":"\([a-z-]*\)".*/\1/' <<<"$line")
    pol=$(sed 's/.*"sparse":"\([a-z]*\)".*/\1/' <<<"$line")
    ppl=$(sed 's/.*"ppl":\([0-9.e+-]*\).*/\1/' <<<"$line")
    frac=$(sed 's/.*"host_fraction_attended":\([0-9.e+-]*\).*/\1/' <<<"$line")
    case "$pol" in
      hgca) pol="hgca beta=$(sed 's/.*"hgca_beta":\([0-9.e+-]*\).*/\1/' <<<"$line")" ;;
      topk) pol="topk k=$(sed 's/.*"topk_blocks":\([0-9]*\).*/\1/' <<<"$line") blocks" ;;
    esac
    printf "| %s | %s | %s | %.4f | %+.2f%% | %.3f |\n" "$w" "$mode" "$pol" "$ppl" \
      "$(awk -v a="$ppl" -v b="$dense" 'BEGIN{print (a/b-1)*100}')" "$frac"
  done
  echo
  printf "Dense reference: ppl %.4f.\n" "$dense"
} > "$out"
cat "$out"
assemble
