set -u
. exp-gpu/env.sh
V=.gpucall/vpm
for t in gpu_fmm_near gpu_fmm gpu_tree gpu_ewald; do
  timeout 150 .gpucall/tests/$t-* --test-threads 1 --nocapture > $R/test-$t.txt 2>&1; echo "$t rc=$?" >> $R/tests.txt
done
B="$V bench fmm --device cuda --sample 30 --repeats 2"
timeout 60 $B --n 1e6 > $R/bs1-default.txt 2>&1
timeout 60 $B --n 1e6 --m2l f64 > $R/bs1-f64.txt 2>&1
for cfg in "0.5 256" "0.6 256" "0.6 64" "0.7 256" "0.5 64"; do set -- $cfg
  timeout 60 $B --n 1e6 --theta $1 --leaf-size $2 > $R/bs1-$1-$2.txt 2>&1
done
for cfg in "0.6 128" "0.5 128" "0.6 600" "0.7 128"; do set -- $cfg
  timeout 80 $V bench fmm --device cuda --sample 20 --repeats 1 --n 16.7e6 --theta $1 --leaf-size $2 > $R/bs16-$1-$2.txt 2>&1
done
timeout 150 .gpucall/tests/gpu_resident-* --test-threads 1 > $R/test-gpu_resident.txt 2>&1; echo "resident rc=$?" >> $R/tests.txt
tar czf $OUT/r3.tgz -C $OUT r
