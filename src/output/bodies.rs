//! Body snapshots of a gravity run: `<run>/snapshots/bodies-<step:08>.*`
//! ([`postprocess::layout::bodies_stem`]), in the formats a case asks for ([`BodyFormat`]):
//!
//! * `.npz` (NumPy archive, as the particle snapshots): `mass` (n) f64, `x` and `v` (n, 3) f64,
//!   `component` and `galaxy` (n) u8 ([`crate::gravity::bodies::Component`]'s codes), `t` (0-d
//!   f64) and `step` (0-d u64). The pictures (postprocess) and [`read_body_snapshot`] read it;
//!   values come back bit for bit.
//! * `.vtp` (VTK PolyData for ParaView, one point and one vertex cell per body): point data
//!   `mass` (Float64), `velocity` (3 Float64), `component` and `galaxy` (UInt8), field data
//!   `TimeValue` and `step`; then `bodies.pvd`, the collection of every `bodies-*.vtp` in the
//!   folder, sorted by step, is rebuilt (as `particles.pvd` is: a rewritten step is never listed
//!   twice).
//! * `.tipsy`: big-endian Tipsy ([`crate::gravity::io::write_tipsy_to`]: halo bodies as dark
//!   matter first, then the others as stars; f32).
//! * `.txt`: a body table `m x y z vx vy vz` ([`crate::gravity::io::write_table_to`]), f64 exact.
//!
//! Every file is written atomically ([`super::write_atomic_with`]), npz first.

use std::fs;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

use ndarray::{arr0, Array0, Array1, ArrayView1, Ix0, Ix1};

use super::npz::{npz_err, npz_writer};
use super::snapshot::{
    add_npz, add_vec3_npz, check_len, f64s, open_npz, point_cloud_vtp_bytes, read_by_name,
    read_u64_array, read_vec3, write_point_cloud_vtp, SNAPSHOTS_DIR,
};
use super::vtk::{write_binary_array, Series};
use super::{write_atomic_with, OutputError};
use crate::gravity::bodies::{BodySet, Component};
use crate::gravity::io::{tipsy_bytes, write_table_to, write_tipsy_to};

/// The ParaView collection of the body snapshots, inside [`SNAPSHOTS_DIR`].
pub const BODIES_PVD: &str = "bodies.pvd";

/// The body snapshots' `.vtp` files, listed in [`BODIES_PVD`]; their stem is
/// [`postprocess::layout::bodies_stem`].
const SERIES: Series<'static> = Series {
    prefix: "bodies-",
    ext: ".vtp",
    pvd: BODIES_PVD,
};

/// A file format of the body snapshots (the case key `gravity.snapshot_formats` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BodyFormat {
    /// NumPy archive (f64, bit exact); the pictures are drawn from it.
    Npz,
    /// VTK PolyData for ParaView, with the `bodies.pvd` collection.
    Vtp,
    /// Big-endian Tipsy (f32).
    Tipsy,
    /// A text table `m x y z vx vy vz` per line (f64 exact).
    Table,
}

impl BodyFormat {
    /// Every format, with its name in a case file.
    pub const ALL: [(BodyFormat, &'static str); 4] = [
        (BodyFormat::Npz, "npz"),
        (BodyFormat::Vtp, "vtp"),
        (BodyFormat::Tipsy, "tipsy"),
        (BodyFormat::Table, "table"),
    ];

    /// The format named `name`; the error lists the names allowed.
    pub fn parse(name: &str) -> Result<BodyFormat, String> {
        BodyFormat::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(f, _)| *f)
            .ok_or_else(|| {
                format!(
                    "unknown body snapshot format {name:?}; allowed: {}",
                    BodyFormat::ALL.map(|(_, n)| n).join(", ")
                )
            })
    }

    /// Its name in a case file.
    pub fn as_str(self) -> &'static str {
        BodyFormat::ALL.iter().find(|(f, _)| *f == self).unwrap().1
    }

    /// The extension of its file, with the dot.
    pub fn extension(self) -> &'static str {
        match self {
            BodyFormat::Npz => ".npz",
            BodyFormat::Vtp => ".vtp",
            BodyFormat::Tipsy => ".tipsy",
            BodyFormat::Table => ".txt",
        }
    }
}

/// The path of the snapshot of `step` in `format` in the run directory `run_dir`.
pub fn body_snapshot_path(run_dir: &Path, step: u64, format: BodyFormat) -> PathBuf {
    run_dir.join(SNAPSHOTS_DIR).join(format!(
        "{}{}",
        postprocess::layout::bodies_stem(step),
        format.extension()
    ))
}

fn write_bodies_npz<W: Write + Seek>(
    w: W,
    path: &Path,
    (t, step): (f64, u64),
    bodies: &BodySet,
) -> Result<(), OutputError> {
    let n = bodies.len();
    let component: Vec<u8> = bodies.component.iter().map(|c| *c as u8).collect();
    let mut npz = npz_writer(w);
    add_npz(&mut npz, path, "t", &arr0(t), 1)?;
    add_npz(&mut npz, path, "step", &arr0(step), 1)?;
    add_npz(&mut npz, path, "mass", &ArrayView1::from(&bodies.mass), n)?;
    add_vec3_npz(&mut npz, path, "x", &bodies.x)?;
    add_vec3_npz(&mut npz, path, "v", &bodies.v)?;
    add_npz(
        &mut npz,
        path,
        "component",
        &ArrayView1::from(&component),
        n,
    )?;
    add_npz(
        &mut npz,
        path,
        "galaxy",
        &ArrayView1::from(&bodies.galaxy),
        n,
    )?;
    npz.finish().map_err(|e| npz_err("write", path, e))?;
    Ok(())
}

fn write_bodies_vtp<W: Write>(w: &mut W, (t, step): (f64, u64), b: &BodySet) -> io::Result<()> {
    let bytes = |v: &[u8]| v.iter().map(|c| [*c]).collect::<Vec<_>>().into_iter();
    let component: Vec<u8> = b.component.iter().map(|c| *c as u8).collect();
    write_point_cloud_vtp(
        w,
        (t, step),
        &b.x,
        "Scalars=\"mass\" Vectors=\"velocity\"",
        |w| {
            let mass = b.mass.iter().map(|m| m.to_le_bytes());
            write_binary_array(w, "Float64", "mass", 1, mass)?;
            write_binary_array(w, "Float64", "velocity", 3, f64s(&b.v))?;
            write_binary_array(w, "UInt8", "component", 1, bytes(&component))?;
            write_binary_array(w, "UInt8", "galaxy", 1, bytes(&b.galaxy))
        },
    )
}

/// Disk bytes of one body snapshot of `n` bodies in `formats` (the collection file aside): npz
/// 58 bytes a body, vtp its base64 arrays, Tipsy 44 bytes a body at most, the table 175 bytes a
/// body at most; 4 KiB of headers each.
pub fn body_snapshot_disk_bytes(n: usize, formats: &[BodyFormat]) -> u64 {
    formats
        .iter()
        .map(|f| {
            4096 + match f {
                BodyFormat::Npz => 58 * n as u64,
                BodyFormat::Vtp => point_cloud_vtp_bytes(n, &[8, 24, 1, 1]),
                BodyFormat::Tipsy => tipsy_bytes(n, 0),
                // Seven numbers of at most 24 characters and their separators.
                BodyFormat::Table => 175 * n as u64,
            }
        })
        .sum()
}

/// Writes the snapshot of `bodies` at step `step` and time `t` in each of `formats` (see the
/// module docs) into `<run_dir>/snapshots/` (created if needed), replacing a snapshot of the
/// same step; with [`BodyFormat::Vtp`] it then rebuilds `bodies.pvd`. `softening` goes into the
/// Tipsy records. Returns the paths written, in the order of `formats`.
///
/// Errors: a non-finite `t`, bodies whose arrays differ in length (nothing is written then), a
/// value beyond f32 in a Tipsy file, or an I/O failure, naming the file.
pub fn write_body_snapshot(
    run_dir: &Path,
    step: u64,
    t: f64,
    bodies: &BodySet,
    softening: f64,
    formats: &[BodyFormat],
) -> Result<Vec<PathBuf>, OutputError> {
    let dir = run_dir.join(SNAPSHOTS_DIR);
    let first = body_snapshot_path(run_dir, step, BodyFormat::Npz);
    if !t.is_finite() {
        return Err(OutputError::invalid(
            &first,
            format!("snapshot time t = {t} is not finite"),
        ));
    }
    let n = bodies.len();
    for (name, len) in [
        ("x", bodies.x.len()),
        ("v", bodies.v.len()),
        ("component", bodies.component.len()),
        ("galaxy", bodies.galaxy.len()),
    ] {
        check_len(&first, name, len, n)?;
    }
    fs::create_dir_all(&dir).map_err(|e| OutputError::io("create directory", &dir, e))?;
    let mut written = Vec::new();
    for &format in formats {
        let path = body_snapshot_path(run_dir, step, format);
        write_atomic_with(&path, |w, tmp| {
            let io_err = |e| OutputError::io("write", &path, e);
            match format {
                BodyFormat::Npz => write_bodies_npz(w, tmp, (t, step), bodies),
                BodyFormat::Vtp => write_bodies_vtp(w, (t, step), bodies).map_err(io_err),
                BodyFormat::Tipsy => write_tipsy_to(w, bodies, t, softening).map_err(io_err),
                BodyFormat::Table => write_table_to(w, bodies).map_err(io_err),
            }
        })?;
        if format == BodyFormat::Vtp {
            SERIES.rewrite_pvd(&dir, step, t)?;
        }
        written.push(path);
    }
    Ok(written)
}

/// Reads a body snapshot `.npz` written by [`write_body_snapshot`]: the bodies (bit for bit),
/// the time and the step. Errors name the file: a missing array, a wrong shape, an unknown
/// component code.
pub fn read_body_snapshot(path: &Path) -> Result<(BodySet, f64, u64), OutputError> {
    let mut npz = open_npz(path)?;
    let t: Array0<f64> = read_by_name::<f64, Ix0>(&mut npz, path, "t")?;
    let step: Array0<u64> = read_u64_array::<Ix0>(&mut npz, path, "step")?;
    let mass: Array1<f64> = read_by_name::<f64, Ix1>(&mut npz, path, "mass")?;
    let n = mass.len();
    let component: Array1<u8> = read_by_name::<u8, Ix1>(&mut npz, path, "component")?;
    check_len(path, "component", component.len(), n)?;
    let galaxy: Array1<u8> = read_by_name::<u8, Ix1>(&mut npz, path, "galaxy")?;
    check_len(path, "galaxy", galaxy.len(), n)?;
    let component = component
        .iter()
        .map(|&c| {
            Component::from_u8(c).ok_or_else(|| {
                OutputError::invalid(path, format!("unknown component code {c} (0 to 3 allowed)"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bodies = BodySet {
        mass: mass.to_vec(),
        x: read_vec3(&mut npz, path, "x", n)?,
        v: read_vec3(&mut npz, path, "v", n)?,
        component,
        galaxy: galaxy.to_vec(),
    };
    Ok((bodies, t.into_scalar(), step.into_scalar()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::list as names;
    use super::*;
    use crate::gravity::io::{read_table, read_tipsy};

    fn bodies(n: usize, shift: f64) -> BodySet {
        let mut b = BodySet::default();
        for i in 0..n {
            let f = i as f64 + shift;
            let c = Component::ALL[i % 4];
            b.push(
                0.5 + f / 7.0,
                [f, -f / 3.0, 1e-7 * f],
                [f.sin(), f.cos(), -0.0],
                c,
                (i % 2) as u8,
            );
        }
        b
    }

    #[test]
    fn formats_parse_and_name_the_allowed_values() {
        for (f, name) in BodyFormat::ALL {
            assert_eq!(BodyFormat::parse(name), Ok(f));
            assert_eq!(f.as_str(), name);
        }
        let e = BodyFormat::parse("vtk").unwrap_err();
        assert!(
            e.contains("\"vtk\"") && e.contains("npz, vtp, tipsy, table"),
            "{e}"
        );
    }

    #[test]
    fn every_format_is_written_and_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        let b = bodies(9, 0.25);
        let all = BodyFormat::ALL.map(|(f, _)| f);
        let paths = write_body_snapshot(run, 125, 1.5, &b, 0.01, &all).unwrap();
        let dir = run.join(SNAPSHOTS_DIR);
        assert_eq!(paths[0], dir.join("bodies-00000125.npz"));
        assert_eq!(
            names(&dir),
            [
                "bodies-00000125.npz",
                "bodies-00000125.tipsy",
                "bodies-00000125.txt",
                "bodies-00000125.vtp",
                "bodies.pvd"
            ]
        );
        assert_eq!(
            read_body_snapshot(&paths[0]).unwrap(),
            (b.clone(), 1.5, 125)
        );
        let table = read_table(&paths[3]).unwrap();
        assert_eq!((table.mass, table.x), (b.mass.clone(), b.x.clone()));
        let (tipsy, t) = read_tipsy(&paths[2]).unwrap();
        assert_eq!((tipsy.len(), t), (9, 1.5));
        // The estimate covers what was written.
        for (f, p) in all.iter().zip(&paths) {
            let size = fs::metadata(p).unwrap().len();
            let estimate = body_snapshot_disk_bytes(9, &[*f]);
            assert!(
                size <= estimate && estimate <= size + 4096 + 180 * 9,
                "{f:?}: {size} vs {estimate}"
            );
        }
        let xml = fs::read_to_string(&paths[1]).unwrap();
        for array in [
            "\"mass\"",
            "\"velocity\"",
            "\"component\"",
            "\"galaxy\"",
            "\"Points\"",
        ] {
            assert!(xml.contains(&format!("Name={array}")), "{array}");
        }
        assert!(xml.contains("type=\"UInt8\" Name=\"galaxy\""));
        // A larger snapshot's estimate is still an upper bound within a few per cent.
        let big = bodies(3000, 0.0);
        let p = write_body_snapshot(run, 1, 0.0, &big, 0.0, &[BodyFormat::Npz, BodyFormat::Vtp])
            .unwrap();
        let size: u64 = p.iter().map(|p| fs::metadata(p).unwrap().len()).sum();
        let estimate = body_snapshot_disk_bytes(3000, &[BodyFormat::Npz, BodyFormat::Vtp]);
        assert!(
            size <= estimate && estimate < size + 3 * 4096,
            "{size} vs {estimate}"
        );
    }

    #[test]
    fn pvd_lists_each_step_once_and_npz_only_writes_no_pvd() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        let vtp = [BodyFormat::Npz, BodyFormat::Vtp];
        write_body_snapshot(run, 20, 0.2, &bodies(3, 0.0), 0.0, &vtp).unwrap();
        write_body_snapshot(run, 10, 0.1, &bodies(3, 1.0), 0.0, &vtp).unwrap();
        write_body_snapshot(run, 20, 0.2, &bodies(3, 2.0), 0.0, &vtp).unwrap();
        let pvd = fs::read_to_string(run.join(SNAPSHOTS_DIR).join(BODIES_PVD)).unwrap();
        assert_eq!(pvd.matches("<DataSet").count(), 2, "{pvd}");
        assert!(
            pvd.find("bodies-00000010.vtp").unwrap() < pvd.find("bodies-00000020.vtp").unwrap()
        );
        let (b, _, _) = read_body_snapshot(&body_snapshot_path(run, 20, BodyFormat::Npz)).unwrap();
        assert_eq!(b, bodies(3, 2.0));

        let other = tempfile::tempdir().unwrap();
        write_body_snapshot(
            other.path(),
            3,
            0.0,
            &bodies(2, 0.0),
            0.0,
            &[BodyFormat::Npz],
        )
        .unwrap();
        assert_eq!(
            names(&other.path().join(SNAPSHOTS_DIR)),
            ["bodies-00000003.npz"]
        );
    }

    #[test]
    fn bad_input_is_refused_before_writing_and_bad_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        let mut b = bodies(3, 0.0);
        let e = write_body_snapshot(run, 1, f64::NAN, &b, 0.0, &[BodyFormat::Npz]).unwrap_err();
        assert!(e.to_string().contains("bodies-00000001.npz"), "{e}");
        b.galaxy.pop();
        let e = write_body_snapshot(run, 1, 0.0, &b, 0.0, &[BodyFormat::Npz]).unwrap_err();
        assert!(e.to_string().contains("galaxy"), "{e}");
        assert!(!run.join(SNAPSHOTS_DIR).exists());

        let e = read_body_snapshot(&run.join("missing.npz")).unwrap_err();
        assert!(e.to_string().contains("missing.npz"), "{e}");
        // an unknown component code
        fs::create_dir_all(run.join(SNAPSHOTS_DIR)).unwrap();
        let path = body_snapshot_path(run, 2, BodyFormat::Npz);
        let mut npz = ndarray_npy::NpzWriter::new(fs::File::create(&path).unwrap());
        npz.add_array("t", &arr0(0.0f64)).unwrap();
        npz.add_array("step", &arr0(2u64)).unwrap();
        npz.add_array("mass", &Array1::<f64>::ones(1)).unwrap();
        npz.add_array("x", &ndarray::Array2::<f64>::zeros((1, 3)))
            .unwrap();
        npz.add_array("v", &ndarray::Array2::<f64>::zeros((1, 3)))
            .unwrap();
        npz.add_array("component", &Array1::<u8>::from_elem(1, 7))
            .unwrap();
        npz.add_array("galaxy", &Array1::<u8>::zeros(1)).unwrap();
        npz.finish().unwrap();
        let e = read_body_snapshot(&path).unwrap_err();
        assert!(e.to_string().contains("unknown component code 7"), "{e}");
    }

    #[test]
    fn stem_is_the_layouts() {
        assert_eq!(SERIES.stem(42), postprocess::layout::bodies_stem(42));
    }
}
