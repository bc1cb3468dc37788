set -u
. exp-gpu/env.sh
V=.gpucall/vpm
( time timeout 220 $V run leapfrog-rings --device cuda --out /tmp/lr ) > $R/leapfrog.txt 2>&1; echo "lr rc=$?" >> $R/rc.txt
cp /tmp/lr/manifest.json $R/lr-manifest.json 2>/dev/null; cp /tmp/lr/vortex/rings.csv $R/lr-rings.csv 2>/dev/null
tar czf $OUT/r8.tgz -C $OUT r
