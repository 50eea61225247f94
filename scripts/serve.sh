#!/usr/bin/env bash
# Installs what is missing, builds, and runs Tandem on the default model. Until `tandem serve`
# exists this runs `tandem run` on a demo prompt. Model: $TANDEM_MODEL, else the bundled demo
# model (models/tandem-demo) once it exists, else ../shared/models/tinystories-656k.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build.sh
model="${TANDEM_MODEL:-}"
if [[ -z "$model" ]]; then
  for m in "$root/models/tandem-demo" "$root/../shared/models/tinystories-656k"; do
    if [[ -f "$m/config.json" ]]; then model="$m"; break; fi
  done
fi
if [[ -z "$model" ]]; then
  echo "serve.sh: no model found; set TANDEM_MODEL to a Hugging Face model folder" >&2
  exit 1
fi
exec build/tandem run --model "$model" --prompt "${TANDEM_PROMPT:-Once upon a time}" \
  --max-tokens "${TANDEM_MAX_TOKENS:-128}" "$@"
