set -u
. exp-gpu/env.sh
V=.gpucall/vpm
nvidia-smi --query-gpu=name --format=csv > $R/smi.txt 2>&1
( time timeout 300 $V run leapfrog-rings --device cuda --out /tmp/lr ) > $R/leapfrog.txt 2>&1; echo "lr rc=$?" >> $R/rc.txt
cp /tmp/lr/manifest.json $R/lr-manifest.json 2>/dev/null; cp /tmp/lr/vortex/rings.csv $R/lr-rings.csv 2>/dev/null
timeout 150 $V bench fmm --device cuda --n 1e5,1e6,4e6,16.7e6 --sample 100 --repeats 3 --json $R/bench-fmm.json > $R/bench-fmm.txt 2>&1; echo "bs rc=$?" >> $R/rc.txt
timeout 140 .gpucall/tests/gpu_fmm-* --test-threads 1 > $R/test-gpu_fmm.txt 2>&1; echo "gpu_fmm rc=$?" >> $R/rc.txt
tar czf $OUT/r5.tgz -C $OUT r
