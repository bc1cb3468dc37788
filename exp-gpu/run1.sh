set -u
. exp-gpu/env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $R/smi.txt 2>&1
V=.gpucall/vpm
# 1. tests (each bounded)
for t in gpu_tree gpu_fmm gpu_ewald gpu gpu_resident; do
  timeout 150 .gpucall/tests/$t-* --test-threads 1 --nocapture > $R/test-$t.txt 2>&1; echo "$t rc=$?" >> $R/tests.txt
done
# 2. bench, planned parameters
timeout 120 $V bench fmm --device cuda --n 1e5,1e6 --sample 100 --json $R/bs.json > $R/bench-bs.txt 2>&1; echo "bs rc=$?" >> $R/tests.txt
timeout 60 $V bench fmm --device cuda --n 1e6 --sample 50 --m2l f64 --json $R/bs-f64.json > $R/bench-bs-f64.txt 2>&1
# 3. sweep at 1e6
for th in 0.5 0.6; do for lf in 32 64 256; do
  timeout 60 $V bench fmm --device cuda --n 1e6 --sample 50 --theta $th --leaf-size $lf --json $R/sw-$th-$lf.json > $R/sweep-$th-$lf.txt 2>&1
done; done
# 4. gravity
timeout 90 $V bench fmm --device cuda --interaction gravity --n 1e5,1e6 --sample 100 --json $R/grav.json > $R/bench-grav.txt 2>&1
tar czf $OUT/r1.tgz -C $OUT r
