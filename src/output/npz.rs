//! `.npz` archives (NumPy `savez` format, uncompressed): velocity fields and
//! checkpoint state.

use std::fs::File;
use std::io::{self, BufReader, Seek, SeekFrom, Write};
use std::path::Path;

use ndarray::{arr0, Array0, ArrayD, ArrayView3, ArrayViewD, Ix0, Ix3, IxDyn};
use ndarray_npy::{NpzReader, NpzWriter, ReadableElement};
use postprocess::layout::{FIELD_STEP, FIELD_T};
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

use super::{write_atomic_with, OutputError};

/// Entries at least this large get zip64 headers (plain zip stops at 4 GiB).
pub(crate) const ZIP64_FROM_BYTES: u64 = u32::MAX as u64 - (1 << 20);

pub(crate) fn npz_err<E>(op: &'static str, path: &Path, e: E) -> OutputError
where
    E: std::error::Error + Send + Sync + 'static,
{
    OutputError::Npz {
        op,
        path: path.to_path_buf(),
        error: Box::new(e),
    }
}

/// An npz archive writer on `w` that stays silent when a write fails ([`QuietAfterError`]).
pub(crate) fn npz_writer<W: Write + Seek>(w: W) -> NpzWriter<QuietAfterError<W>> {
    NpzWriter::new(QuietAfterError::new(w))
}

/// The writer under an npz archive ([`npz_writer`]). zip's `ZipWriter`, dropped unfinished
/// after a failed write, finishes the archive itself and prints that second failure's debug
/// text on stderr (`ZipWriter drop failed: Io(Os { code: 28, kind: StorageFull, … })`, no
/// newline, before vpm's own message). This writer passes its first error on (a full disk, …),
/// then accepts and discards everything, keeping the position and length the archive computes
/// with, so that the drop succeeds silently; the caller reports the first error and removes
/// the partial file.
pub(crate) struct QuietAfterError<W> {
    inner: W,
    failed: bool,
    /// Position and length of the stream as written so far (virtual once `failed`).
    pos: u64,
    len: u64,
}

impl<W: Write + Seek> QuietAfterError<W> {
    fn new(mut inner: W) -> Self {
        let pos = inner.stream_position().unwrap_or(0);
        QuietAfterError {
            inner,
            failed: false,
            pos,
            len: pos,
        }
    }

    /// Moves the position to `pos` (after a write or a seek).
    fn moved_to(&mut self, pos: u64) -> u64 {
        self.pos = pos;
        self.len = self.len.max(pos);
        pos
    }

    /// Passes on the result of an operation on the inner writer; an error (other than an
    /// interruption, which is retried) ends the real writing.
    fn note<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            self.failed |= e.kind() != io::ErrorKind::Interrupted;
        }
        result
    }
}

impl<W: Write + Seek> Write for QuietAfterError<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = if self.failed {
            buf.len()
        } else {
            let result = self.inner.write(buf);
            self.note(result)?
        };
        self.moved_to(self.pos + n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.failed {
            return Ok(());
        }
        let result = self.inner.flush();
        self.note(result)
    }
}

impl<W: Write + Seek> Seek for QuietAfterError<W> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        if !self.failed {
            let result = self.inner.seek(to);
            let pos = self.note(result)?;
            return Ok(self.moved_to(pos));
        }
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
        };
        let pos = pos.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.moved_to(pos))
    }
}

pub(crate) fn options_for(n_elems: usize, zip64_from_bytes: u64) -> SimpleFileOptions {
    let bytes = (n_elems as u64).saturating_mul(8);
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .large_file(bytes >= zip64_from_bytes)
}

/// When a field was written: the simulation time and the step number. Stored in an npz as the
/// 0-d arrays `t` (f64) and `step` (u64), as the field snapshots store them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldTime {
    /// The simulation time.
    pub t: f64,
    /// The number of steps taken since t = 0.
    pub step: u64,
}

/// Write named f64 arrays (`(name, view)`) as an uncompressed npz into `w`.
/// `path` only names the file in errors.
pub(crate) fn write_npz_arrays<W: Write + Seek>(
    w: W,
    path: &Path,
    arrays: &[(&str, ArrayViewD<'_, f64>)],
) -> Result<(), OutputError> {
    write_npz_arrays_zip64_from(w, path, arrays, None, ZIP64_FROM_BYTES)
}

/// [`write_npz_arrays`], then `time` as the arrays `t` and `step` when given; entries of at
/// least `zip64_from_bytes` get zip64 headers.
fn write_npz_arrays_zip64_from<W: Write + Seek>(
    w: W,
    path: &Path,
    arrays: &[(&str, ArrayViewD<'_, f64>)],
    time: Option<FieldTime>,
    zip64_from_bytes: u64,
) -> Result<(), OutputError> {
    let mut npz = npz_writer(w);
    for (name, a) in arrays {
        npz.add_array_with_options(*name, a, options_for(a.len(), zip64_from_bytes))
            .map_err(|e| npz_err("write", path, e))?;
    }
    if let Some(time) = time {
        npz.add_array(FIELD_T, &arr0(time.t))
            .map_err(|e| npz_err("write", path, e))?;
        npz.add_array(FIELD_STEP, &arr0(time.step))
            .map_err(|e| npz_err("write", path, e))?;
    }
    npz.finish().map_err(|e| npz_err("write", path, e))?;
    Ok(())
}

/// Read every array of an npz file as f64 arrays of any dimension, in file order.
pub(crate) fn read_npz_arrays(path: &Path) -> Result<Vec<(String, ArrayD<f64>)>, OutputError> {
    let mut npz = open_npz(path)?;
    let names = npz.names().map_err(|e| npz_err("read", path, e))?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let a: ArrayD<f64> = npz.by_name(&name).map_err(|e| npz_err("read", path, e))?;
        out.push((name, a));
    }
    Ok(out)
}

/// The npz file at `path`, open for reading.
fn open_npz(path: &Path) -> Result<NpzReader<BufReader<File>>, OutputError> {
    let f = File::open(path).map_err(|e| OutputError::io("open", path, e))?;
    NpzReader::new(BufReader::new(f)).map_err(|e| npz_err("read", path, e))
}

/// The value of the 0-d array `name` of an open npz (`path` names it in errors).
fn read_scalar<T: ReadableElement>(
    npz: &mut NpzReader<BufReader<File>>,
    path: &Path,
    name: &str,
) -> Result<T, OutputError> {
    let a: Array0<T> = npz
        .by_name::<ndarray::OwnedRepr<T>, Ix0>(name)
        .map_err(|e| npz_err("read", path, e))?;
    Ok(a.into_scalar())
}

/// The time `t` (a 0-d f64 array) of an npz: the particle snapshots and the grid fields store
/// it, and their `.pvd` collections read it back ([`super::vtk::Series::rewrite_pvd`]).
pub(crate) fn read_npz_time(path: &Path) -> Result<f64, OutputError> {
    read_scalar(&mut open_npz(path)?, path, FIELD_T)
}

/// The time and step stored in an npz ([`FieldTime`]: the 0-d arrays `t` and `step`), as
/// [`write_velocity_npz`] and the field snapshots write them.
pub fn read_field_time(path: &Path) -> Result<FieldTime, OutputError> {
    let mut npz = open_npz(path)?;
    Ok(FieldTime {
        t: read_scalar(&mut npz, path, FIELD_T)?,
        step: read_scalar(&mut npz, path, FIELD_STEP)?,
    })
}

/// Flatten an array into a `Vec` in C (row-major) order.
pub(crate) fn into_c_order_vec<D: ndarray::Dimension>(a: ndarray::Array<f64, D>) -> Vec<f64> {
    if !a.is_standard_layout() {
        return a.iter().copied().collect();
    }
    let len = a.len();
    let (v, offset) = a.into_raw_vec_and_offset();
    let start = offset.unwrap_or(0);
    if start == 0 && v.len() == len {
        v
    } else {
        v[start..start + len].to_vec()
    }
}

/// Write `final.npz`-style velocity: arrays `"u"`, `"v"`, `"w"`, each f64 of
/// shape `(n, n, n)` in C order, indexed `[i, j, k]` ↔ `(x_i, y_j, z_k)`, then
/// the field's `time` as the 0-d arrays `"t"` (f64) and `"step"` (u64) (read
/// back by [`read_field_time`]). The input slices use the same layout (index
/// `(i*n + j)*n + k`). The file is streamed into a temporary sibling and
/// renamed (atomic).
pub fn write_velocity_npz(
    path: &Path,
    n: usize,
    [u, v, w]: [&[f64]; 3],
    time: FieldTime,
) -> Result<(), OutputError> {
    let len = n
        .checked_mul(n)
        .and_then(|x| x.checked_mul(n))
        .ok_or_else(|| OutputError::invalid(path, format!("grid size {n}^3 overflows")))?;
    let mut views = Vec::with_capacity(3);
    for (name, data) in [("u", u), ("v", v), ("w", w)] {
        let view = ArrayView3::from_shape((n, n, n), data).map_err(|_| {
            OutputError::invalid(
                path,
                format!(
                    "velocity component {name} has {} values, expected n^3 = {len}",
                    data.len()
                ),
            )
        })?;
        views.push((name, view.into_dyn()));
    }
    write_atomic_with(path, |w, tmp| {
        write_npz_arrays_zip64_from(w, tmp, &views, Some(time), ZIP64_FROM_BYTES)
    })
}

/// A velocity field as read back: `(n, u, v, w)`, components flat in C order.
pub type VelocityField = (usize, Vec<f64>, Vec<f64>, Vec<f64>);

/// Read a file written by [`write_velocity_npz`]: `(n, u, v, w)` with the
/// components flattened in C order. Checks that all three are `(n, n, n)`.
/// The time is read by [`read_field_time`] (`final.npz` files written before
/// vpm stored it have none).
pub fn read_velocity_npz(path: &Path) -> Result<VelocityField, OutputError> {
    let mut npz = open_npz(path)?;
    let mut n = None;
    let mut comps = Vec::with_capacity(3);
    for name in ["u", "v", "w"] {
        let a: ndarray::Array3<f64> = npz
            .by_name::<ndarray::OwnedRepr<f64>, Ix3>(name)
            .map_err(|e| npz_err("read", path, e))?;
        let (a0, a1, a2) = a.dim();
        if a0 != a1 || a1 != a2 || n.is_some_and(|n| n != a0) {
            return Err(OutputError::invalid(
                path,
                format!("array {name} has shape ({a0}, {a1}, {a2}); expected (n, n, n) for all of u, v, w"),
            ));
        }
        n = Some(a0);
        comps.push(into_c_order_vec(a));
    }
    let w = comps.pop().unwrap_or_default();
    let v = comps.pop().unwrap_or_default();
    let u = comps.pop().unwrap_or_default();
    Ok((n.unwrap_or(0), u, v, w))
}

/// Shape of a dynamic array as a `Vec<usize>`.
pub(crate) fn shape_of(a: &ArrayD<f64>) -> Vec<usize> {
    a.shape().to_vec()
}

/// A view of flat C-order `data` with the given `shape`, or an error naming `path`.
pub(crate) fn view_of<'a>(
    path: &Path,
    name: &str,
    shape: &[usize],
    data: &'a [f64],
) -> Result<ArrayViewD<'a, f64>, OutputError> {
    ArrayViewD::from_shape(IxDyn(shape), data).map_err(|_| {
        OutputError::invalid(
            path,
            format!(
                "array {name:?} has {} values, which does not match shape {shape:?}",
                data.len()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::Mix;
    use super::*;
    use ndarray::Array3;

    const AT_ZERO: FieldTime = FieldTime { t: 0.0, step: 0 };

    #[test]
    fn velocity_npz_round_trip_bit_exact() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("final.npz");
        let n = 5;
        let mut rng = Mix(7);
        let mut field = || -> Vec<f64> {
            (0..n * n * n)
                .map(|_| {
                    f64::from_bits(rng.next() >> 2) * if rng.next() & 1 == 0 { 1.0 } else { -1.0 }
                })
                .collect()
        };
        let (u, v, w) = (field(), field(), field());
        let time = FieldTime {
            t: 0.1 + 0.2,
            step: u64::MAX - 3,
        };
        write_velocity_npz(&p, n, [&u, &v, &w], time).unwrap();
        // only the file, no temporaries
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1);

        let (n2, u2, v2, w2) = read_velocity_npz(&p).unwrap();
        assert_eq!(n2, n);
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&u2), bits(&u));
        assert_eq!(bits(&v2), bits(&v));
        assert_eq!(bits(&w2), bits(&w));
        // the time and step, exactly
        let back = read_field_time(&p).unwrap();
        assert_eq!(back.t.to_bits(), time.t.to_bits());
        assert_eq!(back.step, time.step);

        // independent check with ndarray-npy directly: shape and [i,j,k] indexing, and the
        // time and step as 0-d f64 and u64 arrays
        let mut npz = NpzReader::new(File::open(&p).unwrap()).unwrap();
        let mut names = npz.names().unwrap();
        names.sort();
        assert_eq!(names, vec!["step", "t", "u", "v", "w"]);
        let t: ndarray::Array0<f64> = npz.by_name("t").unwrap();
        assert_eq!(t.into_scalar().to_bits(), time.t.to_bits());
        let step: ndarray::Array0<u64> = npz.by_name("step").unwrap();
        assert_eq!(step.into_scalar(), time.step);
        let a: Array3<f64> = npz.by_name("v").unwrap();
        assert_eq!(a.shape(), &[n, n, n]);
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    assert_eq!(a[[i, j, k]].to_bits(), v[(i * n + j) * n + k].to_bits());
                }
            }
        }
    }

    #[test]
    fn zip64_entries_read_back() {
        // entries over 4 GiB get zip64 headers; check that path on a small file
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("big.npz");
        let data: Vec<f64> = (0..24).map(|i| i as f64 * 0.1).collect();
        let view = ArrayViewD::from_shape(IxDyn(&[2, 3, 4]), &data).unwrap();
        let f = File::create(&p).unwrap();
        write_npz_arrays_zip64_from(f, &p, &[("a", view.clone()), ("b", view)], None, 0).unwrap();
        let back = read_npz_arrays(&p).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].0, "b");
        assert_eq!(back[1].1.shape(), &[2, 3, 4]);
        assert_eq!(into_c_order_vec(back[1].1.clone()), data);
    }

    /// A stream with room for `room` bytes: the write that does not fit fails, and so does
    /// every operation after it; those are counted.
    struct FullAfter {
        data: std::io::Cursor<Vec<u8>>,
        room: u64,
        failed: bool,
        tried_after_failure: usize,
    }

    impl FullAfter {
        fn refuse_unless(&mut self, fits: bool) -> std::io::Result<()> {
            self.tried_after_failure += usize::from(self.failed);
            if self.failed || !fits {
                self.failed = true;
                return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
            }
            Ok(())
        }
    }

    impl Write for FullAfter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.refuse_unless(self.data.position() + buf.len() as u64 <= self.room)?;
            self.data.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.refuse_unless(true)
        }
    }

    impl Seek for FullAfter {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.refuse_unless(true)?;
            self.data.seek(to)
        }
    }

    #[test]
    fn failed_npz_write_returns_its_error_and_touches_the_stream_no_more() {
        // Before QuietAfterError, zip finished the archive again when it was dropped, failed
        // again and printed `ZipWriter drop failed: Io(…)` on stderr.
        let data: Vec<f64> = (0..4096).map(f64::from).collect();
        let view = ArrayViewD::from_shape(IxDyn(&[4096]), &data).unwrap();
        let mut whole = std::io::Cursor::new(Vec::new());
        write_npz_arrays(&mut whole, Path::new("x.npz"), &[("a", view.clone())]).unwrap();
        let size = whole.into_inner().len() as u64;
        // In a header, in the data, in the central directory at the end.
        for room in [0, 100, 5000, size - 60, size - 1] {
            let mut w = FullAfter {
                data: std::io::Cursor::new(Vec::new()),
                room,
                failed: false,
                tried_after_failure: 0,
            };
            let err = write_npz_arrays(&mut w, Path::new("x.npz"), &[("a", view.clone())])
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("cannot write npz x.npz: "), "{err}");
            assert!(!err.contains("Os {") && !err.contains("Io("), "{err}");
            // The reason, whether zip or the npy writer met it.
            let reason = std::io::Error::from(std::io::ErrorKind::StorageFull).to_string();
            assert!(err.ends_with(&reason), "{err}");
            assert!(w.failed, "{room} bytes of room");
            assert_eq!(w.tried_after_failure, 0, "{room} bytes of room");
        }
    }

    #[test]
    fn velocity_npz_rejects_wrong_length() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("final.npz");
        let u = vec![0.0; 8];
        let err = write_velocity_npz(&p, 2, [&u, &u, &u[..7]], AT_ZERO).unwrap_err();
        assert!(err.to_string().contains("final.npz"), "{err}");
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn velocity_npz_replaces_atomically() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("final.npz");
        write_velocity_npz(&p, 1, [&[1.0], &[2.0], &[3.0]], AT_ZERO).unwrap();
        let u = vec![0.5; 8];
        let later = FieldTime { t: 2.5, step: 10 };
        write_velocity_npz(&p, 2, [&u, &u, &u], later).unwrap();
        let (n, u2, _, _) = read_velocity_npz(&p).unwrap();
        assert_eq!(n, 2);
        assert_eq!(u2, u);
        assert_eq!(read_field_time(&p).unwrap(), later);
    }

    #[test]
    fn field_time_missing_is_named() {
        // a file without `t` and `step` (final.npz of an older vpm): an error naming it
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("final.npz");
        let data = [1.0];
        let view = ArrayViewD::from_shape(IxDyn(&[1, 1, 1]), &data).unwrap();
        write_npz_arrays(File::create(&p).unwrap(), &p, &[("u", view)]).unwrap();
        let err = read_field_time(&p).unwrap_err().to_string();
        assert!(err.contains("final.npz"), "{err}");
    }
}
