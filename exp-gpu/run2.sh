set -u
. exp-gpu/env.sh
V=.gpucall/vpm
for t in gpu_gravity_cartesian gpu_tree gpu_fmm; do
  timeout 150 .gpucall/tests/$t-* --test-threads 1 --nocapture > $R/test-$t.txt 2>&1; echo "$t rc=$?" >> $R/tests.txt
done
timeout 200 $V bench fmm --device cuda --n 1e5,1e6,4e6,16.7e6 --sample 50 --repeats 2 --json $R/bs.json > $R/bench-bs.txt 2>&1; echo "bs rc=$?" >> $R/tests.txt
timeout 100 $V bench fmm --device cuda --interaction gravity --n 1e5,1e6,4e6,16.7e6 --sample 50 --repeats 2 --json $R/grav.json > $R/bench-grav.txt 2>&1; echo "grav rc=$?" >> $R/tests.txt
for lf in 32 256; do
  timeout 40 $V bench fmm --device cuda --interaction gravity --n 1e6 --sample 30 --repeats 2 --leaf-size $lf > $R/grav-leaf-$lf.txt 2>&1
done
for cfg in "0.6 600" "0.5 600" "0.6 128"; do set -- $cfg
  timeout 60 $V bench fmm --device cuda --n 16.7e6 --sample 30 --repeats 1 --theta $1 --leaf-size $2 > $R/bs16-$1-$2.txt 2>&1
done
timeout 30 $V bench fmm --device cuda --n 1e6 --sample 30 --repeats 2 --theta 0.6 --leaf-size 256 > $R/bs1-0.6-256.txt 2>&1
tar czf $OUT/r2.tgz -C $OUT r
