//! The periodic Ewald evaluator's device side: the kernels of `kernels/ewald.cu`, cuFFT plans and
//! resident buffers (grow only), driven phase by phase on one stream. The method, its parameters
//! and their rules are those of [`super`] (planned in [`super::params`]); this module only
//! moves data and launches. [`super::CudaEwald`] wraps it in the
//! [`crate::summation::Summation`] trait.
//!
//! Inputs (positions, strengths, cores, targets) travel as f64 and are wrapped and located on the
//! device in f64; the sums run in f32; outputs come back as f64, poisoned (NaN) before every
//! evaluation and checked finite after it.

use super::params::{CostModel, EwaldParameters};
use super::window::KaiserBessel;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    cufft_available, fft_plan, kernel_source, launch, load_kernels, CompiledModule, CudaError,
    Doing, FftLayout, Gpu, KernelSource,
};
use crate::device::sort::DeviceSort;
use cudarc::cufft::{sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::f64::consts::{PI, TAU};
use std::sync::Arc;

/// The family with the header it includes.
pub const KERNELS: KernelSource = kernel_source!(
    "ewald.cu",
    crate::summation::PAIR_KERNEL_HEADER,
    crate::device::sort::SCAN_HEADER,
    crate::summation::cells::BOX_HEADER
);

/// Largest window support the spread and gather kernels take (`GA_PMAX` and `SP_PMAX` in
/// ewald.cu; f32 Bessel values stay finite for β = π w (1 − K/M) ≤ 16π). The plans of
/// accuracies above the f32 floor take w ≤ 10 (module docs).
pub const MAX_SUPPORT: usize = 16;
/// The real-space and vorticity cell grids are capped at this many cells per side (coarser cells
/// only add distance checks; the ±2 stencil still covers the cutoff).
const MAX_CELLS: usize = 256;
/// Spreading tile (SP_TX, SP_TY, SP_TZ) and threads.
const SPREAD_TILE: (usize, usize, usize) = (16, 16, 8);
const SPREAD_THREADS: u32 = 256;
const GATHER_THREADS: u32 = 128;
const REAL_THREADS: u32 = 128;
// ew_visit in ewald.cu searches ±2 cells, the CPU's CELL_SUB.
const _: () = assert!(crate::summation::cells::CELL_SUB == 2);

/// Cost model of the GPU path for [`super::params::plan`]
/// (nanoseconds, estimates for one H100-class GPU, not yet measured into docs/performance.md:
/// they only steer the choice of (η, u), never the accuracy). Transfers of the f64 inputs and
/// outputs are the per-particle term. The window's 1-D weights are Bessel functions
/// (`cyl_bessel_i0f`/`i1f`, a few tens of instructions): `ns_weight` counts 3w per source and
/// 3w or 6w per target, and covers that the spread recomputes a source's x, y and z weights in
/// every 16×16×8 tile its support meets (about 3 tiles at w = 8, 40 weights each).
pub const GPU_COSTS: CostModel = CostModel {
    ns_pair_velocity: 0.01,
    ns_pair_extra: 0.015,
    ns_pair_check: 0.001,
    ns_fft_point_log: 6e-4,
    ns_grid_point: 5e-4,
    ns_weight: 5e-3,
    spread_fields: 3.0,
    gather_fields: 3.0,
    gather_fields_gradient: 6.0,
    ns_per_particle: 4.0,
    max_support: MAX_SUPPORT,
};

/// What the gather and real-space kernels add besides the velocity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuExtra {
    None,
    Classical,
    Transposed,
    Gradient,
}

impl GpuExtra {
    fn index(self) -> usize {
        match self {
            GpuExtra::None => 0,
            GpuExtra::Classical => 1,
            GpuExtra::Transposed => 2,
            GpuExtra::Gradient => 3,
        }
    }

    /// Values per target in the extra output.
    pub fn components(self) -> usize {
        match self {
            GpuExtra::None => 0,
            GpuExtra::Classical | GpuExtra::Transposed => 3,
            GpuExtra::Gradient => 9,
        }
    }
}

/// Device milliseconds of the phases of the last evaluation (CUDA events).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct GpuEwaldTimings {
    /// Copying inputs to the device.
    pub upload_ms: f64,
    /// Sorting the sources by support node and spreading them onto the grid.
    pub spread_ms: f64,
    /// Forward transforms, multiplier, inverse transforms.
    pub transforms_ms: f64,
    /// Interpolation at the targets.
    pub gather_ms: f64,
    /// Real-space part (cell lists and pair sums), or the blob vorticity sums.
    pub real_space_ms: f64,
    /// Copying the results back.
    pub download_ms: f64,
}

impl GpuEwaldTimings {
    pub fn total_ms(&self) -> f64 {
        self.upload_ms
            + self.spread_ms
            + self.transforms_ms
            + self.gather_ms
            + self.real_space_ms
            + self.download_ms
    }
}

fn cfg1(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n.max(1) as u32).div_ceil(threads), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

struct Kernels {
    grid_keys: CudaFunction,
    cell_keys: CudaFunction,
    scatter: CudaFunction,
    sort_buckets: CudaFunction,
    pack_grid: CudaFunction,
    pack_cells: CudaFunction,
    spread: CudaFunction,
    multiply: CudaFunction,
    gather: [CudaFunction; 4],
    real: [CudaFunction; 4],
    vorticity: CudaFunction,
    lattice_vorticity: CudaFunction,
}

/// cuFFT plans for one grid size.
struct Plans {
    m: usize,
    r2c: CudaFft,
    c2r: CudaFft,
}

/// Inputs of one evaluation on the host.
pub struct EwaldInputs<'a> {
    /// Source positions, strengths, cores (flattened: 3, 3, 1 per source).
    pub x: &'a [f64],
    pub alpha: &'a [f64],
    pub sigma: &'a [f64],
    /// Targets (flattened), and whether they are the source positions themselves.
    pub targets: &'a [f64],
    pub targets_are_sources: bool,
    /// Target strengths for stretching (flattened), and whether they are the source strengths.
    pub target_alpha: Option<&'a [f64]>,
    pub target_alpha_is_alpha: bool,
    /// Real-space sources (indices), `None` for all of them.
    pub selected: Option<&'a [i32]>,
    pub n_selected: usize,
}

/// The bucket arrays a counting sort fills: the mesh's (`start`, `order`: sources by first
/// support node) or the cell lists' (`cstart`, `corder`).
#[derive(Debug, Clone, Copy)]
enum Buckets {
    Grid,
    Cells,
}

/// Resident device state of the GPU Ewald evaluator.
pub struct EwaldDevice {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    module: Arc<CompiledModule>,
    k: Kernels,
    plans: Option<Plans>,
    events: Vec<CudaEvent>,
    // inputs
    x: DeviceBuffer<f64>,
    alpha: DeviceBuffer<f64>,
    sigma: DeviceBuffer<f64>,
    tx: DeviceBuffer<f64>,
    talpha: DeviceBuffer<f64>,
    sel: DeviceBuffer<i32>,
    // sorting
    keys: DeviceBuffer<i32>,
    slots: DeviceBuffer<i32>,
    start: DeviceBuffer<i32>,
    order: DeviceBuffer<i32>,
    /// The shared scan (kernels/sort.cu).
    sort: DeviceSort,
    cstart: DeviceBuffer<i32>,
    corder: DeviceBuffer<i32>,
    // packed sources
    sd: DeviceBuffer<[f32; 4]>,
    sa: DeviceBuffer<[f32; 4]>,
    sp: DeviceBuffer<[f64; 4]>,
    csa: DeviceBuffer<[f32; 4]>,
    // mesh
    grid: DeviceBuffer<f32>,
    /// The multiplier's per-axis table ([`KaiserBessel::multiplier_table`], f32) and the
    /// parameters it was uploaded for (uploaded again only when they change).
    table: DeviceBuffer<f32>,
    table_for: Option<(usize, usize, usize, u64, u64)>,
    spec: DeviceBuffer<cufft_sys::float2>,
    // outputs
    u: DeviceBuffer<f64>,
    ex: DeviceBuffer<f64>,
    timings: GpuEwaldTimings,
}

impl std::fmt::Debug for EwaldDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EwaldDevice")
            .field("gpu", &self.gpu.info().name)
            .field("grid", &self.plans.as_ref().map(|p| p.m))
            .finish()
    }
}

impl EwaldDevice {
    /// Compiles (once per process and GPU) and loads the kernels on `gpu`.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self, CudaError> {
        cufft_available()?;
        let module = gpu.module_from(&KERNELS, &[])?;
        let load = |name: &str| module.function(name);
        // One kernel per extra, in GpuExtra's order.
        let per_extra = |kind: &str| -> Result<[CudaFunction; 4], CudaError> {
            let extras = ["velocity", "classical", "transposed", "gradient"];
            let f = |i: usize| load(&format!("ew_{kind}_{}", extras[i]));
            Ok([f(0)?, f(1)?, f(2)?, f(3)?])
        };
        #[rustfmt::skip]
        let k = load_kernels!(module, "ew_", Kernels {
            grid_keys, cell_keys, scatter, sort_buckets,
            pack_grid, pack_cells, spread, multiply, vorticity, lattice_vorticity;
            gather: per_extra("gather")?,
            real: per_extra("real")?,
        });
        let stream = gpu.stream().clone();
        let sort = DeviceSort::new(&gpu)?;
        let events = (0..7).map(|_| gpu.event()).collect::<Result<Vec<_>, _>>()?;
        Ok(EwaldDevice {
            gpu,
            stream,
            module,
            k,
            plans: None,
            events,
            x: DeviceBuffer::new(),
            alpha: DeviceBuffer::new(),
            sigma: DeviceBuffer::new(),
            tx: DeviceBuffer::new(),
            talpha: DeviceBuffer::new(),
            sel: DeviceBuffer::new(),
            keys: DeviceBuffer::new(),
            slots: DeviceBuffer::new(),
            start: DeviceBuffer::new(),
            order: DeviceBuffer::new(),
            sort,
            cstart: DeviceBuffer::new(),
            corder: DeviceBuffer::new(),
            sd: DeviceBuffer::new(),
            sa: DeviceBuffer::new(),
            sp: DeviceBuffer::new(),
            csa: DeviceBuffer::new(),
            grid: DeviceBuffer::new(),
            table: DeviceBuffer::new(),
            table_for: None,
            spec: DeviceBuffer::new(),
            u: DeviceBuffer::new(),
            ex: DeviceBuffer::new(),
            timings: GpuEwaldTimings::default(),
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The stream every phase runs on: the GPU's one stream ([`Gpu::stream`]).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// NVRTC's log of the module (registers, spills, shared memory per kernel).
    pub fn compile_log(&self) -> &str {
        &self.module.log
    }

    /// Device milliseconds of the phases of the last host-form evaluation ([`Self::evaluate`],
    /// [`Self::vorticity`]); the device forms leave them as they were (reading the events
    /// would make the host wait for the GPU inside a step).
    pub fn timings(&self) -> GpuEwaldTimings {
        self.timings
    }

    fn record(&self, i: usize) -> Result<(), CudaError> {
        self.events[i]
            .record(&self.stream)
            .doing("recording an event")
    }

    fn read_timings(&mut self) -> Result<(), CudaError> {
        let ms = |a: usize, b: usize| -> Result<f64, CudaError> {
            let (gpu, ev) = (&self.gpu, &self.events);
            gpu.elapsed_ms(&ev[a], &ev[b], "the Ewald phases")
                .map(f64::from)
        };
        let t = GpuEwaldTimings {
            upload_ms: ms(0, 1)?,
            spread_ms: ms(1, 2)?,
            transforms_ms: ms(2, 3)?,
            gather_ms: ms(3, 4)?,
            real_space_ms: ms(4, 5)?,
            download_ms: ms(5, 6)?,
        };
        self.timings = t;
        Ok(())
    }

    /// Counting sort of `n` items by the keys in `keys`/`slots` (counts already in the
    /// buckets' `start`, of `nb` buckets): scan, scatter into their `order`, order each bucket
    /// by item index.
    fn finish_sort(&mut self, buckets: Buckets, n: usize, nb: usize) -> Result<(), CudaError> {
        let (stream, k, sort, keys, slots) = (
            &self.stream,
            &self.k,
            &mut self.sort,
            &self.keys,
            &self.slots,
        );
        let (start, order) = match buckets {
            Buckets::Grid => (&mut self.start, &mut self.order),
            Buckets::Cells => (&mut self.cstart, &mut self.corder),
        };
        sort.exclusive_scan(start.get_mut(), nb + 1)?;
        order.ensure(stream, n)?;
        let (n_i, nb_i) = (n as i32, nb as i64);
        // SAFETY: ew_scatter(const int* keys, const int* slots, const int* start, int n,
        // int* order): keys/slots hold n values with keys < nb and slots < count(key), start
        // nb + 1 offsets, order n entries.
        launch!(stream, &k.scatter, "ew_scatter", cfg1(n, 256);
            keys.get(), slots.get(), start.get(), &n_i, order.get_mut())?;
        // SAFETY: ew_sort_buckets(const int* start, long long nb, int* order): start holds
        // nb + 1 offsets into order (n entries).
        launch!(stream, &k.sort_buckets, "ew_sort_buckets", cfg1(nb, 256);
            start.get(), &nb_i, order.get_mut())?;
        Ok(())
    }

    /// Uploads the multiplier table of `kb` for `p` unless the last upload was for the same
    /// (M, w, K, β, η): a resident run plans the same parameters every step and copies nothing.
    fn upload_table(&mut self, kb: &KaiserBessel, p: &EwaldParameters) -> Result<(), CudaError> {
        let key = (p.grid, p.support, p.kmax, p.beta.to_bits(), p.eta.to_bits());
        if self.table_for == Some(key) {
            return Ok(());
        }
        // (Values beyond f32's range cannot occur in the band: T ≤ 1 up to rounding there,
        // module docs; the clamp keeps a degenerate plan finite.)
        let t: Vec<f32> = kb
            .multiplier_table(p.eta, p.kmax)
            .iter()
            .map(|&v| v.min(f32::MAX as f64) as f32)
            .collect();
        self.table_for = None;
        self.table
            .upload(&self.stream, &t, "the multiplier table")?;
        self.table_for = Some(key);
        Ok(())
    }

    fn ensure_plans(&mut self, m: usize) -> Result<(), CudaError> {
        if self.plans.as_ref().is_some_and(|p| p.m == m) {
            return Ok(());
        }
        self.plans = None;
        let mi = m as i32;
        let real = (m * m * m) as i32;
        let cplx = (m * m * (m / 2 + 1)) as i32;
        let what = format!("{m}^3");
        let plan = |ty, idist, odist| {
            let layouts = (FftLayout::packed(idist), FftLayout::packed(odist));
            fft_plan(&what, &[mi, mi, mi], layouts, ty, 3, &self.stream)
        };
        let r2c = plan(cufft_sys::cufftType::CUFFT_R2C, real, cplx)?;
        let c2r = plan(cufft_sys::cufftType::CUFFT_C2R, cplx, real)?;
        self.plans = Some(Plans { m, r2c, c2r });
        Ok(())
    }

    /// Velocity (and the extra) at the targets: mesh part, plus the real-space part when
    /// `inp.n_selected > 0`. Results in `u_out` (3 per target) and `ex_out` (extra components
    /// per target).
    pub fn evaluate(
        &mut self,
        p: &EwaldParameters,
        inp: &EwaldInputs,
        extra: GpuExtra,
        u_out: &mut [f64],
        ex_out: &mut [f64],
    ) -> Result<(), CudaError> {
        let ns = inp.x.len() / 3;
        let nt = inp.targets.len() / 3;
        check_sizes(p, ns)?;
        let s = self.stream.clone();
        self.record(0)?;
        // Inputs.
        self.x.upload(&s, inp.x, "source positions")?;
        self.alpha.upload(&s, inp.alpha, "source strengths")?;
        if !inp.targets_are_sources {
            self.tx.upload(&s, inp.targets, "targets")?;
        }
        if let Some(ta) = inp.target_alpha {
            if !inp.target_alpha_is_alpha {
                self.talpha.upload(&s, ta, "target strengths")?;
            }
        }
        if inp.n_selected > 0 {
            self.sigma.upload(&s, inp.sigma, "core radii")?;
            if let Some(sel) = inp.selected {
                self.sel.upload(&s, sel, "real-space selection")?;
            }
        }
        self.record(1)?;
        let nex = extra.components();
        self.u.ensure(&s, 3 * nt)?;
        self.ex.ensure(&s, nex * nt)?;
        let ptrs = DevicePointers {
            x: self.x.addr(&s),
            alpha: self.alpha.addr(&s),
            sigma: if inp.n_selected > 0 {
                self.sigma.addr(&s)
            } else {
                0
            },
            targets: if inp.targets_are_sources {
                None
            } else {
                Some(self.tx.addr(&s))
            },
            target_alpha: match (inp.target_alpha, inp.target_alpha_is_alpha) {
                (Some(_), true) => self.alpha.addr(&s),
                (Some(_), false) => self.talpha.addr(&s),
                (None, _) => 0u64,
            },
            selected: if inp.selected.is_some() && inp.n_selected > 0 {
                self.sel.addr(&s)
            } else {
                0
            },
            n_sources: ns,
            n_targets: nt,
            n_selected: inp.n_selected,
            u_out: self.u.addr(&s),
            ex_out: self.ex.addr(&s),
        };
        self.compute(p, &ptrs, extra)?;
        self.record(5)?;
        // Results.
        self.u
            .download(&self.gpu, &mut u_out[..3 * nt], "velocities")?;
        self.ex
            .download(&self.gpu, &mut ex_out[..nex * nt], "stretching/gradient")?;
        self.record(6)?;
        self.read_timings()?;
        check_written(&u_out[..3 * nt], "velocity")?;
        check_written(&ex_out[..nex * nt], "stretching/gradient")?;
        Ok(())
    }

    /// The same evaluation on inputs and outputs that live on this GPU (the device form of the
    /// summation seam, [`crate::summation::DeviceSummation`]): nothing is copied to or from
    /// the host. `ptrs` holds the device addresses (f64 arrays in the layouts of
    /// [`EwaldInputs`]; outputs sized by the caller for `n_targets` targets). The outputs are
    /// poisoned (NaN) first; the host does not check them (that would be a copy), the caller
    /// may. Only queued on the GPU's stream: the inputs are read when the stream gets there and
    /// the outputs are ready for whatever is queued after (the host does not wait).
    pub fn evaluate_device(
        &mut self,
        p: &EwaldParameters,
        ptrs: &DevicePointers,
        extra: GpuExtra,
    ) -> Result<(), CudaError> {
        check_sizes(p, ptrs.n_sources)?;
        self.compute(p, ptrs, extra)
    }

    /// Sorts, spreads, transforms, gathers and adds the real-space part: the phases between the
    /// inputs (device addresses in `ptrs`) and the outputs (`ptrs.u_out`, `ptrs.ex_out`,
    /// poisoned first). Records events 2, 3 and 4.
    fn compute(
        &mut self,
        p: &EwaldParameters,
        ptrs: &DevicePointers,
        extra: GpuExtra,
    ) -> Result<(), CudaError> {
        let (ns, nt) = (ptrs.n_sources, ptrs.n_targets);
        let (m, pp) = (p.grid, p.support);
        let s = self.stream.clone();
        let x_addr = ptrs.x;
        let alpha_addr = ptrs.alpha;
        // Sort the sources by first support node and spread.
        let m3 = m * m * m;
        let h = TAU / m as f64;
        let (mi, pi, ns_i) = (m as i32, pp as i32, ns as i32);
        self.keys.ensure(&s, ns.max(ptrs.n_selected))?;
        self.slots.ensure(&s, ns.max(ptrs.n_selected))?;
        self.start.zero(&s, m3 + 1)?;
        // SAFETY: ew_grid_keys(const double* x, int n, int M, int P, double h, int* keys,
        // int* slots, int* counts): x holds 3·ns doubles, keys/slots ≥ ns ints, counts M³ + 1
        // zeroed ints (keys < M³).
        launch!(s, &self.k.grid_keys, "ew_grid_keys", cfg1(ns, 256);
            &x_addr, &ns_i, &mi, &pi, &h, self.keys.get_mut(), self.slots.get_mut(),
            self.start.get_mut())?;
        self.finish_sort(Buckets::Grid, ns, m3)?;
        self.sd.ensure(&s, ns)?;
        self.sa.ensure(&s, ns)?;
        // SAFETY: ew_pack_grid(const int* order, const double* x, const double* alpha, int n,
        // int M, int P, double h, float4* sd, float4* sa): order is a permutation of 0..ns, x
        // and alpha hold 3·ns doubles, sd/sa ≥ ns float4 ([f32; 4]).
        launch!(s, &self.k.pack_grid, "ew_pack_grid", cfg1(ns, 256);
            self.order.get(), &x_addr, &alpha_addr, &ns_i, &mi, &pi, &h,
            self.sd.get_mut(), self.sa.get_mut())?;
        self.grid.ensure(&s, 3 * m3)?;
        let kb = KaiserBessel::new(m, pp, p.beta);
        let (beta, c4, inv_i0b, norm) = kb.kernel_constants();
        let (beta_f, c4_f, inv_i0b_f) = (beta as f32, c4 as f32, inv_i0b as f32);
        let norm3 = norm.powi(3) as f32;
        let (tx, ty, tz) = SPREAD_TILE;
        let cfg = LaunchConfig {
            grid_dim: (
                m.div_ceil(tx) as u32,
                m.div_ceil(ty) as u32,
                m.div_ceil(tz) as u32,
            ),
            block_dim: (SPREAD_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: ew_spread(const float4* sd, const float4* sa, const int* start, int M, int P,
        // float beta, float c4, float inv_i0b, float norm3, float* grid): sd/sa hold the ns
        // sorted sources, start M³ + 1 bucket offsets into them, grid 3·M³ floats; the grid of
        // blocks covers the M³ nodes in 16×16×8 tiles of 256 threads; P ≤ MAX_SUPPORT
        // (check_sizes).
        launch!(s, &self.k.spread, "ew_spread", cfg;
            self.sd.get(), self.sa.get(), self.start.get(), &mi, &pi, &beta_f, &c4_f,
            &inv_i0b_f, &norm3, self.grid.get_mut())?;
        self.record(2)?;

        // Transform, multiply, transform back.
        self.ensure_plans(m)?;
        self.upload_table(&kb, p)?;
        let nc = m * m * (m / 2 + 1);
        self.spec.ensure(&s, 3 * nc)?;
        let plans = self.plans.as_ref().expect("plans were just made");
        plans
            .r2c
            .exec_r2c(self.grid.get(), self.spec.get_mut())
            .doing("cuFFT R2C")?;
        let kmax = p.kmax as i32;
        let scale = (1.0 / m3 as f64) as f32;
        // SAFETY: ew_multiply(float2* spec, int M, int K, const float* table, float scale):
        // spec holds 3 spectra of M·M·(M/2+1) complex values, table K + 1 floats (uploaded just
        // above for these parameters, 2K < M); the grid covers one spectrum.
        launch!(s, &self.k.multiply, "ew_multiply", cfg1(nc, 256);
            self.spec.get_mut(), &mi, &kmax, self.table.get(), &scale)?;
        plans
            .c2r
            .exec_c2r(self.spec.get_mut(), self.grid.get_mut())
            .doing("cuFFT C2R")?;
        self.record(3)?;

        // Gather at the targets (in the sources' sorted order when they are the sources).
        let nex = extra.components();
        poison(&s, ptrs.u_out, 3 * nt)?;
        poison(&s, ptrs.ex_out, nex * nt)?;
        let nt_i = nt as i32;
        let inv_h = (1.0 / h) as f32;
        let gscale = (h * norm).powi(3) as f32;
        let targets = ptrs.targets.unwrap_or(x_addr);
        let order = if ptrs.targets.is_none() {
            self.order.addr(&s)
        } else {
            0u64
        };
        let talpha = ptrs.target_alpha;
        let u_addr = ptrs.u_out;
        let ex_addr = ptrs.ex_out;
        // SAFETY: ew_gather_*(const float* grid, int M, int P, double h, float beta, float c4,
        // float inv_i0b, float inv_h, float scale, const double* targets, const int* order, int nt,
        // const double* alpha_t, double* u_out, double* ex_out): grid holds the 3·M³ inverse
        // transforms; targets 3·nt doubles (the source positions when they are the targets);
        // order null or a permutation of 0..nt (= ns then); alpha_t 3·nt doubles when the mode
        // is a stretching one (null otherwise, not read); u_out 3·nt and ex_out nex·nt doubles
        // (poisoned above).
        launch!(s, &self.k.gather[extra.index()], "ew_gather", cfg1(nt, GATHER_THREADS);
            self.grid.get(), &mi, &pi, &h, &beta_f, &c4_f, &inv_i0b_f, &inv_h, &gscale, &targets,
            &order, &nt_i, &talpha, &u_addr, &ex_addr)?;
        self.record(4)?;

        // Real-space part.
        if ptrs.n_selected > 0 {
            let nsel = ptrs.n_selected;
            let sel = ptrs.selected;
            let (cells, side, m_img) = cell_grid(p.r_cut);
            self.build_cells([x_addr, alpha_addr, ptrs.sigma], sel, nsel, cells, side)?;
            let (nsel_i, cells_i, m_img_i) = (nsel as i32, cells as i32, m_img as i32);
            let r_cut2 = p.r_cut * p.r_cut;
            let inv_eta = (1.0 / p.eta) as f32;
            // SAFETY: ew_real_*(const ew_d4* sp, const float4* sa, const int* start, int ns,
            // int cells, double side, int m_img, double r_cut2, float inv_eta,
            // const double* targets, const int* order, int nt, const double* alpha_t,
            // double* u_out, double* ex_out): sp/csa hold the nsel sorted selected sources,
            // cstart cells³ + 1 offsets (1 + 1 when cells = 0); the rest as for the gather.
            launch!(s, &self.k.real[extra.index()], "ew_real", cfg1(nt, REAL_THREADS);
                self.sp.get(), self.csa.get(), self.cstart.get(), &nsel_i, &cells_i, &side,
                &m_img_i, &r_cut2, &inv_eta, &targets, &order, &nt_i, &talpha, &u_addr,
                &ex_addr)?;
        }
        Ok(())
    }

    /// Sorts the `n` selected sources (indices at device address `sel`, 0 for all) into cells
    /// (`cells` per side, 0: one bucket) and packs them into `sp`/`csa`.
    fn build_cells(
        &mut self,
        [x_addr, alpha_addr, sigma_addr]: [u64; 3],
        sel: u64,
        n: usize,
        cells: usize,
        side: f64,
    ) -> Result<(), CudaError> {
        let s = self.stream.clone();
        let nb = cells.max(1).pow(3);
        self.keys.ensure(&s, n)?;
        self.slots.ensure(&s, n)?;
        self.cstart.zero(&s, nb + 1)?;
        let (n_i, cells_i) = (n as i32, cells as i32);
        // SAFETY: ew_cell_keys(const double* x, const int* sel, int n, int cells, double side,
        // int* keys, int* slots, int* counts): x holds the sources (3 doubles each), sel null or
        // n indices into them, keys/slots ≥ n, counts cells³ + 1 zeroed ints (keys < cells³).
        launch!(s, &self.k.cell_keys, "ew_cell_keys", cfg1(n, 256);
            &x_addr, &sel, &n_i, &cells_i, &side, self.keys.get_mut(),
            self.slots.get_mut(), self.cstart.get_mut())?;
        self.finish_sort(Buckets::Cells, n, nb)?;
        self.sp.ensure(&s, n)?;
        self.csa.ensure(&s, n)?;
        // SAFETY: ew_pack_cells(const int* order, const int* sel, const double* x,
        // const double* alpha, const double* sigma, int n, ew_d4* sp, float4* sa): corder is a
        // permutation of 0..n, sel null or n source indices, x/alpha/sigma the uploaded
        // sources (sigma uploaded whenever cells are built), sp ≥ n ew_d4 ([f64; 4]), csa ≥ n
        // float4.
        launch!(s, &self.k.pack_cells, "ew_pack_cells", cfg1(n, 256);
            self.corder.get(), &sel, &x_addr, &alpha_addr, &sigma_addr, &n_i,
            self.sp.get_mut(), self.csa.get_mut())?;
        Ok(())
    }

    /// Blob vorticity Σ_q α_q ζ_σq(x − x_q) at the targets, over sources within
    /// `cutoff`·σ_q (`cutoff`·σ_max for the cell search).
    #[allow(clippy::too_many_arguments)]
    pub fn vorticity(
        &mut self,
        x: &[f64],
        alpha: &[f64],
        sigma: &[f64],
        sigma_max: f64,
        cutoff: f64,
        targets: &[f64],
        targets_are_sources: bool,
        w_out: &mut [f64],
    ) -> Result<(), CudaError> {
        let ns = x.len() / 3;
        let nt = targets.len() / 3;
        let s = self.stream.clone();
        self.record(0)?;
        self.x.upload(&s, x, "source positions")?;
        self.alpha.upload(&s, alpha, "source strengths")?;
        self.sigma.upload(&s, sigma, "core radii")?;
        if !targets_are_sources {
            self.tx.upload(&s, targets, "targets")?;
        }
        self.record(1)?;
        let t = if targets_are_sources {
            self.x.addr(&s)
        } else {
            self.tx.addr(&s)
        };
        let inputs = [self.x.addr(&s), self.alpha.addr(&s), self.sigma.addr(&s)];
        self.u.ensure(&s, 3 * nt)?;
        let out = self.u.addr(&s);
        self.vorticity_sums(&VorticityJob {
            sources: inputs,
            ns,
            sigma_max,
            cutoff,
            targets: t,
            nt,
            w_out: out,
        })?;
        self.u
            .download(&self.gpu, &mut w_out[..3 * nt], "vorticity")?;
        self.record(6)?;
        self.read_timings()?;
        check_written(&w_out[..3 * nt], "vorticity")
    }

    /// The same blob vorticity on inputs and outputs that live on this GPU (the device form),
    /// queued on the GPU's stream (the host does not wait).
    pub fn vorticity_device(&mut self, job: &VorticityJob) -> Result<(), CudaError> {
        self.vorticity_sums(job)
    }

    /// The blob vorticity at the nodes of the n³ lattice on [−π, π)³ (lattice_nodes order) by
    /// the separable Gaussian (`ew_lattice_vorticity`: 24 one-dimensional weights per source
    /// and tile of 8³ nodes instead of one exponential per pair), over sources within
    /// `cutoff`·σ_q per axis as the CPU's `summation::lattice` sums: sources at device addresses
    /// `[x, alpha, sigma]`, 3n³ f64 written at `w_out`. `Ok(false)` (nothing done) where the
    /// tiling does not apply: n not a multiple of 8, or cores so wide that 8h + cutoff·σ_max
    /// reaches π or the cell stencil wraps onto itself. Queued on the GPU's stream (the host
    /// does not wait).
    pub fn lattice_vorticity_device(
        &mut self,
        sources: [u64; 3],
        ns: usize,
        sigma_max: f64,
        cutoff: f64,
        n: usize,
        w_out: u64,
    ) -> Result<bool, CudaError> {
        if n == 0 || !n.is_multiple_of(8) {
            return Ok(false);
        }
        let cells = n / 4;
        let h = TAU / n as f64;
        let r_cut = cutoff * sigma_max;
        let reach = (r_cut / (4.0 * h)).ceil() as usize;
        if 2 + 2 * reach > cells || 8.0 * h + r_cut >= PI || cells > MAX_CELLS {
            return Ok(false);
        }
        // 32-bit in the kernel: source indices and the cell offsets (cells³ + 1 of them).
        if ns >= i32::MAX as usize || cells.pow(3) >= i32::MAX as usize {
            return Ok(false);
        }
        let s = self.stream.clone();
        self.build_cells(sources, 0, ns, cells, TAU / cells as f64)?;
        poison(&s, w_out, 3 * n * n * n)?;
        let tiles = n / 8;
        let cfg = LaunchConfig {
            grid_dim: ((tiles * tiles * tiles) as u32, 1, 1),
            block_dim: (512, 1, 1),
            shared_mem_bytes: 0,
        };
        let (cells_i, n_i, reach_i) = (cells as i32, n as i32, reach as i32);
        let alpha = sources[1];
        // SAFETY: ew_lattice_vorticity(const ew_d4* sp, const int* order, const double* alpha,
        // const int* start, int cells, int n, double h, int reach, double cut, double* w_out):
        // sp/cstart from build_cells over all ns sources into cells³ cells (cells = n/4),
        // corder the permutation that sorted them, alpha the 3·ns f64 strengths at the caller's
        // address, w_out 3·n³ doubles (the caller's); (n/8)³ blocks of 512 threads, one per
        // 8×8×8 tile; the stencil 2 + 2·reach ≤ cells (checked above).
        launch!(s, &self.k.lattice_vorticity, "ew_lattice_vorticity", cfg;
            self.sp.get(), self.corder.get(), &alpha, self.cstart.get(), &cells_i, &n_i, &h,
            &reach_i, &cutoff, &w_out)?;
        Ok(true)
    }

    /// The cell lists and the sums of [`EwaldDevice::vorticity`] (events 2 to 5).
    fn vorticity_sums(&mut self, job: &VorticityJob) -> Result<(), CudaError> {
        let VorticityJob {
            sources,
            ns,
            sigma_max,
            cutoff,
            targets,
            nt,
            w_out,
        } = *job;
        let s = self.stream.clone();
        self.record(2)?;
        self.record(3)?;
        self.record(4)?;
        let r_cut = cutoff * sigma_max;
        let (cells, side, m_img) = cell_grid(r_cut);
        self.build_cells(sources, 0, ns, cells, side)?;
        poison(&s, w_out, 3 * nt)?;
        let (ns_i, cells_i, m_img_i, nt_i) = (ns as i32, cells as i32, m_img as i32, nt as i32);
        let r_cut2 = r_cut * r_cut;
        let cut2 = cutoff * cutoff;
        let alpha = sources[1];
        // SAFETY: ew_vorticity(const ew_d4* sp, const int* order, const double* alpha,
        // const int* start, int ns, int cells, double side, int m_img, double r_cut2,
        // double cut2, const double* targets, int nt, double* w_out): sp/cstart from
        // build_cells over all ns sources (no selection), corder the permutation of 0..ns that
        // sorted them, alpha the 3·ns f64 strengths at the caller's address, targets 3·nt
        // doubles, w_out 3·nt doubles (the engine's own `u`, or the caller's device buffer).
        launch!(s, &self.k.vorticity, "ew_vorticity", cfg1(nt, REAL_THREADS);
            self.sp.get(), self.corder.get(), &alpha, self.cstart.get(), &ns_i,
            &cells_i, &side, &m_img_i, &r_cut2, &cut2, &targets, &nt_i, &w_out)?;
        self.record(5)?;
        Ok(())
    }
}

/// One blob-vorticity sum on arrays that live on the GPU: sources at device addresses
/// `[x, alpha, sigma]` (f64, 3, 3, 1 per source), over sources within `cutoff`·σ_q
/// (`cutoff`·σ_max for the cell search), at `nt` targets at `targets` (3 f64 each); 3 f64 per
/// target written at `w_out` (poisoned first).
#[derive(Debug, Clone, Copy)]
pub struct VorticityJob {
    pub sources: [u64; 3],
    pub ns: usize,
    pub sigma_max: f64,
    pub cutoff: f64,
    pub targets: u64,
    pub nt: usize,
    pub w_out: u64,
}

/// Device addresses of the inputs and outputs of one evaluation (f64 arrays: 3 per source for
/// positions and strengths, 1 for cores, 3 per target; outputs 3 and the extra's components per
/// target). 0 for an array that is not used.
#[derive(Debug, Clone, Copy)]
pub struct DevicePointers {
    pub x: u64,
    pub alpha: u64,
    /// Core radii: needed when `n_selected > 0`.
    pub sigma: u64,
    /// Target positions, `None` when the targets are the sources (gathered in their sorted order).
    pub targets: Option<u64>,
    /// Target strengths for stretching (may be `alpha`).
    pub target_alpha: u64,
    /// Real-space selection (`n_selected` source indices, i32), 0 for all sources.
    pub selected: u64,
    pub n_sources: usize,
    pub n_targets: usize,
    pub n_selected: usize,
    pub u_out: u64,
    pub ex_out: u64,
}

/// The window and grid limits of the kernels and 32-bit indexing.
fn check_sizes(p: &EwaldParameters, ns: usize) -> Result<(), CudaError> {
    let (m, pp) = (p.grid, p.support);
    if pp > MAX_SUPPORT || pp > m || m < 4 {
        return Err(CudaError::Invalid(format!(
            "GPU Ewald: window support P = {pp} (at most {MAX_SUPPORT} and M = {m})"
        )));
    }
    if m * m * m >= i32::MAX as usize / 2 || ns >= i32::MAX as usize / 4 {
        return Err(CudaError::Invalid(format!(
            "GPU Ewald: {ns} sources on a {m}^3 grid exceed 32-bit indexing"
        )));
    }
    Ok(())
}

/// Fills `len` f64 values at device address `ptr` with 0xFF bytes (NaN).
fn poison(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Result<(), CudaError> {
    if len == 0 || ptr == 0 {
        return Ok(());
    }
    // SAFETY: ptr is a live allocation of at least `len` f64 on this stream's context (sized by
    // ensure() for the engine's own outputs, by the caller for the device form, whose contract
    // says so); all-ones bytes are a valid (NaN) f64.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, len * 8, stream.cu_stream()) }
        .doing("poisoning the output")
}

/// Cells per side (capped), their side, and the image range for explicit images (cells = 0),
/// as in `Neighbours::build` of the CPU evaluator.
fn cell_grid(r_cut: f64) -> (usize, f64, usize) {
    let cells = crate::summation::cells::cells_for(r_cut).min(MAX_CELLS);
    let side = TAU / cells.max(1) as f64;
    let m_img = if cells == 0 {
        ((r_cut + PI) / TAU).ceil() as usize
    } else {
        0
    };
    (cells, side, m_img)
}

/// Every value was written (outputs are poisoned with NaN before each launch) and is finite.
fn check_written(v: &[f64], what: &str) -> Result<(), CudaError> {
    use rayon::prelude::*;
    match v.par_iter().position_any(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(CudaError::Invalid(format!(
            "GPU Ewald: {what} value {i} of {} is {} (not written, or non-finite inputs)",
            v.len(),
            v[i]
        ))),
    }
}
