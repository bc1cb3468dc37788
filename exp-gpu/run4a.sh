set -u
. exp-gpu/env.sh
nvidia-smi --query-gpu=name --format=csv > $R/smi.txt 2>&1
for f in .gpucall/tests/gpu*; do t=$(basename $f); t=${t%-*}
  timeout 300 $f --test-threads 1 > $R/test-$t.txt 2>&1; echo "$t rc=$?" >> $R/tests.txt
done
tar czf $OUT/r4a.tgz -C $OUT r
