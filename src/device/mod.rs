//! Where a solver runs: the run-level device choice ([`DeviceRequest`], parsed from the case's
//! `device` key or `--device`), the runtime [`Device`] value made from it once and passed to
//! every planner, and the memory each side has ([`host_memory_available`], [`Device::memory_available`]).
//!
//! No physics lives here, and there is no process-global device: a solver gets the device it
//! runs on as a value. A GPU ([`cuda::Gpu`]) owns one ordered stream that every engine queues
//! on, and counts the host's waits for it ([`cuda::Gpu::sync_counts`]); [`buffer`] holds the
//! device buffers, [`timer`] times phases with events on that stream.

pub mod buffer;
pub mod cuda;
pub mod group;
pub mod nccl;
pub mod sort;
pub mod timer;

use cuda::{CudaError, Gpu};
pub use group::{GpuGroup, GpuSelection};
use std::path::Path;
use std::sync::Arc;

/// Which device a run (or one solver of it) asks for: `"auto" | "cpu" | "cuda" | "cuda:N"`, or
/// several GPUs of this host, `"cuda:all" | "cuda:0,1,2,3"` (the spectral solver only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceRequest {
    /// `"auto"`: a GPU when one is usable (and the solver has a GPU implementation), else the
    /// CPU; the choice is logged with its reason.
    #[default]
    Auto,
    /// `"cpu"`.
    Cpu,
    /// `"cuda"` (`None`: GPU 0) or `"cuda:N"`: an NVIDIA GPU; an error when it is not usable.
    Cuda(Option<usize>),
    /// `"cuda:all"` or `"cuda:0,1,…"`: a group of GPUs, one rank (process) per GPU joined by
    /// NCCL ([`group`]).
    CudaGroup(GpuSelection),
}

impl DeviceRequest {
    /// What the spellings are, for error messages.
    pub const ALLOWED: &'static str = r#"must be "auto", "cpu", "cuda" or "cuda:N" (N = GPU ordinal, 0, 1, …), or for the spectral solver on several GPUs "cuda:all" or a list "cuda:0,1,2,3" (each GPU once)"#;

    /// Parses `"auto" | "cpu" | "cuda" | "cuda:N" | "cuda:all" | "cuda:N,M,…"`.
    pub fn parse(s: &str) -> Option<DeviceRequest> {
        Self::parse_or_reason(s).ok()
    }

    /// [`DeviceRequest::parse`], with why a spelling is refused (a GPU named twice or beyond
    /// the largest ordinal gets its own reason; anything else gets [`DeviceRequest::ALLOWED`]).
    pub fn parse_or_reason(s: &str) -> Result<DeviceRequest, String> {
        let bad = || DeviceRequest::ALLOWED.to_string();
        match s {
            "auto" => return Ok(DeviceRequest::Auto),
            "cpu" => return Ok(DeviceRequest::Cpu),
            "cuda" => return Ok(DeviceRequest::Cuda(None)),
            _ => {}
        }
        let rest = s.strip_prefix("cuda:").ok_or_else(bad)?;
        if rest == "all" {
            return Ok(DeviceRequest::CudaGroup(GpuSelection::All));
        }
        let ordinal = |n: &str| -> Option<usize> {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 4 {
                return None;
            }
            n.parse().ok()
        };
        if !rest.contains(',') {
            return ordinal(rest)
                .map(|n| DeviceRequest::Cuda(Some(n)))
                .ok_or_else(bad);
        }
        let mut mask = 0u64;
        for part in rest.split(',') {
            let n = ordinal(part).ok_or_else(bad)?;
            if n >= GpuSelection::MAX_GPUS {
                return Err(format!(
                    "GPU {n} is beyond the {} GPUs a group can name (ordinals 0 to {})",
                    GpuSelection::MAX_GPUS,
                    GpuSelection::MAX_GPUS - 1
                ));
            }
            if mask & (1 << n) != 0 {
                return Err(format!(
                    "GPU {n} is named twice; name each GPU of the group once (e.g. \
                     \"cuda:0,1,2,3\")"
                ));
            }
            mask |= 1 << n;
        }
        Ok(DeviceRequest::CudaGroup(GpuSelection::Mask(mask)))
    }

    /// Whether this asks for a GPU explicitly (one or several).
    pub fn is_cuda(&self) -> bool {
        matches!(self, DeviceRequest::Cuda(_) | DeviceRequest::CudaGroup(_))
    }

    /// Whether this asks for several GPUs.
    pub fn is_group(&self) -> bool {
        matches!(self, DeviceRequest::CudaGroup(_))
    }
}

impl std::fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(None) => f.write_str("cuda"),
            DeviceRequest::Cuda(Some(n)) => write!(f, "cuda:{n}"),
            DeviceRequest::CudaGroup(sel) => write!(f, "cuda:{sel}"),
        }
    }
}

impl std::str::FromStr for DeviceRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeviceRequest::parse_or_reason(s).map_err(|why| format!("`{s}`: {why}"))
    }
}

/// Why a group of GPUs is refused for a solver or benchmark that runs on one device.
pub const SINGLE_DEVICE_ONLY: &str = "several GPUs run only the spectral solver (`vpm run` of a \
     case with [spectral], `vpm bench spectral`); this runs on one device: use \"cuda\" or \
     \"cuda:N\"";

/// Why a device could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    /// A GPU was asked for and none is usable (with the reason).
    #[error("device \"{request}\" asked for, but no usable CUDA GPU: {reason}")]
    Unavailable { request: String, reason: String },
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// A group of GPUs could not be formed (which GPUs, NCCL, the ranks' processes).
    #[error("device \"{request}\": {reason}")]
    Group { request: String, reason: String },
}

/// The kind of a [`Device`], without its ordinal (the planners' registries are keyed by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        })
    }
}

/// A device a solver runs on, created once per run and passed down by value (cheap to clone).
#[derive(Debug, Clone)]
pub enum Device {
    /// The host CPU (rayon threads).
    Cpu,
    /// A CUDA GPU: its context, module cache and description.
    Cuda(Arc<Gpu>),
    /// One rank of a group of GPUs ([`GpuGroup`]): this process's GPU (and its stream), its
    /// NCCL communicator and every rank's ordinal; on rank 0 also the supervisor of the other
    /// ranks' processes. Only the spectral solver runs across a group; the others get
    /// [`Device::Cuda`] of rank 0's GPU ([`Device::single`]).
    Group(Arc<GpuGroup>),
}

impl Device {
    /// Opens the device a request names. `auto` falls back to the CPU when no GPU is usable;
    /// the returned sentence says what was chosen and why.
    pub fn open(request: DeviceRequest) -> Result<(Device, String), DeviceError> {
        match request {
            DeviceRequest::Cpu => Ok((Device::Cpu, "cpu".into())),
            DeviceRequest::Cuda(ordinal) => {
                let gpu = cuda::gpu_at(ordinal.unwrap_or(0)).map_err(|e| match e {
                    CudaError::Unavailable(reason) => DeviceError::Unavailable {
                        request: request.to_string(),
                        reason,
                    },
                    e => DeviceError::Cuda(e),
                })?;
                let note = format!("cuda:{} ({})", gpu.info().ordinal, gpu.info());
                Ok((Device::Cuda(gpu), note))
            }
            DeviceRequest::CudaGroup(selection) => {
                let group = GpuGroup::launch(selection).map_err(|reason| DeviceError::Group {
                    request: request.to_string(),
                    reason,
                })?;
                let note = format!(
                    "{} ({} ranks, one process per GPU, NCCL; rank 0: {})",
                    group.label(),
                    group.ranks(),
                    group.gpu().info()
                );
                Ok((Device::Group(Arc::new(group)), note))
            }
            DeviceRequest::Auto => match cuda::gpu_at(0) {
                Ok(gpu) => {
                    let note = format!("auto: cuda:0, a GPU is usable ({})", gpu.info());
                    Ok((Device::Cuda(gpu), note))
                }
                Err(e) => Ok((Device::Cpu, format!("auto: cpu, no usable GPU ({e})"))),
            },
        }
    }

    /// [`Device::open`] for a solver or benchmark that runs on one device: a group of GPUs is
    /// refused with the reason.
    pub fn open_single(request: DeviceRequest) -> Result<(Device, String), DeviceError> {
        if request.is_group() {
            return Err(DeviceError::Group {
                request: request.to_string(),
                reason: SINGLE_DEVICE_ONLY.into(),
            });
        }
        Device::open(request)
    }

    /// `"cpu"` or `"cuda:N"`: recorded in manifests and checkpoints.
    pub fn label(&self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(g) => format!("cuda:{}", g.info().ordinal),
            Device::Group(g) => g.label(),
        }
    }

    /// A longer description: the GPU's name and capability, or the CPU model.
    pub fn describe(&self) -> String {
        match self {
            Device::Cpu => format!("cpu ({})", crate::output::cpu_model()),
            Device::Cuda(g) => format!("cuda:{} {}", g.info().ordinal, g.info()),
            Device::Group(g) => format!("{} ({} ranks) {}", g.label(), g.ranks(), g.gpu().info()),
        }
    }

    /// CPU or CUDA, without the ordinal.
    pub fn kind(&self) -> DeviceKind {
        match self {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda(_) | Device::Group(_) => DeviceKind::Cuda,
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_) | Device::Group(_))
    }

    /// The GPU, if this is one (a group's: this rank's).
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        match self {
            Device::Cpu => None,
            Device::Cuda(g) => Some(g),
            Device::Group(g) => Some(g.gpu()),
        }
    }

    /// The group, if this is one.
    pub fn group(&self) -> Option<&Arc<GpuGroup>> {
        match self {
            Device::Group(g) => Some(g),
            _ => None,
        }
    }

    /// The device a solver that runs on one device gets: itself, or a group's rank-0 GPU (a
    /// compare case keeps its particles there).
    pub fn single(&self) -> Device {
        match self {
            Device::Group(g) => Device::Cuda(g.gpu().clone()),
            d => d.clone(),
        }
    }

    /// The device's whole memory, in bytes (the host's total or cgroup limit for the CPU, the
    /// GPU's memory for a GPU): what deterministic plans are sized from.
    pub fn memory_total(&self) -> Option<u64> {
        match self {
            Device::Cpu => host_memory_total(),
            Device::Cuda(g) => Some(g.info().total_memory_bytes as u64),
            Device::Group(g) => Some(g.gpu().info().total_memory_bytes as u64),
        }
    }

    /// Memory this device can give a run now, in bytes: the host's available memory for the
    /// CPU, the driver's free memory for a GPU. `None` when it cannot be read.
    pub fn memory_available(&self) -> Option<u64> {
        match self {
            Device::Cpu => host_memory_available(),
            Device::Cuda(g) => g.free_memory().ok().map(|b| b as u64),
            // The GPU of the group with the least free memory (each rank's at its start).
            Device::Group(g) => g.least_free_memory(),
        }
    }
}

/// The host memory this process may use at most, in bytes: the smaller of `MemTotal` and the
/// cgroup's memory limit (v2 `memory.max` of the process's group or the nearest ancestor with
/// one, or v1 `memory.limit_in_bytes`). `None` where neither can be read.
pub fn host_memory_total() -> Option<u64> {
    smaller_known(
        meminfo_bytes("MemTotal:"),
        cgroup_limit_and_room().map(|(limit, _)| limit),
    )
}

/// Memory available to this process on the host, in bytes: the smaller of the kernel's
/// `MemAvailable` and the room left under the cgroup's memory limit (v2 `memory.max` −
/// `memory.current` of the process's group or the nearest ancestor with a limit, or v1
/// `memory.limit_in_bytes` − `memory.usage_in_bytes`; the inactive page cache of the group
/// counts as room). `None` where neither can be read (not Linux).
pub fn host_memory_available() -> Option<u64> {
    smaller_known(
        meminfo_bytes("MemAvailable:"),
        cgroup_limit_and_room().map(|(_, room)| room),
    )
}

/// Bytes an unprivileged process may still write on the file system holding `path` (statvfs
/// `f_bavail × f_frsize`). `None` where it cannot be read.
pub fn disk_space_available(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call and `st` points to
    // writable memory of the struct's size; statvfs only writes into it.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    // The field types are u64 here but narrower on some targets.
    #[allow(clippy::unnecessary_cast)]
    (st.f_bavail as u64).checked_mul(st.f_frsize as u64)
}

/// A `/proc/meminfo` field (`key` with its colon, e.g. "MemTotal:"), in bytes.
fn meminfo_bytes(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    })
}

/// The smaller of two figures, or the one that is known.
fn smaller_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The cgroup memory limit of this process and the room left under it, if it has one.
fn cgroup_limit_and_room() -> Option<(u64, u64)> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let num = |s: Option<String>| s.and_then(|s| s.parse::<u64>().ok());
    // The group's usage counts page cache; the inactive file pages of it can be reclaimed, so
    // they are room too (as the kernel's own accounting and container runtimes treat them).
    let reclaimable = |stat: &str, key: &str| {
        read(stat)
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    // cgroup v2: the process's own group from /proc/self/cgroup ("0::/path"), then its
    // ancestors up to the root (a limit may be set on a parent only).
    let group = read("/proc/self/cgroup")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        })
        .unwrap_or_default();
    let mut dir = std::path::PathBuf::from(format!("/sys/fs/cgroup{group}"));
    loop {
        let d = dir.display();
        if let Some(max) = num(read(&format!("{d}/memory.max"))) {
            let used = num(read(&format!("{d}/memory.current"))).unwrap_or(0);
            let free = reclaimable(&format!("{d}/memory.stat"), "inactive_file ");
            return Some((max, max.saturating_sub(used.saturating_sub(free))));
        }
        if !dir.pop() || !dir.starts_with("/sys/fs/cgroup") {
            break;
        }
    }
    // cgroup v1 (an unlimited group reports a huge number, which the min() above ignores).
    let v1 = "/sys/fs/cgroup/memory";
    let max = num(read(&format!("{v1}/memory.limit_in_bytes")))?;
    let used = num(read(&format!("{v1}/memory.usage_in_bytes"))).unwrap_or(0);
    let free = reclaimable(&format!("{v1}/memory.stat"), "total_inactive_file ");
    Some((max, max.saturating_sub(used.saturating_sub(free))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_print() {
        for (s, r) in [
            ("auto", DeviceRequest::Auto),
            ("cpu", DeviceRequest::Cpu),
            ("cuda", DeviceRequest::Cuda(None)),
            ("cuda:0", DeviceRequest::Cuda(Some(0))),
            ("cuda:3", DeviceRequest::Cuda(Some(3))),
        ] {
            assert_eq!(DeviceRequest::parse(s), Some(r));
            assert_eq!(r.to_string(), s);
        }
        for bad in ["", "gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "cuda:1:2"] {
            assert_eq!(DeviceRequest::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn groups_parse_print_and_refuse_a_gpu_named_twice() {
        let all = DeviceRequest::parse("cuda:all").unwrap();
        assert_eq!(all, DeviceRequest::CudaGroup(GpuSelection::All));
        assert_eq!(all.to_string(), "cuda:all");
        let four = DeviceRequest::parse("cuda:0,1,2,3").unwrap();
        assert_eq!(four, DeviceRequest::CudaGroup(GpuSelection::Mask(0b1111)));
        assert_eq!(four.to_string(), "cuda:0,1,2,3");
        // The order given does not matter: ranks follow the ordinals.
        assert_eq!(
            DeviceRequest::parse("cuda:3,1").unwrap().to_string(),
            "cuda:1,3"
        );
        assert!(four.is_cuda() && four.is_group());
        for bad in [
            "cuda:0,",
            "cuda:,1",
            "cuda:0,,1",
            "cuda:all,1",
            "cuda:0;1",
            "cuda:a,b",
        ] {
            let e = DeviceRequest::parse_or_reason(bad).unwrap_err();
            assert!(e.contains(DeviceRequest::ALLOWED), "{bad}: {e}");
        }
        let e = DeviceRequest::parse_or_reason("cuda:0,1,1").unwrap_err();
        assert!(e.contains("GPU 1 is named twice"), "{e}");
        let e = DeviceRequest::parse_or_reason("cuda:0,64").unwrap_err();
        assert!(e.contains("GPU 64 is beyond"), "{e}");
        let e: String = "cuda:2,2".parse::<DeviceRequest>().unwrap_err();
        assert!(e.starts_with("`cuda:2,2`: GPU 2 is named twice"), "{e}");
    }

    #[test]
    fn host_memory_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            let m = host_memory_available().expect("/proc/meminfo");
            assert!(m > 1 << 20, "{m}");
        }
    }

    /// Every engine queues on the GPU's one stream and waits only through the `Gpu` (so the
    /// waits are counted, cuda.rs module docs): no source or test file but cuda.rs makes a
    /// stream or waits on a stream or event itself.
    #[test]
    fn only_the_gpu_makes_streams_and_waits() {
        fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    files(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut all = Vec::new();
        files(&root.join("src"), &mut all);
        files(&root.join("tests"), &mut all);
        let mut found = Vec::new();
        // cuda.rs is where they live, this file where they are looked for.
        let exempt =
            |f: &Path| f.ends_with("src/device/cuda.rs") || f.ends_with("src/device/mod.rs");
        for f in all.iter().filter(|f| !exempt(f)) {
            let text = std::fs::read_to_string(f).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                // An event's own elapsed_ms(&stop) waits uncounted; Gpu::elapsed_ms takes 3.
                let event_wait = code.split(".elapsed_ms(").nth(1).is_some_and(|rest| {
                    let args = rest.split(')').next().unwrap_or("");
                    !args.contains(',') && !args.trim().is_empty()
                });
                let bad = [
                    "new_stream(",
                    "default_stream(",
                    ".synchronize()",
                    "memcpy_dtoh(",
                ]
                .iter()
                .any(|p| code.contains(p));
                if bad || event_wait {
                    let f = f.strip_prefix(root).unwrap_or(f).display();
                    found.push(format!("{f}:{}: {}", i + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "queue on Gpu::stream() and wait only through Gpu::synchronize, \
             Gpu::copy_to_host (DeviceBuffer::download) or Gpu::elapsed_ms:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn cpu_device_opens() {
        let (d, note) = Device::open(DeviceRequest::Cpu).unwrap();
        assert_eq!(d.label(), "cpu");
        assert_eq!(note, "cpu");
        assert!(d.memory_available().is_some() || !cfg!(target_os = "linux"));
    }
}
