//! Sorting primitives on the GPU (`kernels/sort.cu`), shared by the Ewald engine and the FMM's
//! tree: an exclusive scan of 32-bit counts, a stable LSD radix sort of (u64 key, u32 value)
//! pairs with 8-bit digits, and the bounding box of a set of points. Compiled once per [`Gpu`]
//! (the module cache), queued on the GPU's one stream; the scratch buffers grow only.
//! Deterministic: integer sums, a stable sort, exact min/max.

use super::buffer::DeviceBuffer;
use super::cuda::{kernel_source, launch, load_kernels, CudaError, Doing, Gpu, KernelSource};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The block-wide scan shared by `sort.cu` and `ewald.cu`, a named NVRTC header.
pub const SCAN_HEADER: (&str, &str) = ("scan.cuh", include_str!("../../kernels/scan.cuh"));
/// The kernel family.
pub const KERNELS: KernelSource = kernel_source!("sort.cu", SCAN_HEADER);
/// Items per block of `sort_scan_blocks` (SORT_SCAN_THREADS · SORT_SCAN_ITEMS).
const SCAN_BLOCK: usize = 2048;
/// Items per block of the radix passes (RADIX_THREADS · RADIX_ROUNDS) and threads per block.
const RADIX_TILE: usize = 2048;
const RADIX_THREADS: u32 = 256;
/// Threads and most blocks of the bounding-box reduction.
const BOUNDS_THREADS: u32 = 256;
const BOUNDS_BLOCKS: usize = 256;

/// 32-bit counts the scan accepts (the kernels read them as `int`; sums stay below 2³¹).
pub trait ScanCount: DeviceRepr {}
impl ScanCount for i32 {}
impl ScanCount for u32 {}

struct Kernels {
    scan_blocks: CudaFunction,
    scan_sums: CudaFunction,
    scan_add: CudaFunction,
    radix_hist: CudaFunction,
    radix_scatter: CudaFunction,
    bounds_blocks: CudaFunction,
    bounds_final: CudaFunction,
}

/// The sort module's kernels and scratch buffers on one GPU.
pub struct DeviceSort {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    k: Kernels,
    sums: DeviceBuffer<i32>,
    counts: DeviceBuffer<u32>,
    keys_tmp: DeviceBuffer<u64>,
    vals_tmp: DeviceBuffer<u32>,
    part: DeviceBuffer<f64>,
    bounds: DeviceBuffer<f64>,
}

/// `n` items, one thread each, `threads` per block (at least one block).
pub fn cfg_items(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.max(1) as u32).div_ceil(threads), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn cfg_blocks(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl DeviceSort {
    /// Loads the kernels on `gpu` (compiled once per process and GPU).
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, CudaError> {
        let module = gpu.module_from(&KERNELS, &[])?;
        #[rustfmt::skip]
        let k = load_kernels!(module, "sort_", Kernels {
            scan_blocks, scan_sums, scan_add, radix_hist, radix_scatter, bounds_blocks,
            bounds_final
        });
        Ok(Self {
            gpu: gpu.clone(),
            stream: gpu.stream().clone(),
            k,
            sums: DeviceBuffer::new(),
            counts: DeviceBuffer::new(),
            keys_tmp: DeviceBuffer::new(),
            vals_tmp: DeviceBuffer::new(),
            part: DeviceBuffer::new(),
            bounds: DeviceBuffer::new(),
        })
    }

    /// In-place exclusive scan of the first `n` values of `buf` (`buf` holds at least `n`).
    pub fn exclusive_scan<T: ScanCount>(
        &mut self,
        buf: &mut CudaSlice<T>,
        n: usize,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        assert!(
            buf.len() >= n,
            "scan of {n} values in a buffer of {}",
            buf.len()
        );
        Self::scan_with(&self.stream, &self.k, &mut self.sums, buf, n)
    }

    /// Sorts the first `n` (key, value) pairs by key, stably (equal keys keep their order), on
    /// the low `bits` bits of the keys (higher bits must be zero), one pass per 8 bits.
    pub fn sort_pairs(
        &mut self,
        keys: &mut CudaSlice<u64>,
        vals: &mut CudaSlice<u32>,
        n: usize,
        bits: u32,
    ) -> Result<(), CudaError> {
        if n <= 1 {
            return Ok(());
        }
        assert!(keys.len() >= n && vals.len() >= n && n < i32::MAX as usize);
        let s = self.stream.clone();
        let nb = n.div_ceil(RADIX_TILE);
        self.counts.ensure(&s, 256 * nb)?;
        self.keys_tmp.ensure(&s, n)?;
        self.vals_tmp.ensure(&s, n)?;
        let passes = bits.div_ceil(8).max(1);
        let n_i = n as i32;
        for pass in 0..passes {
            let shift = (8 * pass) as i32;
            // Even passes read the caller's buffers, odd ones the scratch copies.
            let (kin, vin, kout, vout) = if pass % 2 == 0 {
                (
                    &*keys,
                    &*vals,
                    self.keys_tmp.get_mut(),
                    self.vals_tmp.get_mut(),
                )
            } else {
                (
                    self.keys_tmp.get(),
                    self.vals_tmp.get(),
                    &mut *keys,
                    &mut *vals,
                )
            };
            // SAFETY: sort_radix_hist(keys, n, shift, count): kin holds ≥ n keys; count holds
            // 256·nb values (ensured), nb blocks of RADIX_THREADS, one tile of RADIX_TILE each.
            launch!(s, &self.k.radix_hist, "sort_radix_hist", cfg_blocks(nb, RADIX_THREADS);
                kin, &n_i, &shift, self.counts.get_mut())?;
            let counts = self.counts.get_mut();
            let (sk, sums) = (&self.k, &mut self.sums);
            Self::scan_with(&s, sk, sums, counts, 256 * nb)?;
            // SAFETY: sort_radix_scatter(keys, vals, n, shift, offset, keys_out, vals_out): the
            // inputs hold ≥ n pairs, offset the scanned 256·nb counts of this pass's histogram
            // (the same grid), the outputs ≥ n pairs; every slot below n is written once.
            launch!(s, &self.k.radix_scatter, "sort_radix_scatter", cfg_blocks(nb, RADIX_THREADS);
                kin, vin, &n_i, &shift, self.counts.get(), kout, vout)?;
        }
        if passes % 2 == 1 {
            s.memcpy_dtod(&self.keys_tmp.get().slice(0..n), &mut keys.slice_mut(0..n))
                .doing("copying sorted keys")?;
            s.memcpy_dtod(&self.vals_tmp.get().slice(0..n), &mut vals.slice_mut(0..n))
                .doing("copying sorted values")?;
        }
        Ok(())
    }

    /// [`Self::exclusive_scan`] with the kernels and block sums borrowed apart from `self`.
    fn scan_with<T: ScanCount>(
        s: &Arc<CudaStream>,
        k: &Kernels,
        sums: &mut DeviceBuffer<i32>,
        buf: &mut CudaSlice<T>,
        n: usize,
    ) -> Result<(), CudaError> {
        let nb = n.div_ceil(SCAN_BLOCK);
        sums.ensure(s, nb)?;
        let (n_i, nb_i) = (n as i64, nb as i32);
        // SAFETY: sort_scan_blocks(int* v, long long n, int* sums): buf holds ≥ n 32-bit
        // counts (the callers check), sums ≥ nb (one per block of SCAN_BLOCK items).
        launch!(s, &k.scan_blocks, "sort_scan_blocks", cfg_blocks(nb, 256);
            &mut *buf, &n_i, sums.get_mut())?;
        // SAFETY: sort_scan_sums(int* sums, int nb): one block over the nb sums.
        launch!(s, &k.scan_sums, "sort_scan_sums", cfg_blocks(1, 256); sums.get_mut(), &nb_i)?;
        // SAFETY: sort_scan_add(int* v, long long n, const int* sums): as above; the grid
        // covers n.
        launch!(s, &k.scan_add, "sort_scan_add", cfg_items(n, 256); &mut *buf, &n_i, sums.get())?;
        Ok(())
    }

    /// The smallest and largest x, y, z of the first `n` points of `x` (3 doubles each, n ≥ 1),
    /// downloaded (one host wait): `([min x, min y, min z], [max x, max y, max z])`.
    pub fn bounds(
        &mut self,
        x: &CudaSlice<f64>,
        n: usize,
    ) -> Result<([f64; 3], [f64; 3]), CudaError> {
        let b = self.extremes(x, n, 3)?;
        Ok(([b[0], b[1], b[2]], [b[3], b[4], b[5]]))
    }

    /// The largest of the first `n` values of `v` (n ≥ 1), downloaded (one host wait).
    pub fn max(&mut self, v: &CudaSlice<f64>, n: usize) -> Result<f64, CudaError> {
        Ok(self.extremes(v, n, 1)?[3])
    }

    /// Minima and maxima of the first `n` items of `width` doubles each (components past
    /// `width` are ±∞), downloaded.
    fn extremes(
        &mut self,
        x: &CudaSlice<f64>,
        n: usize,
        width: usize,
    ) -> Result<[f64; 6], CudaError> {
        assert!(n >= 1 && (1..=3).contains(&width) && x.len() >= width * n);
        let s = &self.stream;
        let nb = n.div_ceil(BOUNDS_THREADS as usize).min(BOUNDS_BLOCKS);
        self.part.ensure(s, 6 * nb)?;
        self.bounds.ensure(s, 6)?;
        let (n_i, w_i, nb_i) = (n as i64, width as i32, nb as i32);
        // SAFETY: sort_bounds_blocks(x, n, width, part): x holds width·n doubles (asserted),
        // part 6 per block (nb blocks, ensured); the grid-stride loop covers n.
        launch!(s, &self.k.bounds_blocks, "sort_bounds_blocks", cfg_blocks(nb, BOUNDS_THREADS);
            x, &n_i, &w_i, self.part.get_mut())?;
        // SAFETY: sort_bounds_final(part, nb, out): part holds 6·nb doubles, out 6; one block.
        launch!(s, &self.k.bounds_final, "sort_bounds_final", cfg_blocks(1, BOUNDS_THREADS);
            self.part.get(), &nb_i, self.bounds.get_mut())?;
        let mut b = [0.0f64; 6];
        self.bounds.download(&self.gpu, &mut b, "extremes")?;
        Ok(b)
    }
}

/// A host mirror of the radix pass (`sort_radix_hist`, the scan, `sort_radix_scatter`: tiles,
/// rounds, warps, ranks by equal digits among the lower lanes), tested against a stable sort.
#[cfg(test)]
mod mirror {
    use super::{RADIX_THREADS, RADIX_TILE};

    fn pass(keys: &[u64], vals: &[u32], shift: u32) -> (Vec<u64>, Vec<u32>) {
        let n = keys.len();
        let nb = n.div_ceil(RADIX_TILE);
        let digit = |k: u64| ((k >> shift) & 255) as usize;
        let mut count = vec![0u32; 256 * nb];
        for (i, &k) in keys.iter().enumerate() {
            count[digit(k) * nb + i / RADIX_TILE] += 1;
        }
        let mut acc = 0;
        for c in count.iter_mut() {
            let v = *c;
            *c = acc;
            acc += v;
        }
        let (mut ko, mut vo) = (vec![0u64; n], vec![0u32; n]);
        let threads = RADIX_THREADS as usize;
        for b in 0..nb {
            let mut off: Vec<u32> = (0..256).map(|d| count[d * nb + b]).collect();
            for r in 0..RADIX_TILE / threads {
                let mut cnt = vec![[0u32; 256]; threads / 32];
                let base = b * RADIX_TILE + r * threads;
                let item = |tid: usize| (base + tid < n).then(|| base + tid);
                let rank = |tid: usize| {
                    let (w, lane) = (tid / 32, tid % 32);
                    let d = digit(keys[item(tid).unwrap()]);
                    (0..lane)
                        .filter(|&l| item(32 * w + l).is_some_and(|j| digit(keys[j]) == d))
                        .count() as u32
                };
                for tid in 0..threads {
                    if let Some(i) = item(tid) {
                        cnt[tid / 32][digit(keys[i])] += 1;
                    }
                }
                for tid in 0..threads {
                    if let Some(i) = item(tid) {
                        let d = digit(keys[i]);
                        let below: u32 = (0..tid / 32).map(|w| cnt[w][d]).sum();
                        let pos = (off[d] + below + rank(tid)) as usize;
                        ko[pos] = keys[i];
                        vo[pos] = vals[i];
                    }
                }
                for (d, o) in off.iter_mut().enumerate() {
                    *o += cnt.iter().map(|c| c[d]).sum::<u32>();
                }
            }
        }
        (ko, vo)
    }

    #[test]
    fn the_radix_passes_sort_stably() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        for n in [1usize, 31, 2048, 5000] {
            let mut keys: Vec<u64> = (0..n)
                .map(|_| rng.random::<u64>() % 37 * 0x0101_0101)
                .collect();
            let mut vals: Vec<u32> = (0..n as u32).collect();
            let mut want: Vec<(u64, u32)> = keys.iter().copied().zip(vals.clone()).collect();
            want.sort_by_key(|p| p.0);
            for pass_no in 0..4 {
                (keys, vals) = pass(&keys, &vals, 8 * pass_no);
            }
            let got: Vec<(u64, u32)> = keys.into_iter().zip(vals).collect();
            assert_eq!(got, want, "{n}");
        }
    }
}
