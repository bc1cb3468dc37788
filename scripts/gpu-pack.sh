#!/usr/bin/env bash
# Builds what a GPU machine without a Rust toolchain needs, in the layout of
# ../shared/tools/gpu-pack (the project-wide tool), into .gpu/ at the project root (kept out of
# git by .gitignore and .git/info/exclude):
#   .gpu/bin/        release binaries of the workspace (vpm)
#   .gpu/tests/      release test binaries of the workspace; the GPU ones are gpu-<hash>
#                    (tests/gpu.rs) and gpu_ewald-<hash> (tests/gpu_ewald.rs)
#   .gpu/cases/      the case files
#   .gpu/gpu-check.sh
# Everything stripped; portable code (no target-cpu=native: the GPU machine's CPU may differ).
# Unlike ../shared/tools/gpu-pack this honours CARGO_TARGET_DIR (artifact paths come from cargo's
# JSON messages, not from target/release).
# Usage (from anywhere in the project): scripts/gpu-pack.sh [extra cargo args]
# Then pass ".gpu" in the device call's carry list and run `scripts/gpu-check.sh` (or
# `.gpu/gpu-check.sh`) there, or single binaries: `.gpu/bin/vpm …`, `.gpu/tests/gpu_ewald-* …`.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude) # also right in a linked worktree (.git is a file)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
# Drop a target-cpu=native the caller may have set; keep any other flags.
RUSTFLAGS=$(echo "${RUSTFLAGS:-}" | sed -E 's/-C *target-cpu=native//g')
export RUSTFLAGS
case "${CARGO_ENCODED_RUSTFLAGS:-}" in *target-cpu=native*) unset CARGO_ENCODED_RUSTFLAGS ;; esac
rm -rf .gpu && mkdir -p .gpu/bin .gpu/tests
executables() { # cargo JSON messages on stdin → executable paths (test ones when $1 = test)
  python3 -c 'import sys, json
want_test = sys.argv[1] == "test"
for l in sys.stdin:
    try: m = json.loads(l)
    except Exception: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
       and bool(m.get("profile", {}).get("test")) == want_test:
        print(m["executable"])' "$1"
}
cargo build --release --workspace --bins --message-format=json-render-diagnostics "$@" \
  | executables bin | while read -r exe; do cp "$exe" .gpu/bin/; done
cargo test --release --workspace --no-run --message-format=json-render-diagnostics "$@" \
  | executables test | while read -r exe; do cp "$exe" .gpu/tests/; done
[ -x .gpu/bin/vpm ] || { echo "gpu-pack: no vpm binary was built" >&2; exit 1; }
ls .gpu/tests/gpu-* .gpu/tests/gpu_ewald-* >/dev/null || { echo "gpu-pack: GPU tests missing" >&2; exit 1; }
cp -r cases .gpu/
cp scripts/gpu-check.sh .gpu/
strip .gpu/bin/* .gpu/tests/* 2>/dev/null || true
echo "packed: $(du -sh .gpu | cut -f1) (carry limit 64 MiB for the whole tree)"
ls -l .gpu/bin .gpu/tests
