//! CUDA through cudarc: device detection that never panics, one context per GPU ordinal, and
//! GPU kernels compiled from `kernels/*.cu` (with the shared headers they include) by NVRTC at
//! run time, once per process, device and option set. No physics lives here.
//!
//! Nothing here needs the CUDA toolkit at build time: the driver (`libcuda.so`) and NVRTC
//! (`libnvrtc.so`) are loaded with `dlopen` on first use. [`gpu_at`] probes for both before any
//! other CUDA call (cudarc panics when a library is missing), so a machine without a GPU gets a
//! [`CudaError::Unavailable`] with the reason, never a panic. `VPM_NO_CUDA=1` hides the GPU (for
//! tests of the CPU fallback on a GPU machine).
//!
//! One `.cu` file per family of kernels; [`Gpu::module`] compiles a family for the device's
//! architecture (`sm_XY`, straight to a cubin, so the driver's PTX JIT is not involved) and
//! caches the loaded module; [`Gpu::module_from`] does the same for a [`KernelSource`] whose
//! `#include "…"` headers are given to NVRTC by name. The families (their host sides live with
//! their methods): `biot_savart.cu` ([`crate::summation::direct::all_pairs`]), `ewald.cu`
//! ([`crate::summation::ewald::engine`]) and `fmm.cu` ([`crate::summation::fmm::cuda`]), which
//! include `common.cuh`; `particles.cu` ([`crate::vortex::resident`]), `lattice.cu`
//! ([`crate::vortex::rbf_device`]) and `spectral.cu` ([`crate::spectral::gpu`]).
//!
//! A failed driver or cuFFT call becomes a [`CudaError`] saying what was being done
//! ([`Doing::doing`]); the solvers' errors convert from it, so `?` carries it up.
//!
//! **One ordered stream per GPU** (and, for transfers between GPUs only, a second one:
//! [`Gpu::exchange_stream`]). The [`Gpu`] owns its stream, made once with the context
//! ([`Gpu::stream`]); every engine queues its copies, launches and cuFFT transforms on it, so
//! work queued by one engine (the resident stepper's update) is ready for whatever another
//! queues after it (the evaluator's sums) without the host waiting in between. The host waits
//! only where it needs a value, and every such wait goes through the `Gpu`:
//! [`Gpu::synchronize`], [`Gpu::copy_to_host`] (a device-to-host copy, which waits for the
//! stream) and [`Gpu::elapsed_ms`] (event timing, a wait only when the events are not yet
//! reached). They are counted ([`Gpu::sync_counts`], and per thread [`thread_sync_counts`]), so a
//! test can hold a solver to its budget of host synchronisations.
//!
//! Kernel development: with `VPM_KERNELS_DIR=DIR`, the sources and headers are read from
//! `DIR/<file>` at run time instead of the copies embedded in the binary (no rebuild to try a
//! change).

use cudarc::cufft::CudaFft;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, DevicePtr, DeviceRepr,
    DriverError,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Why a GPU operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// No usable GPU (no driver, no device, no NVRTC, or hidden by `VPM_NO_CUDA`).
    #[error("{0}")]
    Unavailable(String),
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile {source_name} with {options:?}:\n{log}")]
    Compile {
        source_name: String,
        options: Vec<String>,
        log: String,
    },
    /// A driver call failed.
    #[error("CUDA error while {what}: {message}")]
    Driver { what: String, message: String },
    /// Bad inputs or outputs (sizes out of range, output not fully written, …).
    #[error("{0}")]
    Invalid(String),
}

impl CudaError {
    /// A driver error with what was being done.
    pub fn driver(what: impl Into<String>, e: DriverError) -> Self {
        CudaError::Driver {
            what: what.into(),
            message: describe_driver_error(e),
        }
    }
}

/// A failed driver or cuFFT call as a [`CudaError`] saying what was being done:
/// `stream.synchronize().doing("waiting for the step")?`.
pub trait Doing<T> {
    fn doing(self, what: impl Into<String>) -> Result<T, CudaError>;
}

impl<T> Doing<T> for Result<T, DriverError> {
    fn doing(self, what: impl Into<String>) -> Result<T, CudaError> {
        self.map_err(|e| CudaError::driver(what, e))
    }
}

impl<T> Doing<T> for Result<T, cudarc::cufft::result::CufftError> {
    fn doing(self, what: impl Into<String>) -> Result<T, CudaError> {
        self.map_err(|e| CudaError::Driver {
            what: what.into(),
            message: format!("{e:?}"),
        })
    }
}

fn describe_driver_error(e: DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?} ({})", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

/// What the device is, for logs and benchmark reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuInfo {
    pub name: String,
    pub ordinal: usize,
    /// Compute capability (major, minor), e.g. (9, 0) for an H100.
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub total_memory_bytes: usize,
    /// The driver's CUDA version, e.g. "13.0".
    pub driver_cuda_version: String,
    /// NVRTC's version, e.g. "13.0".
    pub nvrtc_version: String,
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (sm_{}{}, {} SMs, {:.0} GiB; driver CUDA {}, NVRTC {})",
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.multiprocessors,
            self.total_memory_bytes as f64 / (1u64 << 30) as f64,
            self.driver_cuda_version,
            self.nvrtc_version
        )
    }
}

/// A compiled, loaded kernel family.
pub struct CompiledModule {
    pub module: Arc<CudaModule>,
    /// The NVRTC options it was compiled with.
    pub options: Vec<String>,
    /// NVRTC's log (with `--ptxas-options=-v`: registers, spills, shared memory per kernel).
    pub log: String,
    /// The cubin (for `cuobjdump`/`nvdisasm` in performance work).
    pub cubin: Vec<u8>,
}

impl CompiledModule {
    /// The kernel `name` of this module.
    pub fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        self.module
            .load_function(name)
            .doing(format!("loading kernel {name}"))
    }
}

/// Compiled modules by (source name, NVRTC options).
type ModuleCache = HashMap<(String, Vec<String>), Arc<CompiledModule>>;

/// Host synchronisations with a GPU: how often the host waited for it (`waits`: explicit
/// synchronisations, device-to-host copies and event reads that had to wait) and how many of
/// those were device-to-host copies (`copies_to_host`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    pub waits: u64,
    pub copies_to_host: u64,
}

impl std::ops::Sub for SyncCounts {
    type Output = SyncCounts;
    fn sub(self, earlier: SyncCounts) -> SyncCounts {
        SyncCounts {
            waits: self.waits - earlier.waits,
            copies_to_host: self.copies_to_host - earlier.copies_to_host,
        }
    }
}

impl std::fmt::Display for SyncCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} host waits ({} device-to-host copies)",
            self.waits, self.copies_to_host
        )
    }
}

thread_local! {
    /// This thread's host synchronisations with any GPU ([`thread_sync_counts`]).
    static THREAD_SYNCS: Cell<SyncCounts> = const {
        Cell::new(SyncCounts { waits: 0, copies_to_host: 0 })
    };
}

/// The host synchronisations this thread has made with any GPU since it started (tests take
/// differences; unlike [`Gpu::sync_counts`], other threads sharing the GPU do not add to it).
pub fn thread_sync_counts() -> SyncCounts {
    THREAD_SYNCS.with(Cell::get)
}

/// One GPU: its ordinal's primary context, its one ordered stream, the compiled-module cache
/// and the counts of host synchronisations.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: GpuInfo,
    modules: Mutex<ModuleCache>,
    /// The exchange stream ([`Gpu::exchange_stream`]), made on first use.
    exchange: OnceLock<Arc<CudaStream>>,
    waits: AtomicU64,
    copies_to_host: AtomicU64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish()
    }
}

/// Probed GPUs by ordinal: each is probed once (its context is the device's primary context,
/// which the driver keeps one of per process anyway). A run holds the [`Gpu`] it uses as a
/// value ([`crate::device::Device`]); this cache only stops a second probe.
static GPUS: OnceLock<Mutex<GpuCache>> = OnceLock::new();

/// Probe results by ordinal (the error is the reason the GPU is not usable).
type GpuCache = HashMap<usize, Result<Arc<Gpu>, String>>;

/// The GPU with this ordinal, probed once. `Err` (never a panic) when it is not usable, with the
/// reason.
pub fn gpu_at(ordinal: usize) -> Result<Arc<Gpu>, CudaError> {
    let cache = GPUS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(ordinal)
        .or_insert_with(|| {
            // cudarc panics on a missing library or symbol; the probe checks for the libraries
            // first, and the catch turns anything unforeseen into an error as well.
            match std::panic::catch_unwind(|| probe(ordinal)) {
                Ok(r) => r.map(Arc::new),
                Err(p) => Err(format!(
                    "the CUDA libraries could not be used ({})",
                    p.downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("panic while loading")
                )),
            }
        })
        .clone()
        .map_err(CudaError::Unavailable)
}

/// `Ok(info)` of GPU 0 when it is usable, otherwise the reason.
pub fn availability() -> Result<GpuInfo, CudaError> {
    gpu_at(0).map(|g| g.info.clone())
}

fn probe(ordinal: usize) -> Result<Gpu, String> {
    if let Some(v) = std::env::var_os("VPM_NO_CUDA") {
        if !v.is_empty() && v != "0" {
            return Err("the GPU is hidden by the environment variable VPM_NO_CUDA".into());
        }
    }
    // SAFETY: only tries to dlopen the driver library under its usual names; no CUDA call.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            "the CUDA driver library (libcuda.so) is not installed or not on the library path"
                .into(),
        );
    }
    let count = CudaContext::device_count().map_err(|e| {
        format!(
            "the CUDA driver could not be initialised: {}",
            describe_driver_error(e)
        )
    })?;
    if count < 1 {
        return Err("the CUDA driver found no GPU".into());
    }
    if ordinal >= count as usize {
        return Err(format!(
            "there is no GPU {ordinal}: the CUDA driver found {count} (ordinals 0 to {})",
            count - 1
        ));
    }
    // SAFETY: as above, for the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so, CUDA's run-time compiler) was not found: install it (CUDA \
             toolkit, or the nvidia-cuda-nvrtc package) and put its directory on LD_LIBRARY_PATH"
                .into(),
        );
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| {
        format!(
            "could not create a context on GPU {ordinal}: {}",
            describe_driver_error(e)
        )
    })?;
    let attr = |a| ctx.attribute(a).map_err(describe_driver_error);
    use cudarc::driver::sys::CUdevice_attribute as A;
    let info = GpuInfo {
        name: ctx.name().map_err(describe_driver_error)?,
        ordinal,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        total_memory_bytes: ctx.total_mem().map_err(describe_driver_error)?,
        driver_cuda_version: driver_version(),
        nvrtc_version: nvrtc_version(),
    };
    let stream = ctx.new_stream().map_err(|e| {
        format!(
            "could not create a stream on GPU {ordinal}: {}",
            describe_driver_error(e)
        )
    })?;
    if std::env::var_os("VPM_CUDA_EVENT_TRACKING").is_none_or(|v| v != "1") {
        // SAFETY: every allocation, copy, launch and free of this context's buffers is queued
        // on its one stream (`stream`, handed out by `Gpu::stream`; no other stream is made in
        // the program but the exchange stream below, and the lib test
        // `only_the_gpu_makes_streams_and_waits` scans the sources), so the stream's order
        // already orders every use of a buffer, and the events cudarc would record and wait on
        // per buffer and launch add nothing but host time. The exchange stream only runs NCCL
        // transfers on raw addresses, each fenced against this stream by explicit events
        // (`NcclComm::exchange_beside` and `NcclComm::join`).
        // VPM_CUDA_EVENT_TRACKING=1 keeps them (a diagnostic switch).
        unsafe { ctx.disable_event_tracking() };
    }
    Ok(Gpu {
        ctx,
        stream,
        info,
        modules: Mutex::new(HashMap::new()),
        exchange: OnceLock::new(),
        waits: AtomicU64::new(0),
        copies_to_host: AtomicU64::new(0),
    })
}

fn driver_version() -> String {
    let mut v: c_int = 0;
    // SAFETY: writes one int; the driver library is loaded (probed before).
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        "unknown".into()
    }
}

fn nvrtc_version() -> String {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: writes two ints; the NVRTC library is present (probed before).
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        format!("{major}.{minor}")
    } else {
        "unknown".into()
    }
}

impl Gpu {
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The GPU's one ordered stream (module docs): every engine queues its copies, launches
    /// and transforms here, so what one queues is ready for what another queues after it.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The GPU's second stream, for transfers between GPUs only (made on first use): NCCL
    /// queues an exchange there so that it runs beside the transforms on [`Gpu::stream`]. It
    /// touches no buffer without an event from the main stream before it, and the main stream
    /// waits on an event of it before reading what it received ([`crate::device::nccl`]).
    pub fn exchange_stream(&self) -> Result<&Arc<CudaStream>, CudaError> {
        if let Some(s) = self.exchange.get() {
            return Ok(s);
        }
        let made = self
            .ctx
            .new_stream()
            .doing("creating the exchange stream")?;
        Ok(self.exchange.get_or_init(|| made))
    }

    /// The exchange stream if it has been made (`None`: nothing ever ran on it).
    pub fn exchange_stream_if_made(&self) -> Option<&Arc<CudaStream>> {
        self.exchange.get()
    }

    /// Counts one host wait (and a device-to-host copy when `copy`).
    fn count(&self, copy: bool) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.copies_to_host
            .fetch_add(u64::from(copy), Ordering::Relaxed);
        THREAD_SYNCS.with(|c| {
            let mut v = c.get();
            v.waits += 1;
            v.copies_to_host += u64::from(copy);
            c.set(v);
        });
    }

    /// The host synchronisations with this GPU so far, from every thread.
    pub fn sync_counts(&self) -> SyncCounts {
        SyncCounts {
            waits: self.waits.load(Ordering::Relaxed),
            copies_to_host: self.copies_to_host.load(Ordering::Relaxed),
        }
    }

    /// Waits until the stream has run everything queued on it (`what` names the work in the
    /// error). Counted: the host waits only where it needs the GPU's results.
    pub fn synchronize(&self, what: &str) -> Result<(), CudaError> {
        self.count(false);
        self.stream
            .synchronize()
            .doing(format!("waiting for {what}"))
    }

    /// Copies `src` (its first `dst.len()` values) to the host once the stream reaches the copy,
    /// and waits for it: one counted host wait and device-to-host copy.
    pub fn copy_to_host<T: DeviceRepr, S: DevicePtr<T>>(
        &self,
        src: &S,
        dst: &mut [T],
        what: &str,
    ) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.count(true);
        self.stream
            .memcpy_dtoh(src, dst)
            .doing(format!("copying {what} to the host"))?;
        // A copy into pageable memory has finished when the call returns; the wait makes that
        // so for any host memory.
        self.stream
            .synchronize()
            .doing(format!("copying {what} to the host"))
    }

    /// Milliseconds of device time between two events recorded on the stream; counted as a
    /// host wait only when `stop` has not been reached yet (reading events the stream has
    /// passed does not wait).
    pub fn elapsed_ms(
        &self,
        start: &CudaEvent,
        stop: &CudaEvent,
        what: &str,
    ) -> Result<f32, CudaError> {
        if !stop.try_is_complete().doing(format!("timing {what}"))? {
            self.count(false);
        }
        start.elapsed_ms(stop).doing(format!("timing {what}"))
    }

    /// A new CUDA event (default flags: timing on) for measuring device time.
    pub fn event(&self) -> Result<CudaEvent, CudaError> {
        self.ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .doing("creating an event")
    }

    /// Makes the GPU's context current on the calling thread: needed before driver calls that
    /// take no context or stream (occupancy, memory queries), which act on the current one.
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().doing("binding the context")
    }

    /// Free device memory now, in bytes, from the driver.
    pub fn free_memory(&self) -> Result<usize, CudaError> {
        self.bind()?;
        cudarc::driver::result::mem_get_info()
            .map(|(free, _total)| free)
            .doing("reading free memory")
    }

    /// The module compiled from `source` (named `source_name` in logs) with `options` (besides
    /// the architecture, which is the device's), compiled and loaded on first request and cached
    /// for the life of the process.
    pub fn module(
        &self,
        source_name: &str,
        source: &str,
        options: &[String],
    ) -> Result<Arc<CompiledModule>, CudaError> {
        self.module_with_headers(source_name, source, &[], options)
    }

    /// The module of a kernel family: its source and headers read from `VPM_KERNELS_DIR` when
    /// that is set, else the embedded copies; compiled with `options` and cached as
    /// [`Gpu::module`].
    pub fn module_from(
        &self,
        source: &KernelSource,
        options: &[String],
    ) -> Result<Arc<CompiledModule>, CudaError> {
        let (name, text) = match source_override(source.file)? {
            Some(o) => o,
            None => (source.file.to_string(), source.text.to_string()),
        };
        let mut headers = Vec::with_capacity(source.headers.len());
        for (file, text) in source.headers {
            let text = match source_override(file)? {
                Some((_, t)) => t,
                None => text.to_string(),
            };
            headers.push((file.to_string(), text));
        }
        self.module_with_headers(&name, &text, &headers, options)
    }

    /// [`Gpu::module`] with named headers (name as in `#include "name"`, text).
    fn module_with_headers(
        &self,
        source_name: &str,
        source: &str,
        headers: &[(String, String)],
        options: &[String],
    ) -> Result<Arc<CompiledModule>, CudaError> {
        let key = (source_name.to_string(), options.to_vec());
        let mut cache = self
            .modules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(m) = cache.get(&key) {
            return Ok(m.clone());
        }
        let (major, minor) = self.info.compute_capability;
        let mut opts = vec![
            format!("--gpu-architecture=sm_{major}{minor}"),
            "--std=c++17".to_string(),
        ];
        opts.extend(options.iter().cloned());
        // Registers and spills in the log; retried without if this NVRTC rejects the option.
        let mut verbose = opts.clone();
        verbose.push("--ptxas-options=-v".to_string());
        let (cubin, log, used) = match compile_cubin(source_name, source, headers, &verbose) {
            Ok((c, l)) => (c, l, verbose),
            Err(CompileFailure::InvalidOption) => {
                match compile_cubin(source_name, source, headers, &opts) {
                    Ok((c, l)) => (c, l, opts),
                    Err(f) => return Err(f.into_error(source_name, &opts)),
                }
            }
            Err(f) => return Err(f.into_error(source_name, &verbose)),
        };
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.clone()))
            .doing(format!("loading the {source_name} module"))?;
        let m = Arc::new(CompiledModule {
            module,
            options: used,
            log,
            cubin,
        });
        cache.insert(key, m.clone());
        Ok(m)
    }

    /// Every module compiled so far (for `--dump` in benchmarks).
    pub fn compiled_modules(&self) -> Vec<(String, Arc<CompiledModule>)> {
        let cache = self
            .modules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut v: Vec<_> = cache
            .iter()
            .map(|((name, opts), m)| (format!("{name} {}", opts.join(" ")), m.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// A kernel family's source as embedded in the binary: the `.cu` file's name and text, and the
/// headers it includes (name, text).
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub file: &'static str,
    pub text: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
}

/// The [`KernelSource`] of `kernels/<file>`, embedded in the binary, with the headers it
/// includes: `kernel_source!("ewald.cu", PAIR_KERNEL_HEADER)`.
macro_rules! kernel_source {
    ($file:literal $(, $header:expr)* $(,)?) => {
        $crate::device::cuda::KernelSource {
            file: $file,
            text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/", $file)),
            headers: &[$($header),*],
        }
    };
}
pub(crate) use kernel_source;

/// A struct of the kernels of `module` (a [`CompiledModule`]), each field named as its kernel
/// without the family's prefix, then any other fields after a `;`:
/// `load_kernels!(module, "vp_", Kernels { euler, heun; order: 2 })` loads `vp_euler` and
/// `vp_heun` (an error from the first that fails).
macro_rules! load_kernels {
    ($module:expr, $prefix:literal, $ty:ident {
        $($field:ident),* $(,)? $(; $($name:ident: $value:expr),* $(,)?)?
    }) => {
        $ty {
            $($field: $module.function(concat!($prefix, stringify!($field)))?,)*
            $($($name: $value,)*)?
        }
    };
}
pub(crate) use load_kernels;

/// The text of kernel file `file` from `VPM_KERNELS_DIR`, when that variable is set: (a name
/// for the module cache and logs, the text).
pub(crate) fn source_override(file: &str) -> Result<Option<(String, String)>, CudaError> {
    let Some(dir) = std::env::var_os("VPM_KERNELS_DIR") else {
        return Ok(None);
    };
    let path = std::path::Path::new(&dir).join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CudaError::Invalid(format!(
            "VPM_KERNELS_DIR: cannot read {}: {e}",
            path.display()
        ))
    })?;
    Ok(Some((path.display().to_string(), text)))
}

enum CompileFailure {
    InvalidOption,
    Failed { what: String, log: String },
}

impl CompileFailure {
    fn into_error(self, source_name: &str, options: &[String]) -> CudaError {
        match self {
            CompileFailure::InvalidOption => CudaError::Compile {
                source_name: source_name.to_string(),
                options: options.to_vec(),
                log: "NVRTC rejected an option".into(),
            },
            CompileFailure::Failed { what, log } => CudaError::Compile {
                source_name: source_name.to_string(),
                options: options.to_vec(),
                log: format!("{what}\n{log}"),
            },
        }
    }
}

/// Compiles `source` to a cubin with NVRTC; returns the cubin and the log.
fn compile_cubin(
    name: &str,
    source: &str,
    headers: &[(String, String)],
    options: &[String],
) -> Result<(Vec<u8>, String), CompileFailure> {
    use cudarc::nvrtc::sys::{self as nv, nvrtcResult};
    let failed = |what: String| CompileFailure::Failed {
        what,
        log: String::new(),
    };
    let src = CString::new(source).map_err(|_| failed("source has a NUL byte".into()))?;
    let cname = CString::new(name).map_err(|_| failed("name has a NUL byte".into()))?;
    let copts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| failed("option has a NUL byte".into()))?;
    let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    let header_texts: Vec<CString> = headers
        .iter()
        .map(|(_, t)| CString::new(t.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| failed("header has a NUL byte".into()))?;
    let header_names: Vec<CString> = headers
        .iter()
        .map(|(n, _)| CString::new(n.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| failed("header name has a NUL byte".into()))?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let (texts_arg, names_arg) = if headers.is_empty() {
        (std::ptr::null(), std::ptr::null())
    } else {
        (text_ptrs.as_ptr(), name_ptrs.as_ptr())
    };
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: src, cname and the header texts and names are NUL-terminated and outlive the
    // program (destroyed below); the two header arrays hold headers.len() pointers each (null
    // arrays with count 0 when there are none).
    let r = unsafe {
        nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            headers.len() as c_int,
            texts_arg,
            names_arg,
        )
    };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(failed(format!("nvrtcCreateProgram: {r:?}")));
    }
    // SAFETY: prog is a valid program; ptrs holds options.len() NUL-terminated strings that
    // outlive the call.
    let r = unsafe { nv::nvrtcCompileProgram(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
    let log = program_log(prog);
    let result = if r == nvrtcResult::NVRTC_ERROR_INVALID_OPTION {
        Err(CompileFailure::InvalidOption)
    } else if r != nvrtcResult::NVRTC_SUCCESS {
        Err(CompileFailure::Failed {
            what: format!("nvrtcCompileProgram: {r:?}"),
            log: log.clone(),
        })
    } else {
        let mut size: usize = 0;
        // SAFETY: prog compiled successfully; writes one usize.
        let r = unsafe { nv::nvrtcGetCUBINSize(prog, &mut size) };
        if r != nvrtcResult::NVRTC_SUCCESS || size == 0 {
            Err(failed(format!(
                "nvrtcGetCUBINSize: {r:?} (size {size}); is the architecture a real sm_XY?"
            )))
        } else {
            let mut cubin = vec![0u8; size];
            // SAFETY: cubin has the `size` bytes NVRTC just reported.
            let r = unsafe { nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char) };
            if r != nvrtcResult::NVRTC_SUCCESS {
                Err(failed(format!("nvrtcGetCUBIN: {r:?}")))
            } else {
                Ok((cubin, log))
            }
        }
    };
    // SAFETY: prog is valid and destroyed exactly once.
    unsafe { nv::nvrtcDestroyProgram(&mut prog) };
    result
}

fn program_log(prog: cudarc::nvrtc::sys::nvrtcProgram) -> String {
    use cudarc::nvrtc::sys as nv;
    let mut size: usize = 0;
    // SAFETY: prog is a valid program; writes one usize.
    if unsafe { nv::nvrtcGetProgramLogSize(prog, &mut size) } != nv::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    // SAFETY: buf has the `size` bytes (NUL included) NVRTC just reported.
    if unsafe { nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) }
        != nv::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    CStr::from_bytes_until_nul(&buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Launches kernel `$f` on `$stream` with configuration `$cfg` and the listed arguments,
/// naming it `$name` in the error; the caller's `// SAFETY:` comment states why the arguments
/// match the kernel's signature and the buffers are large enough. Shared by the GPU engines.
macro_rules! launch {
    ($stream:expr, $f:expr, $name:expr, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let mut b = $stream.launch_builder($f);
        $( b.arg($arg); )*
        // SAFETY: stated at the macro's call site (signature and sizes).
        let launched = unsafe { b.launch($cfg) };
        $crate::device::cuda::Doing::doing(launched, format!("launching {}", $name))
    }};
}
pub(crate) use launch;

/// Checks that cuFFT can be loaded (cudarc panics on a missing library).
pub fn cufft_available() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the cuFFT library under its usual names; no cuFFT call.
    if unsafe { cudarc::cufft::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::Unavailable(
            "cuFFT (libcufft.so) was not found: install it (CUDA toolkit, or the nvidia-cufft \
             package) and put its directory on LD_LIBRARY_PATH"
                .into(),
        ))
    }
}

/// One side of a batched cuFFT plan's data (cuFFT's advanced layout): the embedding dimensions
/// (`None`: the transform's own, packed), the stride between elements and the distance between
/// batches.
#[derive(Debug, Clone, Copy)]
pub struct FftLayout<'a> {
    pub embed: Option<&'a [i32]>,
    pub stride: i32,
    pub dist: i32,
}

impl<'a> FftLayout<'a> {
    pub fn new(embed: &'a [i32], stride: i32, dist: i32) -> Self {
        FftLayout {
            embed: Some(embed),
            stride,
            dist,
        }
    }

    /// Packed batches `dist` values apart.
    pub fn packed(dist: i32) -> Self {
        FftLayout {
            embed: None,
            stride: 1,
            dist,
        }
    }
}

/// A batched cuFFT plan (`cufftPlanMany`) of type `ty` over `dims` from `input` to `output`, on
/// `stream`; `what` names the grid in the error.
pub fn fft_plan(
    what: &str,
    dims: &[i32],
    (input, output): (FftLayout, FftLayout),
    ty: cudarc::cufft::sys::cufftType,
    batch: i32,
    stream: &Arc<CudaStream>,
) -> Result<CudaFft, CudaError> {
    CudaFft::plan_many(
        dims,
        input.embed,
        input.stride,
        input.dist,
        output.embed,
        output.stride,
        output.dist,
        ty,
        batch,
        stream.clone(),
    )
    .doing(format!("creating a cuFFT plan for {what}"))
}

/// The work area cuFFT allocated for `plan`, in bytes.
pub fn fft_work_bytes(plan: &CudaFft) -> Result<u64, CudaError> {
    // SAFETY: `plan` holds a live plan handle (destroyed only by its Drop); the call writes one
    // size_t.
    unsafe { cudarc::cufft::result::get_size(plan.handle()) }
        .map(|b| b as u64)
        .doing("reading a cuFFT work-area size")
}

/// Complex values of one half spectrum of a real n³ transform in cuFFT's layout: n·n·(n/2 + 1).
pub fn half_spectrum_len(n: usize) -> usize {
    n * n * (n / 2 + 1)
}
