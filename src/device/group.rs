//! A group of GPUs of this host, one **rank** (process) per GPU, joined by NCCL: the value a
//! solver that runs across GPUs gets ([`crate::device::Device::Group`]), and on rank 0 the
//! **supervisor** of the other ranks' processes.
//!
//! `vpm run` with `device = "cuda:all"` (or `"cuda:0,1,…"`) is rank 0. [`GpuGroup::launch`]
//! resolves the GPUs, probes NCCL, makes the NCCL id and starts ranks 1..P as child processes of
//! the same executable (`vpm rank`, a hidden subcommand), each with `NCCL_NVLS_ENABLE=0` unless
//! the variable is set (NVLink multicast can put a shared host's GPUs out of service). The
//! child's stdin carries one JSON line [`JoinMessage`] (rank, ordinals, NCCL id), then the
//! commands of the solver (JSON lines, [`crate::spectral::distributed::Command`]); its stdout
//! carries one JSON line [`RankReply`] per message; its stderr is the run's log. Every rank then
//! joins the communicator ([`NcclComm::init`]) on its GPU.
//!
//! Failure: a watchdog thread on rank 0 polls the children every 100 ms; when one exits out of
//! turn it raises the group's [`AbortSignal`] ("rank r (cuda:N, pid …) exited with …"), and once
//! the signal is raised (by it or by rank 0's own failure) it kills every remaining child. Rank
//! 0's communicator sees the signal in [`NcclComm::wait`] and aborts, so its call returns an
//! error. A child watches its stdin: end of file means rank 0 is gone, and it raises its own
//! signal and exits non-zero. So no rank waits for a dead one.

use super::cuda::{gpu_at, Gpu};
use super::nccl::{nccl_available, AbortSignal, NcclComm, NcclId};
use crate::output::RankRecord;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The NCCL variable the launcher sets to 0 for every rank unless it is set.
pub const NVLS_VARIABLE: &str = "NCCL_NVLS_ENABLE";
/// The hidden subcommand a rank process runs.
pub const RANK_SUBCOMMAND: &str = "rank";
/// How often the watchdog polls the children.
const WATCH_PERIOD: Duration = Duration::from_millis(100);
/// How long an orderly shutdown waits for a child before killing it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Which GPUs a group takes: every GPU of the host, or a set of ordinals (bit i = GPU i).
/// Ranks follow the ordinals in ascending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuSelection {
    All,
    Mask(u64),
}

impl GpuSelection {
    /// The largest number of GPUs a list can name (ordinals 0..64).
    pub const MAX_GPUS: usize = 64;

    /// The ordinals of the group on a host with `present` GPUs, ascending; `Err` names a GPU
    /// that is not there, or a group of fewer than two.
    pub fn ordinals(&self, present: usize) -> Result<Vec<usize>, String> {
        let ordinals: Vec<usize> = match *self {
            GpuSelection::All => (0..present).collect(),
            GpuSelection::Mask(mask) => {
                let named: Vec<usize> =
                    (0..Self::MAX_GPUS).filter(|i| mask >> i & 1 == 1).collect();
                if let Some(&missing) = named.iter().find(|&&i| i >= present) {
                    return Err(format!(
                        "GPU {missing} is named, but this host has {present} GPU{} (ordinals 0 \
                         to {}): name only GPUs that are present, or use \"cuda:all\"",
                        if present == 1 { "" } else { "s" },
                        present.saturating_sub(1)
                    ));
                }
                named
            }
        };
        if ordinals.len() < 2 {
            return Err(format!(
                "a group of GPUs needs at least 2, and this finds {} (the host has {present}): \
                 use \"cuda\" or \"cuda:N\" for one GPU",
                ordinals.len()
            ));
        }
        Ok(ordinals)
    }
}

impl std::fmt::Display for GpuSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuSelection::All => f.write_str("all"),
            GpuSelection::Mask(mask) => {
                let list: Vec<String> = (0..Self::MAX_GPUS)
                    .filter(|i| mask >> i & 1 == 1)
                    .map(|i| i.to_string())
                    .collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

/// The first message on a rank's stdin: who it is and how to join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinMessage {
    pub rank: usize,
    /// Every rank's GPU ordinal, in rank order.
    pub ordinals: Vec<usize>,
    /// The NCCL id ([`NcclId::to_hex`]).
    pub nccl_id: String,
}

/// One line on a rank's stdout, answering one message of its stdin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankReply {
    pub rank: usize,
    /// Why the command failed on this rank (the rank exits after a failure that is not
    /// `non_finite`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The failure was the solver's non-finite state (every rank reports it; the rank serves on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub non_finite: bool,
    /// Device memory in use on the rank's GPU (total − free from the driver) after the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_device_bytes: Option<u64>,
    /// Free device memory after joining (the answer to the [`JoinMessage`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_device_bytes: Option<u64>,
    /// The GPU's description (the answer to the [`JoinMessage`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

impl RankReply {
    /// A reply of `rank` on `gpu` with its memory in use now.
    pub fn on(rank: usize, gpu: &Gpu) -> RankReply {
        RankReply {
            rank,
            used_device_bytes: used_bytes(gpu),
            ..RankReply::default()
        }
    }
}

/// Device memory in use on `gpu` (total − free), when the driver tells.
pub fn used_bytes(gpu: &Gpu) -> Option<u64> {
    let free = gpu.free_memory().ok()? as u64;
    Some((gpu.info().total_memory_bytes as u64).saturating_sub(free))
}

/// The child processes of ranks 1..P, their pipes and the watchdog (rank 0 only).
pub struct Supervisor {
    /// Rank r's child at index r − 1, with its label ("cuda:N") for messages.
    children: Arc<Mutex<Vec<RankChild>>>,
    stdins: Mutex<Vec<Option<ChildStdin>>>,
    /// One receiver of stdout lines per child (`None`: its stdout closed).
    replies: Vec<Mutex<Receiver<Option<String>>>>,
    abort: AbortSignal,
    /// Set for an orderly shutdown: children exiting then are no failure.
    stopping: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

struct RankChild {
    rank: usize,
    label: String,
    child: Child,
    /// Whether it has been reaped (exited and seen).
    done: bool,
}

impl Supervisor {
    /// Starts one child per command (rank r = index + 1, labelled `labels[r − 1]` in messages)
    /// with stdin and stdout piped and stderr inherited, and the watchdog. A child that cannot
    /// be started kills those started before it.
    pub fn spawn(
        commands: Vec<Command>,
        labels: Vec<String>,
        abort: AbortSignal,
    ) -> Result<Supervisor, String> {
        let mut children = Vec::new();
        let mut stdins = Vec::new();
        let mut replies = Vec::new();
        for (i, mut command) in commands.into_iter().enumerate() {
            let rank = i + 1;
            let label = labels.get(i).cloned().unwrap_or_default();
            let spawned = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn();
            let mut child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    for c in &mut children {
                        kill(c);
                    }
                    return Err(format!("could not start rank {rank} ({label}): {e}"));
                }
            };
            stdins.push(child.stdin.take());
            let (tx, rx) = channel();
            if let Some(out) = child.stdout.take() {
                let (signal, who) = (abort.clone(), format!("rank {rank} ({label})"));
                std::thread::spawn(move || {
                    for line in BufReader::new(out).lines() {
                        let Ok(l) = line else { break };
                        // Replies are JSON objects; anything else on the rank's stdout (NCCL's
                        // log with NCCL_DEBUG set, say) is passed on to stderr.
                        if !l.starts_with('{') {
                            eprintln!("{l}");
                            continue;
                        }
                        // A rank's own failure is named now, before its exit status can be.
                        if let Ok(RankReply {
                            error: Some(e),
                            non_finite: false,
                            ..
                        }) = serde_json::from_str(&l)
                        {
                            signal.raise(format!("{who} failed: {e}"));
                        }
                        if tx.send(Some(l)).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(None);
                });
            }
            replies.push(Mutex::new(rx));
            children.push(RankChild {
                rank,
                label,
                child,
                done: false,
            });
        }
        let children = Arc::new(Mutex::new(children));
        let stopping = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (children, stopping, abort) = (children.clone(), stopping.clone(), abort.clone());
            std::thread::spawn(move || watch(&children, &stopping, &abort))
        };
        Ok(Supervisor {
            children,
            stdins: Mutex::new(stdins),
            replies,
            abort,
            stopping,
            watchdog: Some(watchdog),
        })
    }

    /// Number of children (ranks 1..P).
    pub fn len(&self) -> usize {
        self.replies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    /// The children's process ids, in rank order (rank 1 first).
    pub fn pids(&self) -> Vec<u32> {
        lock(&self.children).iter().map(|c| c.child.id()).collect()
    }

    /// Writes `line` (one JSON message, no newline) to every child's stdin. A child that cannot
    /// take it has failed: the signal is raised and the reason returned.
    pub fn send(&self, line: &str) -> Result<(), String> {
        let mut stdins = lock(&self.stdins);
        for (i, stdin) in stdins.iter_mut().enumerate() {
            let written = match stdin {
                Some(s) => writeln!(s, "{line}").and_then(|()| s.flush()),
                None => Err(std::io::Error::other("its stdin is closed")),
            };
            if let Err(e) = written {
                return Err(self.failed(format!("rank {} could not be sent a command: {e}", i + 1)));
            }
        }
        Ok(())
    }

    /// One reply line from every child, in rank order, waiting as long as it takes unless the
    /// signal is raised (then its reason is returned) or a child's stdout closes.
    pub fn receive(&self) -> Result<Vec<String>, String> {
        let mut lines = Vec::with_capacity(self.len());
        for (i, rx) in self.replies.iter().enumerate() {
            let rx = lock(rx);
            loop {
                if let Some(reason) = self.abort.reason() {
                    return Err(reason);
                }
                match rx.recv_timeout(Duration::from_millis(10)) {
                    Ok(Some(line)) => {
                        // The reader raises a rank's own error before sending its line, so
                        // the signal is seen here for certain once that line has arrived.
                        if let Some(reason) = self.abort.reason() {
                            return Err(reason);
                        }
                        lines.push(line);
                        break;
                    }
                    Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                        return Err(self.failed(format!("rank {} closed its output", i + 1)));
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                }
            }
        }
        Ok(lines)
    }

    /// A pipe to a child broke (`why`): the child has most likely exited, and the watchdog
    /// names how once it sees it, so it is given a few polls to; then the signal is raised
    /// (with `why` if nothing was known) and its reason returned.
    fn failed(&self, why: String) -> String {
        let waited = Instant::now();
        while self.abort.reason().is_none() && waited.elapsed() < 3 * WATCH_PERIOD {
            std::thread::sleep(WATCH_PERIOD / 4);
        }
        self.abort.raise(why.clone());
        self.abort.reason().unwrap_or(why)
    }

    /// From now on a child's exit is expected: the watchdog no longer calls it a failure.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Orderly end: closes every stdin (a child that has not exited after a shutdown command
    /// sees end of file), waits up to 5 s for each child and kills the rest.
    pub fn shutdown(&mut self) {
        self.begin_shutdown();
        lock(&self.stdins).iter_mut().for_each(|s| drop(s.take()));
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        for c in lock(&self.children).iter_mut() {
            while !c.done && Instant::now() < deadline {
                match c.child.try_wait() {
                    Ok(Some(_)) | Err(_) => c.done = true,
                    Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            kill(c);
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.abort.reason().is_some() {
            self.stopping.store(true, Ordering::SeqCst);
            lock(&self.children).iter_mut().for_each(kill);
        }
        self.shutdown();
    }
}

/// The watchdog's loop (module docs).
fn watch(children: &Mutex<Vec<RankChild>>, stopping: &AtomicBool, abort: &AbortSignal) {
    while !stopping.load(Ordering::SeqCst) {
        {
            let mut children = lock(children);
            for c in children.iter_mut().filter(|c| !c.done) {
                match c.child.try_wait() {
                    Ok(Some(status)) => {
                        c.done = true;
                        if !stopping.load(Ordering::SeqCst) {
                            abort.raise(format!(
                                "rank {} ({}, pid {}) exited with {status}",
                                c.rank,
                                c.label,
                                c.child.id()
                            ));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        c.done = true;
                        abort.raise(format!(
                            "rank {} ({}) could not be watched: {e}",
                            c.rank, c.label
                        ));
                    }
                }
            }
            if abort.reason().is_some() {
                children.iter_mut().for_each(kill);
                return;
            }
        }
        std::thread::sleep(WATCH_PERIOD);
    }
}

/// Kills and reaps a child that has not been reaped.
fn kill(c: &mut RankChild) {
    if !c.done {
        let _ = c.child.kill();
        let _ = c.child.wait();
        c.done = true;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One rank of a group of GPUs (module docs): this process's rank, GPU and communicator, every
/// rank's ordinal, and on rank 0 the supervisor of the others and their memory records.
pub struct GpuGroup {
    rank: usize,
    ordinals: Vec<usize>,
    gpu: Arc<Gpu>,
    comm: Arc<NcclComm>,
    abort: AbortSignal,
    supervisor: Option<Supervisor>,
    /// Every rank's GPU, free memory at the start and peak memory in use (rank 0).
    records: Mutex<Vec<RankRecord>>,
    /// Free device memory of each rank when it joined (rank 0).
    free_at_start: Vec<Option<u64>>,
}

impl std::fmt::Debug for GpuGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuGroup {{ rank {} of {:?} }}",
            self.rank, self.ordinals
        )
    }
}

/// The number of CUDA GPUs of this host; `Err` (never a panic) with the reason when there is no
/// usable one.
pub fn gpu_count() -> Result<usize, String> {
    // gpu_at probes the driver library first (cudarc panics without it).
    gpu_at(0).map_err(|e| format!("no usable CUDA GPU: {e}"))?;
    cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .map_err(|e| format!("the CUDA driver could not count the GPUs: {e:?}"))
}

/// `NCCL_NVLS_ENABLE=0` unless the variable is set (module docs).
pub fn nvls_setting() -> Option<(&'static str, &'static str)> {
    std::env::var_os(NVLS_VARIABLE)
        .is_none()
        .then_some((NVLS_VARIABLE, "0"))
}

impl GpuGroup {
    /// Rank 0 of a new group (module docs): resolves the GPUs, probes NCCL, starts ranks
    /// 1..P, joins the communicator with them and reads each one's memory. `Err` says why, in
    /// words: no GPU, a GPU that is not there, NCCL missing, a rank that failed to start or join.
    pub fn launch(selection: GpuSelection) -> Result<GpuGroup, String> {
        let ordinals = selection.ordinals(gpu_count()?)?;
        nccl_available().map_err(|e| format!("NCCL is needed for several GPUs: {e}"))?;
        if let Some((k, v)) = nvls_setting() {
            // Before any NCCL call of this process (this rank's communicator).
            std::env::set_var(k, v);
        }
        let gpu = gpu_at(ordinals[0]).map_err(|e| e.to_string())?;
        let id = NcclId::new().map_err(|e| format!("could not make the NCCL id: {e}"))?;
        let exe = std::env::current_exe()
            .map_err(|e| format!("could not find this executable to start the ranks: {e}"))?;
        let ranks = ordinals.len();
        let commands = (1..ranks)
            .map(|_| {
                let mut c = Command::new(&exe);
                c.arg(RANK_SUBCOMMAND);
                // Its own process group: a terminal's Ctrl-C reaches rank 0 only, which stops
                // at a step boundary with a checkpoint and then shuts the ranks down.
                std::os::unix::process::CommandExt::process_group(&mut c, 0);
                if let Some((k, v)) = nvls_setting() {
                    c.env(k, v);
                }
                c
            })
            .collect();
        let labels = ordinals[1..].iter().map(|o| format!("cuda:{o}")).collect();
        let abort = AbortSignal::new();
        let supervisor = Supervisor::spawn(commands, labels, abort.clone())?;
        for rank in 1..ranks {
            let hello = JoinMessage {
                rank,
                ordinals: ordinals.clone(),
                nccl_id: id.to_hex(),
            };
            let line = serde_json::to_string(&hello).expect("a join message serialises");
            let mut stdins = lock(&supervisor.stdins);
            let written = stdins[rank - 1]
                .as_mut()
                .map(|s| writeln!(s, "{line}").and_then(|()| s.flush()));
            if !matches!(written, Some(Ok(()))) {
                abort.raise(format!("rank {rank} could not be sent its join message"));
            }
        }
        let comm = init_abortable(&gpu, &id, 0, ranks, &abort)?;
        let replies = supervisor.receive()?;
        let mut records = vec![RankRecord {
            rank: 0,
            device: format!("cuda:{}", ordinals[0]),
            gpu: gpu.info().to_string(),
            pid: std::process::id(),
            peak_device_memory_bytes: used_bytes(&gpu),
        }];
        let mut free_at_start = vec![gpu.free_memory().ok().map(|b| b as u64)];
        let pids = supervisor.pids();
        for (i, line) in replies.iter().enumerate() {
            let reply: RankReply = serde_json::from_str(line)
                .map_err(|e| format!("rank {} answered its join with `{line}`: {e}", i + 1))?;
            if let Some(e) = reply.error {
                return Err(format!("rank {} (cuda:{}): {e}", i + 1, ordinals[i + 1]));
            }
            free_at_start.push(reply.free_device_bytes);
            records.push(RankRecord {
                rank: i + 1,
                device: format!("cuda:{}", ordinals[i + 1]),
                gpu: reply.gpu.unwrap_or_default(),
                pid: pids[i],
                peak_device_memory_bytes: reply.used_device_bytes,
            });
        }
        for r in &records {
            tracing::info!("rank {} on {} (pid {}): {}", r.rank, r.device, r.pid, r.gpu);
        }
        Ok(GpuGroup {
            rank: 0,
            ordinals,
            gpu,
            comm: Arc::new(comm),
            abort,
            supervisor: Some(supervisor),
            records: Mutex::new(records),
            free_at_start,
        })
    }

    /// Rank `hello.rank` of a group (a `vpm rank` process): opens its GPU and joins the
    /// communicator; `abort` is raised by the stdin reader when rank 0 goes.
    pub fn join(hello: &JoinMessage, abort: AbortSignal) -> Result<GpuGroup, String> {
        let ordinal = *hello
            .ordinals
            .get(hello.rank)
            .ok_or_else(|| format!("rank {} is not in {:?}", hello.rank, hello.ordinals))?;
        let gpu = gpu_at(ordinal).map_err(|e| e.to_string())?;
        let id = NcclId::from_hex(&hello.nccl_id).ok_or("the NCCL id is not 256 hex digits")?;
        let comm = init_abortable(&gpu, &id, hello.rank, hello.ordinals.len(), &abort)?;
        Ok(GpuGroup {
            rank: hello.rank,
            ordinals: hello.ordinals.clone(),
            gpu,
            comm: Arc::new(comm),
            abort,
            supervisor: None,
            records: Mutex::new(Vec::new()),
            free_at_start: Vec::new(),
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of ranks P.
    pub fn ranks(&self) -> usize {
        self.ordinals.len()
    }
    /// Every rank's GPU ordinal, in rank order.
    pub fn ordinals(&self) -> &[usize] {
        &self.ordinals
    }
    /// This rank's GPU (its stream is the one every engine of the rank queues on).
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
    /// This rank's communicator.
    pub fn comm(&self) -> &Arc<NcclComm> {
        &self.comm
    }
    /// The group's abort signal.
    pub fn abort_signal(&self) -> &AbortSignal {
        &self.abort
    }
    /// Why the group failed, once it has.
    pub fn failure(&self) -> Option<String> {
        self.abort.reason()
    }
    /// `"cuda:0,1,2,3"`: the GPUs of the group (manifests, checkpoints).
    pub fn label(&self) -> String {
        let list: Vec<String> = self.ordinals.iter().map(usize::to_string).collect();
        format!("cuda:{}", list.join(","))
    }

    /// The least free device memory of the group's GPUs when they joined (rank 0), else this
    /// GPU's now.
    pub fn least_free_memory(&self) -> Option<u64> {
        match self
            .free_at_start
            .iter()
            .copied()
            .collect::<Option<Vec<u64>>>()
        {
            Some(v) if !v.is_empty() => v.into_iter().min(),
            _ => self.gpu.free_memory().ok().map(|b| b as u64),
        }
    }

    /// Forgets the peaks of device memory seen so far, so that the next commands' samples
    /// measure what comes next alone (the benchmark, between sizes).
    pub fn reset_peaks(&self) {
        for r in lock(&self.records).iter_mut() {
            r.peak_device_memory_bytes = None;
        }
    }

    /// Every rank's GPU, process and peak device memory seen so far (rank 0; empty elsewhere).
    pub fn rank_records(&self) -> Vec<RankRecord> {
        lock(&self.records).clone()
    }

    /// Sends one command line to ranks 1..P (rank 0).
    pub fn send(&self, line: &str) -> Result<(), String> {
        match &self.supervisor {
            Some(s) => s.send(line),
            None => Ok(()),
        }
    }

    /// The replies of ranks 1..P to the last command (rank 0), after which rank 0's memory is
    /// sampled too: `Err` with the reason when a rank failed. A non-finite state on every rank
    /// is `Ok(true)`.
    pub fn receive(&self) -> Result<bool, String> {
        let Some(s) = &self.supervisor else {
            return Ok(false);
        };
        let lines = s.receive()?;
        let mut records = lock(&self.records);
        let mut non_finite = false;
        for (i, line) in lines.iter().enumerate() {
            let rank = i + 1;
            let label = format!("cuda:{}", self.ordinals[rank]);
            let reply: RankReply = serde_json::from_str(line).map_err(|e| {
                let why = format!("rank {rank} ({label}) answered `{line}`: {e}");
                self.abort.raise(why.clone());
                why
            })?;
            if reply.non_finite {
                non_finite = true;
            } else if let Some(e) = reply.error {
                let why = format!("rank {rank} ({label}) failed: {e}");
                self.abort.raise(why.clone());
                return Err(self.abort.reason().unwrap_or(why));
            }
            if let (Some(r), Some(used)) = (records.get_mut(rank), reply.used_device_bytes) {
                r.peak_device_memory_bytes =
                    Some(r.peak_device_memory_bytes.unwrap_or(0).max(used));
            }
        }
        if let (Some(r), Some(used)) = (records.get_mut(0), used_bytes(&self.gpu)) {
            r.peak_device_memory_bytes = Some(r.peak_device_memory_bytes.unwrap_or(0).max(used));
        }
        Ok(non_finite)
    }

    /// Raises the group's signal (rank 0 failed on its own): the watchdog kills the other
    /// ranks, this rank's communicator aborts.
    pub fn fail(&self, reason: impl Into<String>) {
        self.abort.raise(reason);
        self.comm.abort();
    }
}

/// [`NcclComm::init`] on a thread of its own, given up when `abort` is raised first (a rank
/// that died before joining would otherwise leave the others waiting in NCCL for ever).
fn init_abortable(
    gpu: &Arc<Gpu>,
    id: &NcclId,
    rank: usize,
    ranks: usize,
    abort: &AbortSignal,
) -> Result<NcclComm, String> {
    let (tx, rx) = channel();
    let (gpu, id, signal) = (gpu.clone(), id.clone(), abort.clone());
    std::thread::spawn(move || {
        let _ = tx.send(NcclComm::init(&gpu, &id, rank, ranks, signal));
    });
    loop {
        if let Some(reason) = abort.reason() {
            return Err(format!("rank {rank} could not join the group: {reason}"));
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(r) => {
                return r.map_err(|e| format!("rank {rank} could not join the NCCL group: {e}"))
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!("rank {rank}: NCCL's initialisation panicked"))
            }
        }
    }
}

impl Drop for GpuGroup {
    fn drop(&mut self) {
        if let Some(s) = &mut self.supervisor {
            if self.abort.reason().is_none() {
                // The ranks leave their loop on the shutdown command (their exits expected
                // before it is sent).
                s.begin_shutdown();
                let _ = s.send(r#"{"command":"shutdown"}"#);
            }
            s.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    /// Children running the shell `scripts`, labelled `cuda:1`, `cuda:2`, …
    fn spawn_sh(scripts: &[&str], abort: &AbortSignal) -> Supervisor {
        let labels = (1..=scripts.len()).map(|r| format!("cuda:{r}")).collect();
        Supervisor::spawn(
            scripts.iter().map(|s| sh(s)).collect(),
            labels,
            abort.clone(),
        )
        .unwrap()
    }

    #[test]
    fn selections_resolve_against_the_gpus_present() {
        assert_eq!(GpuSelection::All.ordinals(4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(GpuSelection::Mask(0b1010).ordinals(4).unwrap(), vec![1, 3]);
        let e = GpuSelection::Mask(0b10001).ordinals(4).unwrap_err();
        assert!(
            e.contains("GPU 4 is named, but this host has 4 GPUs"),
            "{e}"
        );
        let e = GpuSelection::All.ordinals(1).unwrap_err();
        assert!(e.contains("needs at least 2"), "{e}");
        assert_eq!(GpuSelection::Mask(0b1101).to_string(), "0,2,3");
    }

    /// A child that exits at once: the watchdog raises the signal naming its rank and GPU
    /// within a few polls and kills the other child, and a wait for replies returns the reason.
    #[test]
    fn a_rank_that_exits_raises_the_signal_and_the_others_are_killed() {
        let abort = AbortSignal::new();
        let started = Instant::now();
        let s = spawn_sh(&["sleep 30", "exit 3"], &abort);
        let err = s.receive().unwrap_err();
        assert!(err.starts_with("rank 2 (cuda:2, pid "), "{err}");
        assert!(err.contains("exited with exit status: 3"), "{err}");
        // The sleeping rank 1 is killed by the watchdog.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if lock(&s.children)[0].done {
                break;
            }
            assert!(Instant::now() < deadline, "rank 1 was not killed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        drop(s);
    }

    /// Commands go to every child's stdin and one reply line per child comes back in rank
    /// order; an orderly shutdown raises nothing.
    #[test]
    fn commands_and_replies_travel_as_lines() {
        let abort = AbortSignal::new();
        // Each child also writes a line that is not JSON (as NCCL's log does with NCCL_DEBUG
        // set): it goes to stderr, not into the replies.
        let echo: Vec<String> = (1..=3)
            .map(|r| {
                format!(
                    r#"read line; echo 'host:1 NCCL INFO chatter'; echo "{{\"rank\":{r},\"got\":$line}}"; read rest"#
                )
            })
            .collect();
        let mut s = spawn_sh(&echo.iter().map(String::as_str).collect::<Vec<_>>(), &abort);
        s.send(r#"{"command":"sums"}"#).unwrap();
        let lines = s.receive().unwrap();
        let want: Vec<String> = (1..=3)
            .map(|r| format!(r#"{{"rank":{r},"got":{{"command":"sums"}}}}"#))
            .collect();
        assert_eq!(lines, want);
        s.shutdown();
        assert_eq!(abort.reason(), None);
    }

    /// A rank that answers with an error and then exits: the signal names its own reason, not
    /// its exit status.
    #[test]
    fn a_ranks_error_reply_names_the_failure() {
        let abort = AbortSignal::new();
        let s = spawn_sh(
            &[
                "read line; echo '{\"rank\":1}'; read rest",
                r#"read line; echo '{"rank":2,"error":"cuFFT: out of memory"}'; sleep 1; exit 1"#,
            ],
            &abort,
        );
        s.send(r#"{"command":"sums"}"#).unwrap();
        let err = s.receive().unwrap_err();
        assert_eq!(err, "rank 2 (cuda:2) failed: cuFFT: out of memory");
        drop(s);
    }

    /// A raised signal (rank 0 failed) makes the watchdog kill every child.
    #[test]
    fn a_raised_signal_kills_every_child() {
        let abort = AbortSignal::new();
        let s = spawn_sh(&["sleep 30", "sleep 30"], &abort);
        abort.raise("rank 0 (cuda:0) failed");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lock(&s.children).iter().all(|c| c.done) {
            assert!(Instant::now() < deadline, "children still alive");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(s.receive().unwrap_err(), "rank 0 (cuda:0) failed");
    }

    #[test]
    fn messages_round_trip() {
        let hello = JoinMessage {
            rank: 2,
            ordinals: vec![0, 1, 3],
            nccl_id: "ab".repeat(128),
        };
        let line = serde_json::to_string(&hello).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<JoinMessage>(&line).unwrap(), hello);
        let reply = RankReply {
            rank: 1,
            error: Some("boom".into()),
            used_device_bytes: Some(7),
            ..RankReply::default()
        };
        let line = serde_json::to_string(&reply).unwrap();
        assert_eq!(serde_json::from_str::<RankReply>(&line).unwrap(), reply);
        assert_eq!(
            serde_json::from_str::<RankReply>(r#"{"rank":3}"#).unwrap(),
            RankReply {
                rank: 3,
                ..RankReply::default()
            }
        );
    }
}
