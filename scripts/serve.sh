#!/usr/bin/env bash
# Installs what is missing, builds, and serves the default model with the OpenAI-compatible
# HTTP API (http://127.0.0.1:8000 unless --host/--port say otherwise). Model: $TANDEM_MODEL,
# else the bundled demo model (models/tandem-demo) once it exists, else
# ../shared/models/tinystories-656k. Extra arguments go to `tandem serve` (e.g. --port 8080).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
TANDEM_BUILD_TARGET=tandem scripts/build.sh  # the server binary only, not the tests
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
exec "${TANDEM_BUILD_DIR:-$root/build}/tandem" serve --model "$model" "$@"
