//! NCCL, the engine between several GPUs (one rank per GPU): the library probed before use,
//! the unique id that joins the ranks, and one rank's communicator with the collectives the
//! distributed solvers use, each queued on the rank's GPU stream. Waits on those queues go
//! through [`NcclComm::wait`], which gives up (and aborts the communicator) when the run's
//! [`AbortSignal`] is raised, so a failed rank never leaves the others hanging.
//!
//! NCCL is loaded at run time (cudarc's `dynamic-loading`) like the other CUDA libraries:
//! [`nccl_available`] looks for `libnccl.so` before any NCCL call (cudarc panics without it).
//! The communicators are blocking ones (`ncclCommInitRank`): a call returns once its work is
//! queued on the stream, and every wait for that work polls an event, the abort signal and
//! `ncclCommGetAsyncError` (every 0.1 ms for the first 10 ms, then every millisecond). NVLink multicast (NVLS) is never asked for; the
//! launchers set `NCCL_NVLS_ENABLE=0` when it is unset ([`disable_nvls_unless_set`]).
//!
//! An exchange may also run beside the main stream, on the GPU's exchange stream
//! ([`NcclComm::exchange_beside`], then [`NcclComm::join`]): events order it after the work
//! that filled its send areas and before the work that reads its receive areas, so the
//! transfers of one field overlap the transforms of the next.
//!
//! Buffers are raw device addresses ([`crate::device::buffer::DeviceBuffer::addr`]) of the
//! rank's GPU; the collectives are `unsafe` for that reason (the caller states the sizes).

use super::cuda::{CudaError, Doing, Gpu};
use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::result as nccl_result;
use cudarc::nccl::sys as nccl_sys;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to install when NCCL is missing.
const INSTALL_HINT: &str = "NCCL (libnccl.so) was not found: install it (Debian/Ubuntu: \
    libnccl2 and libnccl-dev, which provides the libnccl.so link; or NVIDIA's nvidia-nccl \
    package) and put the directory holding libnccl.so on LD_LIBRARY_PATH (a link named \
    libnccl.so to libnccl.so.2 will do)";

/// Sets `NCCL_NVLS_ENABLE=0` in this process's environment unless it is set already (NVLink
/// multicast can put a shared host's GPUs out of service). Call before the first
/// communicator is made, while no other thread reads the environment.
pub fn disable_nvls_unless_set() {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // Called at start-up (tests: before any rank thread exists), so no other thread reads
        // or writes the environment meanwhile.
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
}

/// Whether NCCL can be loaded (cudarc looks for `libnccl.so` and panics without it): `Err`
/// names what to install or set.
pub fn nccl_available() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the library under cudarc's names; no NCCL call.
    let present = std::panic::catch_unwind(|| unsafe { nccl_sys::is_culib_present() });
    if !matches!(present, Ok(true)) {
        return Err(CudaError::Unavailable(INSTALL_HINT.into()));
    }
    match std::panic::catch_unwind(nccl_result::get_nccl_version) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(CudaError::Unavailable(format!(
            "NCCL was found but ncclGetVersion failed ({})",
            describe(&e)
        ))),
        Err(_) => Err(CudaError::Unavailable(format!(
            "NCCL was found but could not be used (a symbol is missing: NCCL 2.18 or later is \
             needed). {INSTALL_HINT}"
        ))),
    }
}

/// NCCL's version as "major.minor.patch" (after [`nccl_available`]).
pub fn nccl_version() -> Result<String, CudaError> {
    nccl_available()?;
    let v =
        nccl_result::get_nccl_version().map_err(|e| nccl_error("reading NCCL's version", &e))?;
    Ok(format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100))
}

/// An NCCL error code in words.
fn describe(e: &nccl_result::NcclError) -> String {
    use nccl_sys::ncclResult_t as R;
    let what = match e.0 {
        R::ncclUnhandledCudaError => "a CUDA call failed",
        R::ncclSystemError => "a system call failed",
        R::ncclInternalError => "internal error",
        R::ncclInvalidArgument => "invalid argument",
        R::ncclInvalidUsage => "invalid usage",
        R::ncclRemoteError => "a remote rank failed or the network broke",
        R::ncclTimeout => "timed out",
        _ => "error",
    };
    format!("{:?}: {what}", e.0 as u32)
}

/// The result of queuing `what`.
fn queued(
    what: &str,
    r: Result<nccl_result::NcclStatus, nccl_result::NcclError>,
) -> Result<(), CudaError> {
    r.map(drop)
        .map_err(|e| nccl_error(&format!("queuing {what}"), &e))
}

fn nccl_error(what: &str, e: &nccl_result::NcclError) -> CudaError {
    CudaError::Driver {
        what: what.into(),
        message: format!("NCCL {}", describe(e)),
    }
}

/// The 128-byte id that joins the ranks of one communicator (made by rank 0, passed to the
/// others as hex).
#[derive(Clone, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclId({}…)", &self.to_hex()[..16])
    }
}

impl NcclId {
    /// A fresh id (rank 0).
    pub fn new() -> Result<NcclId, CudaError> {
        nccl_available()?;
        let id = nccl_result::get_uniqueid().map_err(|e| nccl_error("making an NCCL id", &e))?;
        Ok(NcclId(id.internal.map(|c| c as u8)))
    }
    /// 256 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    /// From [`NcclId::to_hex`]'s form.
    pub fn from_hex(s: &str) -> Option<NcclId> {
        let s = s.trim();
        if s.len() != 256 || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; 128];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(NcclId(out))
    }
}

/// Raised (with a reason) by whoever learns that a rank has failed: the supervisor, a reader
/// thread that lost its parent, or a test. Shared by clones.
#[derive(Clone, Default, Debug)]
pub struct AbortSignal(Arc<Mutex<Option<String>>>);

impl AbortSignal {
    pub fn new() -> Self {
        Self::default()
    }
    /// Raises the signal (the first reason is kept).
    pub fn raise(&self, reason: impl Into<String>) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(reason.into());
        }
    }
    /// The reason, once raised.
    pub fn reason(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The raw communicator handle (NCCL's communicators may be used from any thread, one call at
/// a time: the mutex in [`NcclComm`] sees to that).
struct RawComm(nccl_sys::ncclComm_t);

// SAFETY: an ncclComm_t is a heap object of the NCCL library, not tied to the thread that made
// it; every use goes through NcclComm's mutex.
unsafe impl Send for RawComm {}

/// One transfer of a grouped exchange ([`NcclComm::exchange`]): `count` values of `T` sent from
/// `send` to rank `peer` and received from it into `recv` (either side may be empty: count 0).
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    pub peer: usize,
    /// Device address and bytes to send (bytes 0: nothing).
    pub send: (u64, usize),
    /// Device address and bytes to receive (bytes 0: nothing).
    pub recv: (u64, usize),
}

/// One rank's communicator on its GPU's stream.
pub struct NcclComm {
    gpu: Arc<Gpu>,
    rank: usize,
    ranks: usize,
    abort: AbortSignal,
    /// `None` once aborted or destroyed.
    comm: Mutex<Option<RawComm>>,
    /// Recorded by [`NcclComm::wait`] and polled.
    event: CudaEvent,
    /// Exchanges queued beside the main stream and not yet joined (or dropped).
    pending: Arc<AtomicUsize>,
}

/// An exchange running on the exchange stream ([`NcclComm::exchange_beside`]); the main stream
/// waits for it at [`NcclComm::join`].
#[must_use = "the main stream must join an exchange before it reuses its buffers"]
pub struct Pending {
    done: CudaEvent,
    /// The communicator's count of pending exchanges, lowered when this is dropped (joined or
    /// given up after an error).
    pending: Arc<AtomicUsize>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let _ = self
            .pending
            .fetch_update(AtomicOrdering::SeqCst, AtomicOrdering::SeqCst, |n| {
                n.checked_sub(1)
            });
    }
}

/// Events that only order streams.
const NO_TIMING: cudarc::driver::sys::CUevent_flags =
    cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank)
            .field("ranks", &self.ranks)
            .field("gpu", &self.gpu.info().ordinal)
            .finish()
    }
}

impl NcclComm {
    /// Joins rank `rank` of `ranks` on `gpu` (blocks until every rank has joined).
    pub fn init(
        gpu: &Arc<Gpu>,
        id: &NcclId,
        rank: usize,
        ranks: usize,
        abort: AbortSignal,
    ) -> Result<NcclComm, CudaError> {
        nccl_available()?;
        if ranks == 0 || rank >= ranks {
            return Err(CudaError::Invalid(format!(
                "NCCL: rank {rank} of {ranks} does not exist"
            )));
        }
        gpu.bind()?;
        let event = gpu
            .context()
            .new_event(Some(
                cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
            ))
            .doing("creating an event")?;
        let uid = nccl_sys::ncclUniqueId {
            internal: id.0.map(|b| b as std::ffi::c_char),
        };
        let mut comm: nccl_sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: writes one communicator handle; the GPU's context is current on this thread
        // (NCCL takes the device from it).
        unsafe { nccl_result::comm_init_rank(&mut comm, ranks as i32, uid, rank as i32) }.map_err(
            |e| {
                nccl_error(
                    &format!(
                        "joining rank {rank} of {ranks} on GPU {}",
                        gpu.info().ordinal
                    ),
                    &e,
                )
            },
        )?;
        Ok(NcclComm {
            gpu: gpu.clone(),
            rank,
            ranks,
            abort,
            comm: Mutex::new(Some(RawComm(comm))),
            event,
            pending: Arc::new(AtomicUsize::new(0)),
        })
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn ranks(&self) -> usize {
        self.ranks
    }
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
    pub fn abort_signal(&self) -> &AbortSignal {
        &self.abort
    }

    /// The error of a call after the communicator was aborted.
    fn aborted(&self, what: &str) -> CudaError {
        CudaError::Driver {
            what: what.into(),
            message: format!(
                "rank {} stopped: {}",
                self.rank,
                self.abort
                    .reason()
                    .unwrap_or_else(|| "the communicator was aborted".into())
            ),
        }
    }

    /// Runs `f` with the live communicator handle and the stream (the context made current);
    /// `Err` after an abort or when the signal is raised.
    fn with_comm<T>(
        &self,
        what: &str,
        f: impl FnOnce(nccl_sys::ncclComm_t, nccl_sys::cudaStream_t) -> Result<T, CudaError>,
    ) -> Result<T, CudaError> {
        self.refuse_while_pending(what)?;
        self.with_comm_on(self.gpu.stream(), what, f)
    }

    /// `Err` while an exchange queued beside the main stream has not been joined
    /// ([`NcclComm::exchange_beside`]).
    fn refuse_while_pending(&self, what: &str) -> Result<(), CudaError> {
        if self.pending.load(AtomicOrdering::SeqCst) > 0 {
            return Err(CudaError::Invalid(format!(
                "NCCL {what}: queued on the main stream while an exchange beside it is pending"
            )));
        }
        Ok(())
    }

    /// [`NcclComm::with_comm`] on `stream`.
    fn with_comm_on<T>(
        &self,
        stream: &CudaStream,
        what: &str,
        f: impl FnOnce(nccl_sys::ncclComm_t, nccl_sys::cudaStream_t) -> Result<T, CudaError>,
    ) -> Result<T, CudaError> {
        if self.abort.reason().is_some() {
            self.abort();
            return Err(self.aborted(what));
        }
        let guard = self.comm.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = guard.as_ref() else {
            return Err(self.aborted(what));
        };
        self.gpu.bind()?;
        f(c.0, stream.cu_stream() as nccl_sys::cudaStream_t)
    }

    /// Waits for the stream; `Err` (after aborting the communicator) when the abort signal is
    /// raised or NCCL reports an asynchronous error while waiting.
    pub fn wait(&self, what: &str) -> Result<(), CudaError> {
        // Whatever the exchange stream still holds is waited for too (a pending exchange
        // that was never joined, after an error).
        self.join_all()?;
        self.event
            .record(self.gpu.stream())
            .doing(format!("waiting for {what}"))?;
        let mut polls = 0u32;
        loop {
            if let Some(reason) = self.abort.reason() {
                self.abort();
                return Err(CudaError::Driver {
                    what: format!("waiting for {what}"),
                    message: format!("rank {} stopped: {reason}", self.rank),
                });
            }
            if self
                .event
                .try_is_complete()
                .doing(format!("waiting for {what}"))?
            {
                return Ok(());
            }
            if let Some(e) = self.async_error() {
                let reason = format!(
                    "NCCL reported an error on rank {} (GPU {}) while {what}: {e}",
                    self.rank,
                    self.gpu.info().ordinal
                );
                self.abort.raise(reason.clone());
                self.abort();
                return Err(CudaError::Driver {
                    what: format!("waiting for {what}"),
                    message: reason,
                });
            }
            // Short sleeps first (a step's wait is usually brief), then 1 ms.
            polls += 1;
            std::thread::sleep(Duration::from_micros(if polls < 100 { 100 } else { 1000 }));
        }
    }

    /// NCCL's asynchronous error, if any (None after an abort).
    fn async_error(&self) -> Option<String> {
        let guard = self.comm.lock().unwrap_or_else(|p| p.into_inner());
        let c = guard.as_ref()?;
        let mut r = nccl_sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator handle (under the mutex); writes one result code.
        let call = unsafe { nccl_sys::ncclCommGetAsyncError(c.0, &mut r) };
        use nccl_sys::ncclResult_t as R;
        if call != R::ncclSuccess {
            return Some(describe(&nccl_result::NcclError(call)));
        }
        match r {
            R::ncclSuccess | R::ncclInProgress => None,
            other => Some(describe(&nccl_result::NcclError(other))),
        }
    }

    /// Aborts the communicator (idempotent).
    pub fn abort(&self) {
        let taken = self.comm.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(c) = taken {
            self.abort
                .raise(format!("rank {} aborted its communicator", self.rank));
            // SAFETY: the handle is live and taken out of the mutex, so no other call uses it;
            // ncclCommAbort stops its kernels and frees it.
            let _ = unsafe { nccl_result::comm_abort(c.0) };
        }
    }

    /// Queues one group of point-to-point transfers (every send and receive of the list in one
    /// `ncclGroupStart`/`ncclGroupEnd`, so NCCL runs them together); a transfer with this rank
    /// as its peer is a device-to-device copy from `send` to `recv` (equal sizes).
    ///
    /// # Safety
    /// Every address is a live allocation of this rank's GPU holding the bytes given; the
    /// receive areas do not overlap each other or any send area; every peer queues the
    /// matching transfers (same sizes) in the same order of calls.
    pub unsafe fn exchange(&self, what: &str, transfers: &[Transfer]) -> Result<(), CudaError> {
        self.refuse_while_pending(what)?;
        // SAFETY: the caller's contract.
        unsafe { self.exchange_on(self.gpu.stream(), what, transfers) }
    }

    /// Queues the exchange [`NcclComm::exchange`] would, on the GPU's exchange stream, after
    /// the work queued so far on its main stream; it then runs beside whatever the main stream
    /// does next. The main stream must [`NcclComm::join`] the returned [`Pending`] before it
    /// touches a buffer of the list again. Exchanges beside the main stream run one after
    /// another on the exchange stream; an exchange or collective queued on the main stream
    /// while one is pending is refused, so that the communicator's operations never run on two
    /// streams at once (they are queued in the same order on every rank, which is what NCCL
    /// needs to match them).
    ///
    /// # Safety
    /// As [`NcclComm::exchange`]; besides, until the join, the main stream neither writes a
    /// send area nor reads or writes a receive area of the list.
    pub unsafe fn exchange_beside(
        &self,
        what: &str,
        transfers: &[Transfer],
    ) -> Result<Pending, CudaError> {
        let side = self.gpu.exchange_stream()?;
        let ready = self
            .gpu
            .stream()
            .record_event(Some(NO_TIMING))
            .doing(format!("ordering {what}"))?;
        side.wait(&ready).doing(format!("ordering {what}"))?;
        // SAFETY: the caller's contract; the exchange stream waits for the main stream's work
        // queued so far (the event above), so the send areas hold their values.
        unsafe { self.exchange_on(side, what, transfers)? };
        let done = side
            .record_event(Some(NO_TIMING))
            .doing(format!("ordering {what}"))?;
        self.pending.fetch_add(1, AtomicOrdering::SeqCst);
        Ok(Pending {
            done,
            pending: self.pending.clone(),
        })
    }

    /// Makes the main stream wait for everything queued on the exchange stream so far (no
    /// host wait): what a rank does before its buffers are freed, joined or not.
    pub fn join_all(&self) -> Result<(), CudaError> {
        match self.gpu.exchange_stream_if_made() {
            Some(side) => self
                .gpu
                .stream()
                .join(side)
                .doing("joining the exchange stream"),
            None => Ok(()),
        }
    }

    /// Makes the main stream wait for the exchange `p` (its receive areas are then readable,
    /// its send areas writable, by work queued after this).
    pub fn join(&self, p: Pending) -> Result<(), CudaError> {
        self.gpu.stream().wait(&p.done).doing("joining an exchange")
    }

    /// The exchange of [`NcclComm::exchange`] on `stream`.
    ///
    /// # Safety
    /// As [`NcclComm::exchange`], with the areas ready on `stream`.
    unsafe fn exchange_on(
        &self,
        on: &CudaStream,
        what: &str,
        transfers: &[Transfer],
    ) -> Result<(), CudaError> {
        self.with_comm_on(on, what, |comm, stream| {
            let cu = on.cu_stream();
            for t in transfers.iter().filter(|t| t.peer == self.rank) {
                if t.send.1 != t.recv.1 {
                    return Err(CudaError::Invalid(format!(
                        "NCCL {what}: a self transfer of {} bytes into {}",
                        t.send.1, t.recv.1
                    )));
                }
                if t.send.1 > 0 {
                    // SAFETY: the caller's contract (both areas live, t.send.1 bytes).
                    unsafe {
                        cudarc::driver::result::memcpy_dtod_async(t.recv.0, t.send.0, t.send.1, cu)
                    }
                    .doing(format!("copying this rank's part of {what}"))?;
                }
            }
            let err = |e: nccl_result::NcclError| nccl_error(&format!("queuing {what}"), &e);
            nccl_result::group_start().map_err(err)?;
            // Sends then receives of each transfer, bytes as ncclUint8.
            let queue = |t: &Transfer| -> Result<(), CudaError> {
                let peer = t.peer as i32;
                let u8 = nccl_sys::ncclDataType_t::ncclUint8;
                if t.send.1 > 0 {
                    let buf = t.send.0 as *const c_void;
                    // SAFETY: the caller's contract (a live area of t.send.1 bytes).
                    unsafe { nccl_result::send(buf, t.send.1, u8, peer, comm, stream) }
                        .map_err(err)?;
                }
                if t.recv.1 > 0 {
                    let buf = t.recv.0 as *mut c_void;
                    // SAFETY: the caller's contract.
                    unsafe { nccl_result::recv(buf, t.recv.1, u8, peer, comm, stream) }
                        .map_err(err)?;
                }
                Ok(())
            };
            let result = transfers
                .iter()
                .filter(|t| t.peer != self.rank)
                .try_for_each(queue);
            // The group is closed whatever happened inside it.
            let end = nccl_result::group_end().map_err(err);
            result.and(end.map(|_| ()))
        })
    }

    /// Queues the all-reduce maximum of `count` u64 at `addr` in place (the bits of
    /// non-negative doubles order as the doubles; flags as 0/1).
    ///
    /// # Safety
    /// `addr` is a live allocation of this rank's GPU holding `count` u64; every rank calls
    /// this with the same count at the same point.
    pub unsafe fn all_reduce_max_u64(
        &self,
        what: &str,
        addr: u64,
        count: usize,
    ) -> Result<(), CudaError> {
        use nccl_sys::{ncclDataType_t::ncclUint64, ncclRedOp_t::ncclMax};
        let (send, recv) = (addr as *const c_void, addr as *mut c_void);
        // SAFETY: the caller's contract (in place: send = receive is allowed).
        self.with_comm(what, |comm, stream| unsafe {
            queued(
                what,
                nccl_result::all_reduce(send, recv, count, ncclUint64, ncclMax, comm, stream),
            )
        })
    }

    /// Queues the all-gather of `count` f64 at `send` from every rank into `recv` (rank r's at
    /// r·count).
    ///
    /// # Safety
    /// `send` holds `count` f64 and `recv` ranks·count f64, live allocations of this GPU, not
    /// overlapping unless `send` is rank r's slot of `recv`; every rank calls this with the
    /// same count at the same point.
    pub unsafe fn all_gather_f64(
        &self,
        what: &str,
        send: u64,
        recv: u64,
        count: usize,
    ) -> Result<(), CudaError> {
        let ty = nccl_sys::ncclDataType_t::ncclFloat64;
        let (send, recv) = (send as *const c_void, recv as *mut c_void);
        // SAFETY: the caller's contract.
        self.with_comm(what, |comm, stream| unsafe {
            queued(
                what,
                nccl_result::all_gather(send, recv, count, ty, comm, stream),
            )
        })
    }

    /// A barrier: an all-reduce of one u64 at `scratch` (overwritten), waited for.
    ///
    /// # Safety
    /// `scratch` is a live allocation of this GPU holding one u64; every rank calls this at the
    /// same point.
    pub unsafe fn barrier(&self, scratch: u64) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        unsafe { self.all_reduce_max_u64("a barrier", scratch, 1)? };
        self.wait("a barrier")
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let taken = self
            .comm
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(c) = taken {
            // Work still queued would make ncclCommDestroy wait for it; after an abort signal
            // there is no point waiting for peers that may be gone.
            if self.abort.reason().is_some() {
                // SAFETY: a live handle no one else holds.
                let _ = unsafe { nccl_result::comm_abort(c.0) };
            } else {
                let _ = self.gpu.bind();
                // SAFETY: as above.
                let _ = unsafe { nccl_result::comm_destroy(c.0) };
            }
        }
    }
}
