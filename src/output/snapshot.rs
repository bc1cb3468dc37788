//! Particle snapshots of the vortex method: `<run>/snapshots/`.
//!
//! Each snapshot of step `s` is written as two files, plus one collection file
//! rewritten every time:
//!
//! * `particles-<s:08>.npz`: NumPy archive (uncompressed `savez` layout) with
//!   `t` (0-d f64), `step` (0-d u64), `x`, `alpha`, `u`, `dalpha_dt`
//!   (`(n, 3)` f64, C order), `sigma` (`(n,)` f64) and `id` (`(n,)` u64).
//!   `np.load(f)['t'][()]` gives the time.
//! * `particles-<s:08>.vtp`: VTK XML PolyData for ParaView, one point per
//!   particle and one `Verts` cell per point. Point data: `alpha`,
//!   `velocity`, `dalpha_dt` (3 components, Float64), `sigma` (Float64),
//!   `id` (UInt64) and `|alpha|` (Float64, the norm of `alpha`). Field data:
//!   `TimeValue` (Float64) and `step` (UInt64). Arrays are inline
//!   `format="binary"`: little-endian values preceded by a UInt64 byte count
//!   (`header_type="UInt64"`), header and values base64-encoded as one
//!   stream, as VTK's own writer does for uncompressed data.
//! * `particles.pvd`: a VTK `Collection` listing every `particles-*.vtp`
//!   present in the folder, sorted by step, each with its time. It is rebuilt
//!   from the folder's contents on every write (times come from the previous
//!   collection file, else from the snapshot's `.npz`), so rewriting a step,
//!   as a resumed run does, never duplicates an entry.
//!
//! Every file is written atomically ([`super::write_atomic`]'s
//! temporary sibling, fsync, rename), in the order npz, vtp, pvd.

use std::fs::{self, File};
use std::io::{self, BufReader, Seek, Write};
use std::path::{Path, PathBuf};

use ndarray::{arr0, Array0, Array1, Array2, ArrayView1, ArrayView2, Ix0, Ix1, Ix2};
use ndarray_npy::{NpzReader, NpzWriter, ReadableElement, WriteNpyExt};

use super::npz::{into_c_order_vec, npz_err, npz_writer, options_for, ZIP64_FROM_BYTES};
use super::vtk::{write_binary_array, write_time_field_data, Series};
use super::{write_atomic_with, OutputError};

/// Name of the snapshots folder inside the run directory.
pub const SNAPSHOTS_DIR: &str = postprocess::layout::SNAPSHOTS_DIR;

/// Name of the ParaView collection file inside [`SNAPSHOTS_DIR`].
pub const PARTICLES_PVD: &str = "particles.pvd";

/// File-name stem shared by a snapshot's `.npz` and `.vtp`.
const STEM_PREFIX: &str = "particles-";

/// One snapshot of the particle state, borrowed from the simulation.
///
/// All slices have one entry per particle (the same length `n`).
#[derive(Debug, Clone, Copy)]
pub struct ParticleSnapshot<'a> {
    /// Simulation time (must be finite).
    pub t: f64,
    /// Time-step index.
    pub step: u64,
    /// Particle positions.
    pub x: &'a [[f64; 3]],
    /// Particle strengths α = ω·vol.
    pub alpha: &'a [[f64; 3]],
    /// Core radii.
    pub sigma: &'a [f64],
    /// Stable particle ids.
    pub id: &'a [u64],
    /// Velocity at each particle (stored as `u` in the `.npz`).
    pub velocity: &'a [[f64; 3]],
    /// Rate of change of the strengths (stretching and diffusion).
    pub dalpha_dt: &'a [[f64; 3]],
}

/// A snapshot as read back by [`read_particle_snapshot`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnedParticleSnapshot {
    /// Simulation time.
    pub t: f64,
    /// Time-step index.
    pub step: u64,
    /// Particle positions.
    pub x: Vec<[f64; 3]>,
    /// Particle strengths.
    pub alpha: Vec<[f64; 3]>,
    /// Core radii.
    pub sigma: Vec<f64>,
    /// Stable particle ids.
    pub id: Vec<u64>,
    /// Velocity at each particle.
    pub velocity: Vec<[f64; 3]>,
    /// Rate of change of the strengths.
    pub dalpha_dt: Vec<[f64; 3]>,
}

impl OwnedParticleSnapshot {
    /// Borrow as a [`ParticleSnapshot`] (e.g. to write it again).
    pub fn as_snapshot(&self) -> ParticleSnapshot<'_> {
        ParticleSnapshot {
            t: self.t,
            step: self.step,
            x: &self.x,
            alpha: &self.alpha,
            sigma: &self.sigma,
            id: &self.id,
            velocity: &self.velocity,
            dalpha_dt: &self.dalpha_dt,
        }
    }

    /// Number of particles.
    pub fn len(&self) -> usize {
        self.x.len()
    }

    /// Whether the snapshot holds no particle.
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }
}

/// The particle snapshots: `particles-<step:08>.vtp` listed in `particles.pvd`.
const SERIES: Series<'static> = Series {
    prefix: STEM_PREFIX,
    ext: ".vtp",
    pvd: PARTICLES_PVD,
};

fn stem(step: u64) -> String {
    SERIES.stem(step)
}

/// Check that every array has `n` entries and that `t` is finite.
fn validate(path: &Path, snap: &ParticleSnapshot) -> Result<(), OutputError> {
    if !snap.t.is_finite() {
        return Err(OutputError::invalid(
            path,
            format!("snapshot time t = {} is not finite", snap.t),
        ));
    }
    let n = snap.x.len();
    let lens = [
        ("alpha", snap.alpha.len()),
        ("sigma", snap.sigma.len()),
        ("id", snap.id.len()),
        ("velocity", snap.velocity.len()),
        ("dalpha_dt", snap.dalpha_dt.len()),
    ];
    for (name, len) in lens {
        if len != n {
            return Err(OutputError::invalid(
                path,
                format!("snapshot array {name} has {len} entries but x has {n}"),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// npz
// ---------------------------------------------------------------------------

pub(super) fn add_npz<W, T>(
    npz: &mut NpzWriter<W>,
    path: &Path,
    name: &str,
    array: &T,
    n_elems: usize,
) -> Result<(), OutputError>
where
    W: Write + Seek,
    T: WriteNpyExt + ?Sized,
{
    let options = options_for(n_elems, ZIP64_FROM_BYTES);
    npz.add_array_with_options(name, array, options)
        .map_err(|e| npz_err("write", path, e))
}

fn vec3_view<'a>(path: &Path, v: &'a [[f64; 3]]) -> Result<ArrayView2<'a, f64>, OutputError> {
    ArrayView2::from_shape((v.len(), 3), v.as_flattened())
        .map_err(|e| OutputError::invalid(path, format!("cannot view array as (n, 3): {e}")))
}

/// Add the (n, 3) array `v` to `npz` as `name`.
pub(super) fn add_vec3_npz<W: Write + Seek>(
    npz: &mut NpzWriter<W>,
    path: &Path,
    name: &str,
    v: &[[f64; 3]],
) -> Result<(), OutputError> {
    add_npz(npz, path, name, &vec3_view(path, v)?, 3 * v.len())
}

fn write_snapshot_npz<W: Write + Seek>(
    w: W,
    path: &Path,
    snap: &ParticleSnapshot,
) -> Result<(), OutputError> {
    let n = snap.x.len();
    let mut npz = npz_writer(w);
    add_npz(&mut npz, path, "t", &arr0(snap.t), 1)?;
    add_npz(&mut npz, path, "step", &arr0(snap.step), 1)?;
    add_vec3_npz(&mut npz, path, "x", snap.x)?;
    add_vec3_npz(&mut npz, path, "alpha", snap.alpha)?;
    add_npz(&mut npz, path, "sigma", &ArrayView1::from(snap.sigma), n)?;
    add_npz(&mut npz, path, "id", &ArrayView1::from(snap.id), n)?;
    add_vec3_npz(&mut npz, path, "u", snap.velocity)?;
    add_vec3_npz(&mut npz, path, "dalpha_dt", snap.dalpha_dt)?;
    npz.finish().map_err(|e| npz_err("write", path, e))?;
    Ok(())
}

/// The npz reader of a snapshot file.
pub(super) type SnapshotReader = NpzReader<BufReader<File>>;

/// Read an integer array stored as u64, or as non-negative i64 (numpy's
/// default integer type, for files made by other tools).
pub(super) fn read_u64_array<D: ndarray::Dimension>(
    npz: &mut SnapshotReader,
    path: &Path,
    name: &str,
) -> Result<ndarray::Array<u64, D>, OutputError> {
    read_by_name(npz, path, name).or_else(|e_u64| {
        let a = npz
            .by_name::<ndarray::OwnedRepr<i64>, D>(name)
            .map_err(|_| e_u64)?;
        if a.iter().any(|&v| v < 0) {
            return Err(OutputError::invalid(
                path,
                format!("array {name} has negative values"),
            ));
        }
        Ok(a.mapv(|v| v as u64))
    })
}

pub(super) fn read_by_name<A: ReadableElement, D: ndarray::Dimension>(
    npz: &mut SnapshotReader,
    path: &Path,
    name: &str,
) -> Result<ndarray::Array<A, D>, OutputError> {
    npz.by_name::<ndarray::OwnedRepr<A>, D>(name)
        .map_err(|e| npz_err("read", path, e))
}

pub(super) fn read_vec3(
    npz: &mut SnapshotReader,
    path: &Path,
    name: &str,
    n: usize,
) -> Result<Vec<[f64; 3]>, OutputError> {
    let a: Array2<f64> = read_by_name::<f64, Ix2>(npz, path, name)?;
    if a.dim() != (n, 3) {
        return Err(OutputError::invalid(
            path,
            format!("array {name} has shape {:?}, expected ({n}, 3)", a.shape()),
        ));
    }
    Ok(into_c_order_vec(a)
        .chunks_exact(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect())
}

pub(super) fn check_len(path: &Path, name: &str, len: usize, n: usize) -> Result<(), OutputError> {
    if len == n {
        Ok(())
    } else {
        Err(OutputError::invalid(
            path,
            format!("array {name} has shape ({len},), expected ({n},)"),
        ))
    }
}

pub(super) fn open_npz(path: &Path) -> Result<SnapshotReader, OutputError> {
    let f = File::open(path).map_err(|e| OutputError::io("open", path, e))?;
    NpzReader::new(BufReader::new(f)).map_err(|e| npz_err("read", path, e))
}

/// Read a snapshot `.npz` written by [`write_particle_snapshot`] back, checking
/// that every array has the expected shape (`(n, 3)` or `(n,)`, scalars for
/// `t` and `step`). Values come back bit for bit.
pub fn read_particle_snapshot(path: &Path) -> Result<OwnedParticleSnapshot, OutputError> {
    let mut npz = open_npz(path)?;
    let t: Array0<f64> = read_by_name::<f64, Ix0>(&mut npz, path, "t")?;
    let step: Array0<u64> = read_u64_array::<Ix0>(&mut npz, path, "step")?;
    let sigma: Array1<f64> = read_by_name::<f64, Ix1>(&mut npz, path, "sigma")?;
    let n = sigma.len();
    let id: Array1<u64> = read_u64_array::<Ix1>(&mut npz, path, "id")?;
    check_len(path, "id", id.len(), n)?;
    Ok(OwnedParticleSnapshot {
        t: t.into_scalar(),
        step: step.into_scalar(),
        x: read_vec3(&mut npz, path, "x", n)?,
        alpha: read_vec3(&mut npz, path, "alpha", n)?,
        sigma: into_c_order_vec(sigma),
        id: id.iter().copied().collect(),
        velocity: read_vec3(&mut npz, path, "u", n)?,
        dalpha_dt: read_vec3(&mut npz, path, "dalpha_dt", n)?,
    })
}

// ---------------------------------------------------------------------------
// vtp
// ---------------------------------------------------------------------------

pub(super) fn f64s<'a>(v: &'a [[f64; 3]]) -> impl ExactSizeIterator<Item = [u8; 8]> + 'a {
    v.as_flattened().iter().map(|x| x.to_le_bytes())
}

fn write_vtp_body<W: Write>(w: &mut W, snap: &ParticleSnapshot) -> io::Result<()> {
    write_point_cloud_vtp(
        w,
        (snap.t, snap.step),
        snap.x,
        "Scalars=\"|alpha|\" Vectors=\"velocity\"",
        |w| {
            write_binary_array(w, "Float64", "alpha", 3, f64s(snap.alpha))?;
            write_binary_array(w, "Float64", "velocity", 3, f64s(snap.velocity))?;
            write_binary_array(w, "Float64", "dalpha_dt", 3, f64s(snap.dalpha_dt))?;
            write_binary_array(
                w,
                "Float64",
                "sigma",
                1,
                snap.sigma.iter().map(|s| s.to_le_bytes()),
            )?;
            write_binary_array(
                w,
                "UInt64",
                "id",
                1,
                snap.id.iter().map(|i| i.to_le_bytes()),
            )?;
            write_binary_array(
                w,
                "Float64",
                "|alpha|",
                1,
                snap.alpha.iter().map(|a| {
                    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2])
                        .sqrt()
                        .to_le_bytes()
                }),
            )
        },
    )
}

/// Write a VTK XML PolyData file of the points `x`, one `Verts` cell per point: the field data
/// `TimeValue` and `step` of `(t, step)`, then the `<PointData {attributes}>` arrays that
/// `point_data` writes (one value or tuple per point), the points and the cells.
pub(super) fn write_point_cloud_vtp<W: Write>(
    w: &mut W,
    (t, step): (f64, u64),
    x: &[[f64; 3]],
    attributes: &str,
    point_data: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    let n = x.len();
    i64::try_from(n).map_err(io::Error::other)?;
    write!(
        w,
        "<?xml version=\"1.0\"?>\n\
         <VTKFile type=\"PolyData\" version=\"1.0\" byte_order=\"LittleEndian\" header_type=\"UInt64\">\n\
         \x20 <PolyData>\n"
    )?;
    write_time_field_data(w, t, step)?;
    write!(
        w,
        "    <Piece NumberOfPoints=\"{n}\" NumberOfVerts=\"{n}\" NumberOfLines=\"0\" NumberOfStrips=\"0\" NumberOfPolys=\"0\">\n\
         \x20     <PointData {attributes}>\n"
    )?;
    point_data(w)?;
    w.write_all(b"      </PointData>\n      <Points>\n")?;
    write_binary_array(w, "Float64", "Points", 3, f64s(x))?;
    // One vertex cell per point: connectivity 0..n, offsets (cell ends) 1..=n.
    w.write_all(b"      </Points>\n      <Verts>\n")?;
    write_binary_array(
        w,
        "Int64",
        "connectivity",
        1,
        (0..n).map(|i| (i as i64).to_le_bytes()),
    )?;
    write_binary_array(
        w,
        "Int64",
        "offsets",
        1,
        (1..n + 1).map(|i| (i as i64).to_le_bytes()),
    )?;
    w.write_all(b"      </Verts>\n    </Piece>\n  </PolyData>\n</VTKFile>\n")
}

/// Bytes of a `.vtp` of `n` points written by [`write_point_cloud_vtp`] whose point data are
/// arrays of `point_bytes` bytes per point each: every array (those, Points, connectivity,
/// offsets) is its byte count and values, base64-encoded.
pub(super) fn point_cloud_vtp_bytes(n: usize, point_bytes: &[u64]) -> u64 {
    let n = n as u64;
    point_bytes
        .iter()
        .chain(&[24, 8, 8])
        .map(|bytes| 4 * (8 + n * bytes).div_ceil(3))
        .sum()
}

/// Disk bytes of one snapshot of `n` particles, its collection file aside: the `.npz` (14
/// numbers of 8 bytes per particle) and the `.vtp` (its nine arrays base64-encoded, 4/3 of 136
/// bytes per particle), with 4 KiB of headers each.
pub fn snapshot_disk_bytes(n: usize) -> u64 {
    // The vtp's point data: alpha, velocity, dalpha_dt, sigma, id, |alpha|.
    let vtp = point_cloud_vtp_bytes(n, &[24, 24, 24, 8, 8, 8]);
    112 * n as u64 + vtp + 2 * 4096
}

/// Write snapshot `snap` of the particles: `<run_dir>/snapshots/particles-<step:08>.npz`
/// and `.vtp` (see the module docs for their contents), then rewrite
/// `<run_dir>/snapshots/particles.pvd` so that it lists every snapshot in
/// the folder, sorted by step, with its time. Each file is written
/// atomically; an existing snapshot of the same step is replaced. The
/// folder is created if needed. Returns the path of the `.npz`.
///
/// Errors: arrays of different lengths or a non-finite `t` (nothing is
/// written then), or any I/O failure, naming the file concerned.
pub fn write_particle_snapshot(
    run_dir: &Path,
    snap: &ParticleSnapshot,
) -> Result<PathBuf, OutputError> {
    let dir = run_dir.join(SNAPSHOTS_DIR);
    let stem = stem(snap.step);
    let npz_path = dir.join(format!("{stem}.npz"));
    let vtp_path = dir.join(format!("{stem}.vtp"));
    validate(&npz_path, snap)?;
    fs::create_dir_all(&dir).map_err(|e| OutputError::io("create directory", &dir, e))?;
    write_atomic_with(&npz_path, |w, tmp| write_snapshot_npz(w, tmp, snap))?;
    write_atomic_with(&vtp_path, |w, tmp| {
        write_vtp_body(w, snap).map_err(|e| OutputError::io("write", tmp, e))
    })?;
    SERIES.rewrite_pvd(&dir, snap.step, snap.t)?;
    Ok(npz_path)
}

#[cfg(test)]
mod tests {
    use super::super::tests::list as names;
    use super::super::tests::Mix;
    use super::super::vtk::{attribute, base64_encode};
    use super::*;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine as _;
    use std::collections::BTreeMap;

    fn random_f64(rng: &mut Mix) -> f64 {
        // any finite bit pattern, subnormals and negative zero included
        loop {
            let v = f64::from_bits(rng.next());
            if v.is_finite() {
                return v;
            }
        }
    }

    fn random_snapshot(n: usize, seed: u64, step: u64, t: f64) -> OwnedParticleSnapshot {
        let mut rng = Mix(seed);
        let vec3 = |rng: &mut Mix| -> Vec<[f64; 3]> {
            (0..n)
                .map(|_| [random_f64(rng), random_f64(rng), random_f64(rng)])
                .collect()
        };
        let x = vec3(&mut rng);
        // modest strengths so that |alpha| is finite and checkable
        let alpha: Vec<[f64; 3]> = (0..n)
            .map(|_| {
                let mut c = || (rng.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                [c(), c(), c()]
            })
            .collect();
        let velocity = vec3(&mut rng);
        let dalpha_dt = vec3(&mut rng);
        let sigma = (0..n).map(|_| random_f64(&mut rng)).collect();
        let id = (0..n).map(|_| rng.next()).collect();
        OwnedParticleSnapshot {
            t,
            step,
            x,
            alpha,
            sigma,
            id,
            velocity,
            dalpha_dt,
        }
    }

    fn bits3(v: &[[f64; 3]]) -> Vec<u64> {
        v.as_flattened().iter().map(|x| x.to_bits()).collect()
    }

    fn assert_bit_equal(a: &OwnedParticleSnapshot, b: &OwnedParticleSnapshot) {
        assert_eq!(a.t.to_bits(), b.t.to_bits());
        assert_eq!(a.step, b.step);
        assert_eq!(bits3(&a.x), bits3(&b.x));
        assert_eq!(bits3(&a.alpha), bits3(&b.alpha));
        assert_eq!(bits3(&a.velocity), bits3(&b.velocity));
        assert_eq!(bits3(&a.dalpha_dt), bits3(&b.dalpha_dt));
        let s = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(s(&a.sigma), s(&b.sigma));
        assert_eq!(a.id, b.id);
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        BASE64
            .decode(&s)
            .unwrap_or_else(|e| panic!("not base64: {e}"))
    }

    /// `(attributes tag text, decoded payload)` of the DataArray named `name`,
    /// checking the UInt64 byte-count header.
    fn vtp_array(xml: &str, name: &str) -> (String, Vec<u8>) {
        let key = format!("Name=\"{name}\"");
        let start = xml.find(&key).unwrap_or_else(|| panic!("no array {name}"));
        let open = xml[..start].rfind("<DataArray").unwrap();
        let tag_end = start + xml[start..].find('>').unwrap();
        let close = tag_end + xml[tag_end..].find("</DataArray>").unwrap();
        let tag = xml[open..tag_end].to_string();
        assert!(tag.contains("format=\"binary\""), "{tag}");
        let raw = base64_decode(&xml[tag_end + 1..close]);
        let header = u64::from_le_bytes(raw[..8].try_into().unwrap());
        assert_eq!(header as usize, raw.len() - 8, "byte count of {name}");
        (tag, raw[8..].to_vec())
    }

    /// The text of the `.vtp` snapshot of `step` in the run directory `run`.
    fn read_vtp(run: &Path, step: u64) -> String {
        let name = format!("particles-{step:08}.vtp");
        fs::read_to_string(run.join(SNAPSHOTS_DIR).join(name)).unwrap()
    }

    fn le_f64(raw: &[u8]) -> Vec<u64> {
        raw.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()).to_bits())
            .collect()
    }

    fn le_u64(raw: &[u8]) -> Vec<u64> {
        raw.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn base64_matches_known_vectors() {
        for (input, expected) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xff, 0xfe, 0xfd, 0x00], "//79AA=="),
        ] {
            assert_eq!(base64_encode(input), expected);
            assert_eq!(base64_decode(expected), input);
        }
    }

    #[test]
    fn npz_round_trip_bit_exact() {
        let tmp = tempfile::tempdir().unwrap();
        let snap = random_snapshot(100, 1, 42, 0.123_456_789);
        let path = write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap();
        let dir = tmp.path().join(SNAPSHOTS_DIR);
        assert_eq!(path, dir.join("particles-00000042.npz"));
        assert_eq!(
            names(&dir),
            vec![
                "particles-00000042.npz",
                "particles-00000042.vtp",
                "particles.pvd"
            ]
        );
        let back = read_particle_snapshot(&path).unwrap();
        assert_bit_equal(&snap, &back);

        // independent check of names, dtypes and shapes with ndarray-npy
        let mut npz = NpzReader::new(File::open(&path).unwrap()).unwrap();
        let mut got = npz.names().unwrap();
        got.sort();
        assert_eq!(
            got,
            ["alpha", "dalpha_dt", "id", "sigma", "step", "t", "u", "x"]
        );
        let t: Array0<f64> = npz.by_name("t").unwrap();
        assert_eq!(t.shape(), &[] as &[usize]);
        assert_eq!(t[()].to_bits(), snap.t.to_bits());
        let step: Array0<u64> = npz.by_name("step").unwrap();
        assert_eq!(step[()], 42);
        for name in ["x", "alpha", "u", "dalpha_dt"] {
            let a: Array2<f64> = npz.by_name(name).unwrap();
            assert_eq!(a.shape(), &[100, 3], "{name}");
        }
        let u: Array2<f64> = npz.by_name("u").unwrap();
        assert_eq!(u[[7, 2]].to_bits(), snap.velocity[7][2].to_bits());
        let sigma: Array1<f64> = npz.by_name("sigma").unwrap();
        assert_eq!(sigma.shape(), &[100]);
        let id: Array1<u64> = npz.by_name("id").unwrap();
        assert_eq!(id.to_vec(), snap.id);
    }

    #[test]
    fn vtp_is_well_formed_and_decodes_to_the_same_values() {
        let tmp = tempfile::tempdir().unwrap();
        let n = 101; // odd: exercises base64 padding
        let snap = random_snapshot(n, 2, 7, -0.0);
        write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap();
        let xml = read_vtp(tmp.path(), 7);
        assert!(xml.starts_with("<?xml version=\"1.0\"?>\n<VTKFile type=\"PolyData\""));
        assert!(xml.contains("header_type=\"UInt64\""));
        assert!(xml.contains("byte_order=\"LittleEndian\""));
        assert!(xml.contains(&format!("NumberOfPoints=\"{n}\" NumberOfVerts=\"{n}\"")));
        assert!(xml.trim_end().ends_with("</VTKFile>"));
        assert_eq!(
            xml.matches("<DataArray").count(),
            xml.matches("</DataArray>").count()
        );

        let (tag, raw) = vtp_array(&xml, "Points");
        assert!(tag.contains("NumberOfComponents=\"3\"") && tag.contains("Float64"));
        assert_eq!(le_f64(&raw), bits3(&snap.x));
        for (name, v) in [
            ("alpha", &snap.alpha),
            ("velocity", &snap.velocity),
            ("dalpha_dt", &snap.dalpha_dt),
        ] {
            let (tag, raw) = vtp_array(&xml, name);
            assert!(tag.contains("NumberOfComponents=\"3\""), "{tag}");
            assert_eq!(le_f64(&raw), bits3(v), "{name}");
        }
        let (_, raw) = vtp_array(&xml, "sigma");
        let sigma_bits: Vec<u64> = snap.sigma.iter().map(|s| s.to_bits()).collect();
        assert_eq!(le_f64(&raw), sigma_bits);
        let (tag, raw) = vtp_array(&xml, "id");
        assert!(tag.contains("type=\"UInt64\""), "{tag}");
        assert_eq!(le_u64(&raw), snap.id);
        let (_, raw) = vtp_array(&xml, "|alpha|");
        let mags: Vec<f64> = raw
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        for (m, a) in mags.iter().zip(&snap.alpha) {
            let expected = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt();
            assert_eq!(m.to_bits(), expected.to_bits());
        }
        let (_, raw) = vtp_array(&xml, "connectivity");
        assert_eq!(le_u64(&raw), (0..n as u64).collect::<Vec<_>>());
        let (_, raw) = vtp_array(&xml, "offsets");
        assert_eq!(le_u64(&raw), (1..=n as u64).collect::<Vec<_>>());
        let (_, raw) = vtp_array(&xml, "TimeValue");
        assert_eq!(le_f64(&raw), vec![(-0.0f64).to_bits()]);
        let (_, raw) = vtp_array(&xml, "step");
        assert_eq!(le_u64(&raw), vec![7]);
    }

    #[test]
    fn large_arrays_span_several_encoder_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let n = crate::output::vtk::RAW_CHUNK_BYTES / 8 + 5;
        let snap = random_snapshot(n, 3, 1, 1.0);
        write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap();
        let xml = read_vtp(tmp.path(), 1);
        let (_, raw) = vtp_array(&xml, "Points");
        assert_eq!(le_f64(&raw), bits3(&snap.x));
        let (_, raw) = vtp_array(&xml, "id");
        assert_eq!(le_u64(&raw), snap.id);
    }

    fn pvd_entries(run: &Path) -> Vec<(f64, String)> {
        let text = fs::read_to_string(run.join(SNAPSHOTS_DIR).join(PARTICLES_PVD)).unwrap();
        assert!(text.contains("<VTKFile type=\"Collection\""));
        text.split("<DataSet")
            .skip(1)
            .map(|p| {
                let tag = &p[..p.find("/>").unwrap()];
                (
                    attribute(tag, "timestep").unwrap().parse().unwrap(),
                    attribute(tag, "file").unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn pvd_lists_each_step_once_sorted() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        let write = |step: u64, t: f64, seed: u64| {
            let s = random_snapshot(10, seed, step, t);
            write_particle_snapshot(run, &s.as_snapshot()).unwrap();
            s
        };
        write(10, 0.1, 1);
        assert_eq!(
            pvd_entries(run),
            vec![(0.1, "particles-00000010.vtp".to_string())]
        );
        write(20, 0.2, 2);
        // a resumed run writes step 10 again; an earlier run was killed while
        // writing step 30, leaving a temporary file
        fs::write(
            run.join(SNAPSHOTS_DIR)
                .join(".particles-00000030.vtp.tmp-99999"),
            "partial",
        )
        .unwrap();
        fs::write(
            run.join(SNAPSHOTS_DIR).join(".particles.pvd.tmp-99999"),
            "partial",
        )
        .unwrap();
        let again = write(10, 0.1, 3);
        let entries = pvd_entries(run);
        assert_eq!(
            entries,
            vec![
                (0.1, "particles-00000010.vtp".to_string()),
                (0.2, "particles-00000020.vtp".to_string()),
            ]
        );
        let back = read_particle_snapshot(&run.join(SNAPSHOTS_DIR).join("particles-00000010.npz"))
            .unwrap();
        assert_bit_equal(&again, &back);
        // only the snapshot files, no temporaries
        assert_eq!(
            names(&run.join(SNAPSHOTS_DIR)),
            vec![
                "particles-00000010.npz",
                "particles-00000010.vtp",
                "particles-00000020.npz",
                "particles-00000020.vtp",
                "particles.pvd"
            ]
        );

        // a lost collection file is rebuilt from the snapshots' npz times,
        // and steps sort numerically (9 before 10), times exactly
        fs::remove_file(run.join(SNAPSHOTS_DIR).join(PARTICLES_PVD)).unwrap();
        write(9, 1.0 / 3.0, 4);
        assert_eq!(
            pvd_entries(run),
            vec![
                (1.0 / 3.0, "particles-00000009.vtp".to_string()),
                (0.1, "particles-00000010.vtp".to_string()),
                (0.2, "particles-00000020.vtp".to_string()),
            ]
        );
        // a snapshot whose vtp is gone drops out of the collection
        fs::remove_file(run.join(SNAPSHOTS_DIR).join("particles-00000020.vtp")).unwrap();
        write(30, 0.3, 5);
        let files: Vec<String> = pvd_entries(run).into_iter().map(|e| e.1).collect();
        assert_eq!(
            files,
            [
                "particles-00000009.vtp",
                "particles-00000010.vtp",
                "particles-00000030.vtp"
            ]
        );
    }

    #[test]
    fn empty_snapshot_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let snap = OwnedParticleSnapshot {
            t: 2.5,
            step: 3,
            ..Default::default()
        };
        let path = write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap();
        let back = read_particle_snapshot(&path).unwrap();
        assert_eq!(back, snap);
        assert!(back.is_empty());
        let mut npz = NpzReader::new(File::open(&path).unwrap()).unwrap();
        let x: Array2<f64> = npz.by_name("x").unwrap();
        assert_eq!(x.shape(), &[0, 3]);
        let xml = read_vtp(tmp.path(), 3);
        let (_, raw) = vtp_array(&xml, "Points");
        assert!(raw.is_empty());
    }

    #[test]
    fn inconsistent_lengths_and_bad_time_are_rejected_before_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut snap = random_snapshot(5, 4, 1, 0.5);
        snap.sigma.pop();
        let err = write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("particles-00000001.npz") && msg.contains("sigma"),
            "{msg}"
        );
        let snap = random_snapshot(5, 4, 1, f64::NAN);
        assert!(write_particle_snapshot(tmp.path(), &snap.as_snapshot()).is_err());
        assert!(!tmp.path().join(SNAPSHOTS_DIR).exists());
    }

    #[test]
    fn read_rejects_missing_file_and_wrong_shapes() {
        let tmp = tempfile::tempdir().unwrap();
        let err = read_particle_snapshot(&tmp.path().join("nope.npz")).unwrap_err();
        assert!(err.to_string().contains("nope.npz"), "{err}");

        // x of shape (n, 2) instead of (n, 3)
        let p = tmp.path().join("bad.npz");
        let mut npz = NpzWriter::new(File::create(&p).unwrap());
        npz.add_array("t", &arr0(0.0f64)).unwrap();
        npz.add_array("step", &arr0(1i64)).unwrap();
        npz.add_array("sigma", &Array1::<f64>::zeros(2)).unwrap();
        npz.add_array("id", &Array1::<i64>::zeros(2)).unwrap();
        for name in ["alpha", "u", "dalpha_dt"] {
            npz.add_array(name, &Array2::<f64>::zeros((2, 3))).unwrap();
        }
        npz.add_array("x", &Array2::<f64>::zeros((2, 2))).unwrap();
        npz.finish().unwrap();
        let err = read_particle_snapshot(&p).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bad.npz") && msg.contains("x"), "{msg}");
    }

    #[test]
    fn attribute_parsing() {
        let tag = r#" timestep="1.5" group="" part='0' file="a.vtp" "#;
        assert_eq!(attribute(tag, "timestep"), Some("1.5"));
        assert_eq!(attribute(tag, "file"), Some("a.vtp"));
        assert_eq!(attribute(tag, "part"), Some("0"));
        assert_eq!(attribute(tag, "group"), Some(""));
        assert_eq!(attribute(tag, "step"), None);
        assert_eq!(SERIES.step_of_file_name("particles-00000012.vtp"), Some(12));
        assert_eq!(
            SERIES.step_of_file_name("particles-123456789.vtp"),
            Some(123_456_789)
        );
        assert_eq!(
            SERIES.step_of_file_name(".particles-00000012.vtp.tmp-1"),
            None
        );
        assert_eq!(SERIES.step_of_file_name("particles-.vtp"), None);
        assert_eq!(SERIES.step_of_file_name("particles.pvd"), None);
    }

    /// Parse the `.vtp` and `.pvd` with Python's `xml.etree` and decode the
    /// base64 payloads with the standard library, as an independent reader.
    /// Skipped when `python3` is not on the PATH.
    #[test]
    fn python_xml_parser_reads_vtp_and_pvd() {
        let tmp = tempfile::tempdir().unwrap();
        let snap = random_snapshot(100, 5, 11, 0.75);
        write_particle_snapshot(tmp.path(), &snap.as_snapshot()).unwrap();
        let dir = tmp.path().join(SNAPSHOTS_DIR);
        let script = r#"
import base64, struct, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
pvd = ET.parse(d + "/particles.pvd").getroot()
assert pvd.tag == "VTKFile" and pvd.get("type") == "Collection"
ds = pvd.findall("./Collection/DataSet")
print("pvd", len(ds), ds[0].get("file"), float(ds[0].get("timestep")))
root = ET.parse(d + "/" + ds[0].get("file")).getroot()
assert root.get("header_type") == "UInt64" and root.get("byte_order") == "LittleEndian"
piece = root.find("./PolyData/Piece")
print("points", piece.get("NumberOfPoints"), piece.get("NumberOfVerts"))
codes = {"Float64": "d", "UInt64": "Q", "Int64": "q"}
for a in root.iter("DataArray"):
    raw = base64.b64decode("".join(a.text.split()), validate=True)
    (nbytes,) = struct.unpack("<Q", raw[:8])
    assert nbytes == len(raw) - 8, a.get("Name")
    vals = struct.unpack("<%d%s" % (nbytes // 8, codes[a.get("type")]), raw[8:])
    print(a.get("Name"), len(vals), int(a.get("NumberOfComponents", "1")), repr(vals[-1]))
"#;
        let out = match std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&dir)
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                eprintln!("python3 not available ({e}); skipping");
                return;
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "python failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], "pvd 1 particles-00000011.vtp 0.75");
        assert_eq!(lines[1], "points 100 100");
        // name -> (values, components, last value)
        let arrays: BTreeMap<&str, (usize, usize, &str)> = lines[2..]
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                assert_eq!(f.len(), 4, "{l}");
                (f[0], (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3]))
            })
            .collect();
        let float = |name: &str, count: usize, comps: usize, last: f64| {
            let (c, k, v) = arrays[name];
            assert_eq!((c, k), (count, comps), "{name}");
            assert_eq!(
                v.parse::<f64>().unwrap().to_bits(),
                last.to_bits(),
                "{name}"
            );
        };
        float("TimeValue", 1, 1, 0.75);
        float("Points", 300, 3, snap.x[99][2]);
        float("alpha", 300, 3, snap.alpha[99][2]);
        float("velocity", 300, 3, snap.velocity[99][2]);
        float("dalpha_dt", 300, 3, snap.dalpha_dt[99][2]);
        float("sigma", 100, 1, snap.sigma[99]);
        let a = snap.alpha[99];
        float(
            "|alpha|",
            100,
            1,
            (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt(),
        );
        assert_eq!(arrays["step"], (1, 1, "11"));
        assert_eq!(arrays["id"], (100, 1, snap.id[99].to_string().as_str()));
        assert_eq!(arrays["connectivity"], (100, 1, "99"));
        assert_eq!(arrays["offsets"], (100, 1, "100"));
        assert_eq!(arrays.len(), 11);
    }
}
