#!/usr/bin/env bash
# Installs the Debian packages Tandem needs, only those missing; quiet when nothing is missing.
# Idempotent. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git clang-format
  libtbb-dev libspdlog-dev nlohmann-json3-dev libcpp-httplib-dev catch2 libpcre2-dev
  libboost-context-dev
  # clang and its sanitizer/libFuzzer runtimes: the sanitizer stage of scripts/test.sh
  # (scripts/sanitize.sh) and the fuzz targets (scripts/fuzz.sh).
  clang libclang-rt-14-dev
)
# Node tools (reference tokenizers, the OpenAI SDK test): Debian's unless node/npm already exist.
command -v node >/dev/null || PACKAGES+=(nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)
# Reference-data generation (scripts/gen_reference_logits.py) needs PyTorch; the tests do not.
if [[ "${TANDEM_SETUP_TORCH:-0}" == 1 ]]; then PACKAGES+=(python3-torch python3-numpy); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
