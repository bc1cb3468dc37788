//! NCCL, the engine between several GPUs (one rank per GPU): the library probed before use,
//! the unique id that joins the ranks, and one rank's communicator with the collectives the
//! distributed solvers use, each queued on the rank's GPU stream. Waits on those queues go
//! through [`NcclComm::wait`], which gives up (and aborts the communicator) when the run's
//! [`AbortSignal`] is raised, so a failed rank never leaves the others hanging.
//!
//! SKELETON (lead): signatures only; the `slabgpu` engineer implements them.

use super::cuda::{CudaError, Gpu};
use std::sync::{Arc, Mutex};

/// Whether NCCL can be loaded (cudarc looks for `libnccl.so` and panics without it): `Err`
/// names what to install or set.
pub fn nccl_available() -> Result<(), CudaError> {
    unimplemented!("skeleton")
}

/// The 128-byte id that joins the ranks of one communicator (made by rank 0, passed to the
/// others as hex).
#[derive(Clone, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

impl NcclId {
    /// A fresh id (rank 0).
    pub fn new() -> Result<NcclId, CudaError> {
        unimplemented!("skeleton")
    }
    /// 256 hex digits.
    pub fn to_hex(&self) -> String {
        unimplemented!("skeleton")
    }
    /// From [`NcclId::to_hex`]'s form.
    pub fn from_hex(s: &str) -> Option<NcclId> {
        let _ = s;
        unimplemented!("skeleton")
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

/// One rank's communicator on its GPU's stream.
pub struct NcclComm {
    _private: (),
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
        let _ = (gpu, id, rank, ranks, abort);
        unimplemented!("skeleton")
    }
    pub fn rank(&self) -> usize {
        unimplemented!("skeleton")
    }
    pub fn ranks(&self) -> usize {
        unimplemented!("skeleton")
    }
    pub fn gpu(&self) -> &Arc<Gpu> {
        unimplemented!("skeleton")
    }
    pub fn abort_signal(&self) -> &AbortSignal {
        unimplemented!("skeleton")
    }
    /// Waits for the stream; `Err` (after aborting the communicator) when the abort signal is
    /// raised or NCCL reports an asynchronous error while waiting.
    pub fn wait(&self, what: &str) -> Result<(), CudaError> {
        let _ = what;
        unimplemented!("skeleton")
    }
    /// Aborts the communicator (idempotent).
    pub fn abort(&self) {
        unimplemented!("skeleton")
    }
}
