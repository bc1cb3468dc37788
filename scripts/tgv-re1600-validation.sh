#!/usr/bin/env bash
# The runs behind docs/validation.md, "Under-resolved flows", on a GPU machine with the binaries
# of scripts/gpu-pack.sh in .gpu/ (16 host cores assumed). Usage: scripts/tgv-re1600-validation.sh
# PART OUT [SECONDS], PART one of
#   reference   tgv-re1600-256 (spectral 256³ on 12 cores), hit-64-compare on the GPU, inviscid
#               Taylor–Green with 64³ and 96³ particles to t = 3 on the GPU
#   particles   tgv-re1600-96-compare on the GPU (about 14 minutes: stopped after SECONDS, then
#               `finish`), tgv-re1600-compare and tgv-re100-compare on the CPU
#   finish      resumes tgv-re1600-96-compare to t = 20; tgv-re1600-96-compare with 64³
#               particles (and a 64³ grid) on the GPU
# The runs live in /tmp/vpm-validation (so `finish` finds what `particles` left); runs still
# going after SECONDS (default 540) are interrupted (SIGINT: a checkpoint, then exit) and OUT
# receives a tar of the runs' CSV files and manifests.
set -uo pipefail
part=$1
out=$2
vpm() { timeout -s INT -k 60 "$seconds" .gpu/bin/vpm "$@"; }
cases=.gpu/cases
seconds=${3:-540}
work=/tmp/vpm-validation
mkdir -p "$work" "$out"
inviscid() { # N: Taylor–Green at ν = 0, N³ particles, to t = 3
  sed -e 's/^nu = .*/nu = 0.0/' -e 's/^t_end = .*/t_end = 3.0/' \
    -e 's/^spectra_times = .*/spectra_times = [0.0, 3.0]/' -e 's/^cfl = .*//' \
    -e 's/^dt_max = .*/dt = 0.01/' -e "s/^n = 96/n = $1/" \
    "$cases/tgv-re1600-96-compare.toml" >"$work/tgv-inviscid-$1.toml"
  vpm run "$work/tgv-inviscid-$1.toml" --out "$work/tgv-inviscid-$1" --device cuda --threads 4
}
case $part in
reference)
  vpm run "$cases/tgv-re1600-256.toml" --out "$work/tgv-re1600-256" --threads 12 >"$work/ref.log" 2>&1 &
  vpm run "$cases/hit-64-compare.toml" --out "$work/hit-64-compare" --device cuda --threads 4
  inviscid 64
  inviscid 96
  wait
  ;;
particles)
  vpm run "$cases/tgv-re1600-96-compare.toml" --out "$work/tgv-re1600-96-compare" --device cuda --threads 8 &
  vpm run "$cases/tgv-re1600-compare.toml" --out "$work/tgv-re1600-compare" --device cpu --threads 4 &
  vpm run "$cases/tgv-re100-compare.toml" --out "$work/tgv-re100-compare" --device cpu --threads 4
  wait
  ;;
finish)
  vpm resume "$work/tgv-re1600-96-compare" --threads 12 &
  sed -e 's/^n = 96/n = 64/' "$cases/tgv-re1600-96-compare.toml" >"$work/tgv-re1600-64-compare.toml"
  vpm run "$work/tgv-re1600-64-compare.toml" --out "$work/tgv-re1600-64-compare" --device cuda --threads 4
  wait
  ;;
*)
  echo "unknown part $part" >&2
  exit 2
  ;;
esac
cd "$work" && tar czf "$out/$part.tgz" --exclude='checkpoints' --exclude='*.npz' --exclude='*.vtp' .
