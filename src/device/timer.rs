//! Device time of a solver's phases, measured with CUDA events on the GPU's one stream
//! ([`Gpu::stream`]): a phase is the stream's time between two events, so the host need not
//! wait at phase boundaries to time them. The events are read when the host has waited for the
//! stream anyway ([`PhaseTimer::collect`]: nothing waits) or when the times are asked for
//! ([`PhaseTimer::take`]).

use super::cuda::{CudaError, Doing, Gpu};
use cudarc::driver::CudaEvent;
use std::sync::Arc;

/// Seconds of device time per phase (phases are numbered `0..phases`), by events on the GPU's
/// stream; events are reused.
pub struct PhaseTimer {
    gpu: Arc<Gpu>,
    /// Events to reuse.
    spare: Vec<CudaEvent>,
    /// Phases queued and not yet added: (phase, start, stop).
    queued: Vec<(usize, CudaEvent, CudaEvent)>,
    /// The phase begun and not yet ended, with its start.
    open: Option<(usize, CudaEvent)>,
    seconds: Vec<f64>,
}

impl PhaseTimer {
    /// A timer of `phases` phases on `gpu`'s stream.
    pub fn new(gpu: Arc<Gpu>, phases: usize) -> Self {
        PhaseTimer {
            gpu,
            spare: Vec::new(),
            queued: Vec::new(),
            open: None,
            seconds: vec![0.0; phases],
        }
    }

    /// An event recorded on the stream now.
    fn mark(&mut self) -> Result<CudaEvent, CudaError> {
        let e = match self.spare.pop() {
            Some(e) => e,
            None => self.gpu.event()?,
        };
        e.record(self.gpu.stream()).doing("recording an event")?;
        Ok(e)
    }

    /// Starts `phase` at this point of the stream (ending the phase that was open).
    pub fn begin(&mut self, phase: usize) -> Result<(), CudaError> {
        self.end()?;
        let start = self.mark()?;
        self.open = Some((phase, start));
        Ok(())
    }

    /// Ends the open phase, if any, at this point of the stream.
    pub fn end(&mut self) -> Result<(), CudaError> {
        if let Some((phase, start)) = self.open.take() {
            let stop = self.mark()?;
            self.queued.push((phase, start, stop));
        }
        Ok(())
    }

    /// Adds the ended phases to the totals. Called after the host has waited for the stream,
    /// it does not wait (every ended phase was queued before that wait); otherwise it waits for
    /// them ([`Gpu::elapsed_ms`] counts that).
    pub fn collect(&mut self) -> Result<(), CudaError> {
        for (phase, start, stop) in std::mem::take(&mut self.queued) {
            let ms = self.gpu.elapsed_ms(&start, &stop, "a phase")?;
            self.seconds[phase] += f64::from(ms) * 1e-3;
            self.spare.push(start);
            self.spare.push(stop);
        }
        Ok(())
    }

    /// Seconds per phase since the last call (the open phase ended, everything ended
    /// collected), then zero.
    pub fn take(&mut self) -> Result<Vec<f64>, CudaError> {
        self.end()?;
        self.collect()?;
        let zero = vec![0.0; self.seconds.len()];
        Ok(std::mem::replace(&mut self.seconds, zero))
    }
}
