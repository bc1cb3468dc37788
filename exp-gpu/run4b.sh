set -u
. exp-gpu/env.sh
V=.gpucall/vpm
nvidia-smi --query-gpu=name --format=csv > $R/smi.txt 2>&1
timeout 200 $V bench fmm --device cuda --n 1e5,1e6,4e6,16.7e6 --sample 100 --repeats 3 --json $R/bench-fmm.json > $R/bench-fmm.txt 2>&1; echo "bs rc=$?" >> $R/rc.txt
timeout 150 $V bench fmm --device cuda --interaction gravity --n 1e5,1e6,4e6,16.7e6 --sample 100 --repeats 3 --json $R/bench-fmm-gravity.json > $R/bench-fmm-gravity.txt 2>&1; echo "grav rc=$?" >> $R/rc.txt
( time timeout 240 $V run leapfrog-rings --device cuda --out /tmp/lr ) > $R/leapfrog.txt 2>&1; echo "lr rc=$?" >> $R/rc.txt
cp /tmp/lr/manifest.json $R/lr-manifest.json 2>/dev/null; ls /tmp/lr > $R/lr-ls.txt 2>&1
tar czf $OUT/r4b.tgz -C $OUT r
