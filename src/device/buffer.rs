//! Device buffers shared by the GPU engines (and by [`crate::summation::DeviceSources`]):
//! allocations that grow only when a larger size is needed and stay resident between
//! evaluations, with upload, download, zero and NaN poisoning. Everything is queued on the
//! stream given, the GPU's one stream ([`super::cuda::Gpu::stream`]); a download waits for it
//! and is counted by the [`Gpu`].

use super::cuda::{CudaError, Doing, Gpu};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// A device buffer that grows only when a larger size is needed.
pub struct DeviceBuffer<T> {
    buf: Option<CudaSlice<T>>,
}

impl<T: DeviceRepr + ValidAsZeroBits> Default for DeviceBuffer<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: DeviceRepr + ValidAsZeroBits> DeviceBuffer<T> {
    pub fn new() -> Self {
        DeviceBuffer { buf: None }
    }

    pub fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), CudaError> {
        let have = self.buf.as_ref().map_or(0, |b| b.len());
        if have < len.max(1) {
            self.buf = None; // free first: the old contents are not needed
            let b = stream
                .alloc_zeros::<T>(len.max(1))
                .doing(format!("allocating {len} device values"))?;
            self.buf = Some(b);
        }
        Ok(())
    }

    /// Like [`DeviceBuffer::ensure`], but a reallocation keeps the first `keep` values (grown
    /// by half again beyond `len`, so that repeated growth copies little).
    pub fn grow_keep(
        &mut self,
        stream: &Arc<CudaStream>,
        len: usize,
        keep: usize,
    ) -> Result<(), CudaError> {
        let have = self.capacity();
        if have >= len.max(1) {
            return Ok(());
        }
        let mut b = stream
            .alloc_zeros::<T>(len.max(1) + len / 2)
            .doing(format!("allocating {len} device values"))?;
        if let (Some(old), true) = (self.buf.as_ref(), keep > 0) {
            let keep = keep.min(have);
            stream
                .memcpy_dtod(&old.slice(0..keep), &mut b.slice_mut(0..keep))
                .doing("copying a growing device buffer")?;
        }
        self.buf = Some(b);
        Ok(())
    }

    /// Copies the first `len` values of `src` (a device-to-device copy on `stream`).
    pub fn copy_from(
        &mut self,
        stream: &Arc<CudaStream>,
        src: &DeviceBuffer<T>,
        len: usize,
    ) -> Result<(), CudaError> {
        self.ensure(stream, len)?;
        if len == 0 {
            return Ok(());
        }
        stream
            .memcpy_dtod(
                &src.get().slice(0..len),
                &mut self.get_mut().slice_mut(0..len),
            )
            .doing("copying between device buffers")
    }

    /// Values allocated (0 before the first [`DeviceBuffer::ensure`]).
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }

    pub fn get(&self) -> &CudaSlice<T> {
        self.buf
            .as_ref()
            .expect("DeviceBuffer used before ensure()")
    }

    pub fn get_mut(&mut self) -> &mut CudaSlice<T> {
        self.buf
            .as_mut()
            .expect("DeviceBuffer used before ensure()")
    }

    pub fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        host: &[T],
        what: &str,
    ) -> Result<(), CudaError> {
        self.ensure(stream, host.len())?;
        if host.is_empty() {
            return Ok(());
        }
        let mut view = self.get_mut().slice_mut(0..host.len());
        stream
            .memcpy_htod(host, &mut view)
            .doing(format!("copying {what} to the device"))
    }

    /// Fills the first `len` values with zero bytes.
    pub fn zero(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), CudaError> {
        self.ensure(stream, len)?;
        let mut view = self.get_mut().slice_mut(0..len.max(1));
        stream
            .memset_zeros(&mut view)
            .doing("zeroing a device buffer")
    }

    /// Fills the first `len` values with 0xFF bytes (a NaN in f32 and f64).
    pub fn poison(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), CudaError> {
        self.ensure(stream, len)?;
        if len == 0 {
            return Ok(());
        }
        let bytes = len * std::mem::size_of::<T>();
        let cu_stream = stream.cu_stream();
        let (ptr, _record) = self.get_mut().device_ptr_mut(stream);
        // SAFETY: ptr is a live allocation of at least `len` values of T on this stream's
        // context (ensure() sized it); all-ones bytes are a valid (NaN) f32/f64 bit pattern.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, cu_stream) }
            .doing("poisoning the output")
    }

    /// The raw device address (for kernel arguments that may be null).
    pub fn addr(&self, stream: &Arc<CudaStream>) -> u64 {
        let (ptr, _record) = self.get().device_ptr(stream);
        ptr
    }

    /// Copies the first `host.len()` values to the host once `gpu`'s stream reaches the copy,
    /// and waits for it ([`Gpu::copy_to_host`]: a counted host synchronisation).
    pub fn download(&self, gpu: &Gpu, host: &mut [T], what: &str) -> Result<(), CudaError> {
        if host.is_empty() {
            return Ok(());
        }
        let view = self.get().slice(0..host.len());
        gpu.copy_to_host(&view, host, what)
    }
}
