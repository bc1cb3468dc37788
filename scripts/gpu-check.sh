#!/usr/bin/env bash
# GPU checks in one command, on a machine with an NVIDIA GPU and no Rust toolchain, from what
# scripts/gpu-pack.sh packed into .gpu/ (build there first; carry ".gpu" to the GPU machine):
#   tests   the GPU test binaries .gpu/tests/gpu-* (all-pairs) and .gpu/tests/gpu_ewald-* (Ewald)
#   bench   vpm bench kernel (all-pairs kernels, f32, vs CPU f64 on a sample)
#   ewald   vpm bench ewald --device cuda (GPU particle-mesh Ewald, vs CPU f64 on a sample)
#   run     short `vpm run … --device cuda` runs of periodic cases (hit-32-compare,
#           hit-64-compare; a case without [vortex] gets one), t_end shortened to RUN_T_END;
#           the manifest must record the GPU and its peak memory; the first case is also
#           interrupted by SIGINT and resumed on the CPU, which must say so
#   sweep   launch-configuration sweep of the all-pairs kernels, cubins, registers, SASS counts
#   ncu     an Nsight Compute profile of one all-pairs launch per kernel (when ncu exists)
# Usage, from the project root on the GPU machine: scripts/gpu-check.sh  (or .gpu/gpu-check.sh)
# Environment: OUT (results; default ./gpu-out), GPU_DIR (the packed folder; default: this
# script's folder when it holds bin/vpm, else ../.gpu from it), STEPS (default
# "tests bench ewald run"; add sweep ncu for kernel tuning), SIZES (bench kernel N list),
# REPEATS, CONFIGS (BLOCKxTPTxUNROLL[xMINB] list: the first is benchmarked at every size, all of
# them at SWEEP_N), EWALD_N (bench ewald lattice sizes), EWALD_ACCURACY, RUN_CASES, RUN_T_END,
# VPM_KERNELS_DIR (try edited .cu files without a rebuild).
set -uo pipefail
H=$(cd "$(dirname "$0")" && pwd)
if [ -z "${GPU_DIR:-}" ]; then
  if [ -x "$H/bin/vpm" ]; then GPU_DIR=$H; else GPU_DIR=$H/../.gpu; fi
fi
G=$(cd "$GPU_DIR" && pwd) || { echo "no packed folder at $GPU_DIR (run scripts/gpu-pack.sh)"; exit 1; }
VPM=$G/bin/vpm
OUT=${OUT:-$PWD/gpu-out}
SIZES=${SIZES:-16384,65536,262144,1048576}
REPEATS=${REPEATS:-5}
CONFIGS=${CONFIGS:-256x2x4}
SWEEP_N=${SWEEP_N:-1048576}
EWALD_N=${EWALD_N:-32,64,96}
EWALD_ACCURACY=${EWALD_ACCURACY:-1e-6}
RUN_CASES=${RUN_CASES:-hit-32-compare hit-64-compare}
RUN_T_END=${RUN_T_END:-0.1}
STEPS=${STEPS:-tests bench ewald run}
mkdir -p "$OUT"
work=$(mktemp -d)
status=0
say() { echo "== $*"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }
note_fail() { echo "!! $*"; status=1; }

say "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1 | tee "$OUT/smi.txt"
# NVRTC (libnvrtc.so) and cuFFT (libcufft.so) must be findable by dlopen.
for lib in nvrtc cufft; do
  ldconfig -p 2>/dev/null | grep -q "lib$lib\.so" && continue
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
           $(python3 -c "import nvidia.cuda_$lib as m, os; print(os.path.join(m.__path__[0], 'lib'))" 2>/dev/null) \
           $(python3 -c "import nvidia.$lib as m, os; print(os.path.join(m.__path__[0], 'lib'))" 2>/dev/null); do
    if ls "$d"/lib$lib.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
  done
done
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

if step tests; then
  say "GPU tests"
  for t in "$G"/tests/gpu-* "$G"/tests/gpu_*-*; do
    [ -x "$t" ] || { note_fail "missing test binary $t"; continue; }
    say "$(basename "$t")"
    "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/tests.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || note_fail "$(basename "$t") failed"
  done
  # A test that skips prints "skipped, no usable GPU": on this machine that is a failure.
  if grep -q "skipped, no usable GPU" "$OUT/tests.log" 2>/dev/null; then
    note_fail "GPU tests were skipped: $(grep -m1 'skipped, no usable GPU' "$OUT/tests.log")"
  fi
fi

if step bench; then
  say "bench kernel"
  "$VPM" bench kernel --n "$SIZES" --repeats "$REPEATS" --configs "${CONFIGS%%,*}" \
    --json "$OUT/bench-kernel.json" 2>&1 | tee "$OUT/bench-kernel.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || note_fail "bench kernel failed"
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv 2>&1 | tee -a "$OUT/smi.txt"
fi

if step ewald; then
  say "bench ewald (GPU)"
  "$VPM" bench ewald --device cuda --n "$EWALD_N" --accuracy "$EWALD_ACCURACY" \
    --repeats "$REPEATS" --json "$OUT/bench-ewald-gpu.json" 2>&1 | tee "$OUT/bench-ewald-gpu.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || note_fail "bench ewald --device cuda failed"
fi

if step run; then
  # Named cases, t_end shortened; a case without a [vortex] section (hit-64) gets one with the
  # spectral resolution, so that the particle solver runs (periodic box: GPU Ewald).
  cases_dir=$G/cases
  [ -d "$cases_dir" ] || cases_dir=$H/../cases
  for c in $RUN_CASES; do
    src=$cases_dir/$c.toml
    [ -f "$src" ] || { note_fail "no case file $src"; continue; }
    f=$work/$c-gpu.toml
    # Shorten: t_end, and drop spectra_times (the default is [0, t_end]) and fields_times.
    sed -E -e "s/^t_end *=.*/t_end = $RUN_T_END/" -e "/^(spectra_times|fields_times) *=/d" "$src" > "$f"
    if ! grep -q '^\[vortex\]' "$f"; then
      n=$(awk '/^\[spectral\]/{s=1;next} /^\[/{s=0} s && /^n *=/{print $3; exit}' "$f")
      printf '\n[vortex]\nn = %s\n' "${n:-64}" >> "$f"
    fi
    say "vpm run $c (t_end = $RUN_T_END) --device cuda"
    t0=$SECONDS
    "$VPM" run "$f" --device cuda --out "$work/run-$c" --force > "$OUT/run-$c.log" 2>&1
    rc=$?
    echo "wall: $((SECONDS - t0)) s" >> "$OUT/run-$c.log"
    tail -n 25 "$OUT/run-$c.log"
    [ $rc -eq 0 ] || note_fail "vpm run $c --device cuda failed (rc $rc)"
    grep -q "(device cuda:0)" "$OUT/run-$c.log" || note_fail "$c: the log does not show the CUDA evaluator"
    grep -q '"peak_device_memory_bytes": [0-9]' "$work/run-$c/manifest.json" \
      || note_fail "$c: the manifest has no peak device memory"
    grep -q '"vortex": "cuda:0' "$work/run-$c/manifest.json" \
      || note_fail "$c: the manifest does not record the GPU"
    mkdir -p "$OUT/run-$c"
    find "$work/run-$c" -maxdepth 1 -type f \( -name '*.csv' -o -name '*.json' -o -name '*.toml' \
      -o -name '*.txt' \) -size -4M -exec cp {} "$OUT/run-$c/" \; 2>/dev/null
  done
  # SIGINT on a GPU run: a checkpoint and a clean stop; the resume on the CPU says so.
  c=${RUN_CASES%% *}
  f=$work/$c-long.toml
  sed -E -e "s/^t_end *=.*/t_end = 50/" -e "/^spectra_times *=/d" "$cases_dir/$c.toml" > "$f"
  say "SIGINT of vpm run $c --device cuda, then resume --device cpu"
  "$VPM" run "$f" --device cuda --out "$work/sig" > "$OUT/sigint.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    [ "$(wc -l < "$work/sig/spectral/energy.csv" 2>/dev/null || echo 0)" -ge 4 ] && break
    sleep 0.1
  done
  kill -INT $pid; wait $pid; rc=$?
  [ $rc -eq 130 ] || note_fail "SIGINT: exit status $rc, not 130"
  grep -q "interrupted at t = " "$OUT/sigint.log" || note_fail "SIGINT: no interrupted message"
  timeout 120 "$VPM" resume "$work/sig" --device cpu --abort-after-steps 1 >> "$OUT/sigint.log" 2>&1
  grep -q "written with the vortex solver on cuda:0; it resumes on cpu" "$OUT/sigint.log" \
    || note_fail "resume on the CPU of a GPU checkpoint does not say so"
  tail -n 8 "$OUT/sigint.log"
fi

if step sweep; then
  say "sweep at N = $SWEEP_N"
  "$VPM" bench kernel --n "$SWEEP_N" --repeats 3 --sample 0 --configs "$CONFIGS" \
    --json "$OUT/sweep.json" --dump "$work/dump" 2>&1 | tee "$OUT/sweep.log"
  say "resources and SASS"
  for c in "$work"/dump/*.cubin; do
    [ -e "$c" ] || continue
    cuobjdump --dump-resource-usage "$c" > "${c%.cubin}.res.txt" 2>&1
    cuobjdump --dump-sass "$c" > "${c%.cubin}.sass" 2>&1
    # Static instruction counts per kernel (opcode before the first '.', ' ' or ';').
    awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {
           line=$0; sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line); sub(/^@!?U?P[0-9T] +/, "", line);
           split(line, w, /[ .;]/); n[f" "w[1]]++ }
         END { for (k in n) print k, n[k] }' "${c%.cubin}.sass" | sort > "${c%.cubin}.ops.txt"
  done
  grep -h -A1 "Function" "$work"/dump/*.res.txt 2>/dev/null | head -60
  tar -C "$work" -czf "$OUT/dump.tar.gz" dump
fi

if step ncu && command -v ncu >/dev/null; then
  m=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
  m=$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
  m=$m,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
  m=$m,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
  m=$m,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
  for k in bs_velocity bs_stretching_classical; do
    say "ncu: one $k launch at N = ${NCU_N:-262144}"
    timeout 200 ncu --clock-control none --kernel-name "$k" --launch-count 1 --metrics "$m" \
      "$VPM" bench kernel --n "${NCU_N:-262144}" --repeats 1 --sample 0 --configs "${CONFIGS%%,*}" \
      >> "$OUT/ncu.txt" 2>&1
  done
  grep -E "bs_|inst_executed|pct|per_second|duration|ERR|rror" "$OUT/ncu.txt" | head -60
fi
rm -rf "$work"
if [ $status -eq 0 ]; then say "done: all steps passed"; else say "done: FAILURES (see !! lines)"; fi
exit $status
