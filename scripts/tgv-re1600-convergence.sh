#!/usr/bin/env bash
# The runs behind docs/validation.md, "Accuracy against resolution: the issue 23 defaults", on a
# machine with two GPUs and the binaries of scripts/gpu-pack.sh (VPM=path/to/vpm overrides
# .gpu/bin/vpm): GPU 0 runs Taylor–Green Re = 1600 with 192³ particles (tgv-re1600-96-compare
# with n = 192, no fields; about 17.5 min on an H100); GPU 1 runs the 512³ spectral reference
# (tgv-re1600-512, 5 min), inviscid Taylor–Green with 64³ particles to t = 3, then the compare
# case at 64³, 96³ and 128³. Resumable: a call stops every run after SECONDS (SIGINT: a
# checkpoint), the next continues them; finished runs are skipped. The runs live in
# /tmp/vpm-tgv; $OUT (default ./out) receives tgv.tgz with their CSV files, manifests and logs.
# Then: python3 scripts/tgv-re1600-convergence.py DIR (DIR: where tgv.tgz was unpacked).
# Usage: scripts/tgv-re1600-convergence.sh SECONDS
set -uo pipefail
secs=$1
vpmbin=${VPM:-$PWD/.gpu/bin/vpm}
OUT=${OUT:-$PWD/out}
cases=$PWD/cases
work=/tmp/vpm-tgv
mkdir -p "$work" "$OUT"
deadline=$(( $(date +%s) + secs ))
mk() { # name n [inviscid]
  local f=$work/$1.toml
  [ -f "$f" ] && return
  sed -e "s/^n = 96/n = $2/" -e 's/^fields_times = .*/fields_times = []/' \
    "$cases/tgv-re1600-96-compare.toml" >"$f"
  if [ "${3:-}" = inviscid ]; then
    sed -i -e 's/^nu = .*/nu = 0.0/' -e 's/^t_end = .*/t_end = 3.0/' \
      -e 's/^spectra_times = .*/spectra_times = [0.0, 3.0]/' -e 's/^cfl = .*//' \
      -e 's/^dt_max = .*/dt = 0.01/' "$f"
  fi
}
step() { # gpu name casefile threads
  local gpu=$1 name=$2 case=$3 thr=$4 dir=$work/$2
  [ -f "$dir.DONE" ] && return 0
  [ -f "$dir.FAILED" ] && return 0
  local left=$(( deadline - $(date +%s) ))
  [ $left -lt 30 ] && return 1
  local t0=$(date +%s) rc
  if [ -d "$dir" ]; then
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 60 $left "$vpmbin" resume "$dir" --threads $thr >>"$dir.log" 2>&1; rc=$?
  else
    CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 60 $left "$vpmbin" run "$case" --out "$dir" --device cuda --threads $thr >>"$dir.log" 2>&1; rc=$?
  fi
  echo "$name segment rc=$rc wall=$(( $(date +%s) - t0 ))s" >>"$work/segments.txt"
  [ $rc -eq 0 ] && touch "$dir.DONE"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && touch "$dir.FAILED"
  return $rc
}
mk tgv192 192; mk tgv64 64; mk tgv96 96; mk tgv128 128; mk inv64 64 inviscid
lane0() { step 0 tgv192 "$work/tgv192.toml" 14; }
lane1() {
  step 1 tgv512 "$cases/tgv-re1600-512.toml" 14; step 1 inv64 "$work/inv64.toml" 14
  step 1 tgv64 "$work/tgv64.toml" 14; step 1 tgv96 "$work/tgv96.toml" 14
  step 1 tgv128 "$work/tgv128.toml" 14
}
lane0 & lane1; wait
nvidia-smi --query-gpu=name --format=csv >"$work/gpus.txt" 2>&1
cd "$work" && find . -type f \( -name '*.csv' -o -name '*.json' -o -name '*.log' -o -name '*.txt' -o -name '*.toml' -o -name '*.DONE' -o -name '*.FAILED' \) -size -20M | tar czf "$OUT/tgv.tgz" -T -
ls -la "$OUT"; cat "$work/segments.txt"; for f in "$work"/*.log; do echo "== $f"; tail -3 "$f"; done
