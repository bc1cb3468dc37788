# sourced by the device scripts: libraries and the test binaries' vpm path
for lib in nvrtc cufft; do
  ldconfig -p 2>/dev/null | grep -q "lib$lib\.so" && continue
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
           $(python3 -c "import nvidia.cuda_$lib as m, os; print(os.path.join(m.__path__[0], 'lib'))" 2>/dev/null) \
           $(python3 -c "import nvidia.$lib as m, os; print(os.path.join(m.__path__[0], 'lib'))" 2>/dev/null); do
    if ls "$d"/lib$lib.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
  done
done
mkdir -p /work/main/target/release && ln -sf $PWD/.gpucall/vpm /work/main/target/release/vpm
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
