//! Body files (docs/physics.md §11.5): tables of `m x y z vx vy vz` per line (the format of the
//! seeds' galaxy data) and standard big-endian Tipsy files (header: time f64, n, ndim, ngas,
//! ndark, nstar as i32, padding; then gas, dark and star records of f32). Both are read as
//! initial conditions and written as snapshots; errors name the file and the line or record.
//!
//! Tipsy layout (big-endian, "standard" or XDR Tipsy, as Bonsai and ChaNGa write it): a header
//! of `time` (f64), `nbodies`, `ndim`, `nsph`, `ndark`, `nstar` (i32) and 4 bytes of padding
//! (32 bytes), then `nsph` gas records of 12 f32 (mass, pos 3, vel 3, rho, temp, hsmooth,
//! metals, phi), `ndark` dark records of 9 f32 (mass, pos 3, vel 3, eps, phi) and `nstar` star
//! records of 11 f32 (mass, pos 3, vel 3, metals, tform, eps, phi). Files written by older
//! tools without the padding (a 28-byte header) are read too when the file's length says so
//! (its length is then exactly 4 bytes short of the padded layout). Gas particles are refused.

use super::bodies::{BodySet, Component};
use super::GravityError;
use crate::output::{write_atomic_with, OutputError};
use std::io::{self, Write};
use std::path::Path;

/// The table's columns, in order.
const TABLE_COLUMNS: [&str; 7] = ["m", "x", "y", "z", "vx", "vy", "vz"];

/// Bytes of the padded Tipsy header (time, six i32 counts and padding).
pub const TIPSY_HEADER_BYTES: u64 = 32;
/// Bytes of a Tipsy gas record (12 f32).
pub const TIPSY_GAS_BYTES: u64 = 48;
/// Bytes of a Tipsy dark-matter record (9 f32).
pub const TIPSY_DARK_BYTES: u64 = 36;
/// Bytes of a Tipsy star record (11 f32).
pub const TIPSY_STAR_BYTES: u64 = 44;

fn input_error(path: &Path, line: usize, message: impl Into<String>) -> GravityError {
    GravityError::Input {
        file: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, GravityError> {
    std::fs::read(path).map_err(|source| GravityError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks a body read from line or record `line` of `path`: mass finite and ≥ 0, position and
/// velocity finite; `values` are `m x y z vx vy vz`, named by [`TABLE_COLUMNS`].
fn check_values(
    path: &Path,
    line: usize,
    what: &str,
    values: &[f64; 7],
) -> Result<(), GravityError> {
    for (k, v) in values.iter().enumerate() {
        if !v.is_finite() {
            return Err(input_error(
                path,
                line,
                format!(
                    "{what} {} ({}) is {v}; every value must be finite",
                    k + 1,
                    TABLE_COLUMNS[k]
                ),
            ));
        }
    }
    if values[0] < 0.0 {
        return Err(input_error(
            path,
            line,
            format!("negative mass {}; a mass must be ≥ 0", values[0]),
        ));
    }
    Ok(())
}

/// Reads a body table: one body per non-empty line, `m x y z vx vy vz` separated by white space;
/// `#` starts a comment. Components are `Body`, galaxy 0.
///
/// Errors name the file and the 1-based line: a line without exactly seven numbers, a field that
/// is not a number (naming its column), a value that is not finite, a negative mass; a file
/// without bodies (line 0).
pub fn read_table(path: &Path) -> Result<BodySet, GravityError> {
    Ok(read_table_with_lines(path)?.0)
}

/// [`read_table`], with the 1-based line of each body (for messages about a body).
pub fn read_table_with_lines(path: &Path) -> Result<(BodySet, Vec<usize>), GravityError> {
    let bytes = read_bytes(path)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| input_error(path, 0, format!("the table is not UTF-8 text: {e}")))?;
    let mut bodies = BodySet::default();
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let data = raw.split('#').next().unwrap_or("");
        let fields: Vec<&str> = data.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        if fields.len() != TABLE_COLUMNS.len() {
            return Err(input_error(
                path,
                line,
                format!(
                    "expected 7 numbers (m x y z vx vy vz), found {} field(s)",
                    fields.len()
                ),
            ));
        }
        let mut values = [0.0; 7];
        for (k, field) in fields.iter().enumerate() {
            values[k] = field.parse::<f64>().map_err(|_| {
                input_error(
                    path,
                    line,
                    format!(
                        "column {} ({}): {field:?} is not a number",
                        k + 1,
                        TABLE_COLUMNS[k]
                    ),
                )
            })?;
        }
        check_values(path, line, "column", &values)?;
        let [m, x, y, z, vx, vy, vz] = values;
        bodies.push(m, [x, y, z], [vx, vy, vz], Component::Body, 0);
        lines.push(line);
    }
    if bodies.is_empty() {
        return Err(input_error(
            path,
            0,
            "no bodies: the table has no data lines",
        ));
    }
    Ok((bodies, lines))
}

/// At softening 0, refuses two bodies of a file at one position (their force is infinite),
/// naming the file and both lines (a table) or records (Tipsy, `lines[i]` = i + 1).
pub fn check_coincident(
    path: &Path,
    bodies: &BodySet,
    lines: &[usize],
    softening: f64,
) -> Result<(), GravityError> {
    if softening > 0.0 {
        return Ok(());
    }
    match crate::summation::interaction::first_coincident(&bodies.x) {
        Some((a, b)) => Err(input_error(
            path,
            lines[b],
            format!(
                "this body is at {:?}, as the one of line {}: with softening 0 their force is \
                 infinite; set gravity.softening > 0 or move one",
                bodies.x[b], lines[a]
            ),
        )),
        None => Ok(()),
    }
}

/// Writes `bodies` as a table to `w`: a `#` header naming the columns, then one line per body
/// with every number in the shortest form that reads back to the same f64.
pub fn write_table_to<W: Write>(w: &mut W, bodies: &BodySet) -> io::Result<()> {
    writeln!(w, "# {}", TABLE_COLUMNS.join(" "))?;
    for i in 0..bodies.len() {
        let (x, v) = (bodies.x[i], bodies.v[i]);
        writeln!(
            w,
            "{:e} {:e} {:e} {:e} {:e} {:e} {:e}",
            bodies.mass[i], x[0], x[1], x[2], v[0], v[1], v[2]
        )?;
    }
    Ok(())
}

/// Writes `bodies` as a table (full f64 precision, so a table read back is bit-identical),
/// atomically (a temporary file renamed into place).
pub fn write_table(path: &Path, bodies: &BodySet) -> Result<(), GravityError> {
    bodies.check()?;
    write_atomic_with(path, |w, _| {
        write_table_to(w, bodies).map_err(|e| OutputError::io("write", path, e))
    })?;
    Ok(())
}

/// The header of a Tipsy file.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TipsyHeader {
    time: f64,
    nsph: u64,
    ndark: u64,
    nstar: u64,
}

/// Big-endian i32 at `at`.
fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Big-endian f32 at `at`, as f64.
fn be_f32(bytes: &[u8], at: usize) -> f64 {
    f64::from(f32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()))
}

/// Reads and checks the header; returns it and the header's length (32 or 28 bytes).
fn read_tipsy_header(path: &Path, bytes: &[u8]) -> Result<(TipsyHeader, u64), GravityError> {
    let header_error = |message: String| input_error(path, 0, message);
    if bytes.len() < 28 {
        return Err(header_error(format!(
            "a Tipsy file starts with a header of 32 bytes; this file has only {}",
            bytes.len()
        )));
    }
    let time = f64::from_be_bytes(bytes[0..8].try_into().unwrap());
    let counts: Vec<i32> = (0..5).map(|k| be_i32(bytes, 8 + 4 * k)).collect();
    let [nbodies, ndim, nsph, ndark, nstar] =
        [counts[0], counts[1], counts[2], counts[3], counts[4]];
    if !time.is_finite() {
        return Err(header_error(format!("the time in the header is {time}")));
    }
    if ndim != 3 {
        return Err(header_error(format!(
            "ndim is {ndim}; only 3-dimensional Tipsy files are read (is it a little-endian \
             file? vpm reads big-endian, standard Tipsy)"
        )));
    }
    if nbodies < 0 || nsph < 0 || ndark < 0 || nstar < 0 {
        return Err(header_error(format!(
            "negative counts in the header (nbodies {nbodies}, nsph {nsph}, ndark {ndark}, \
             nstar {nstar})"
        )));
    }
    if nsph > 0 {
        return Err(header_error(format!(
            "Tipsy gas particles are not supported: the file has {nsph} gas particle(s); \
             gravity runs read dark-matter and star particles only"
        )));
    }
    let (nsph, ndark, nstar) = (nsph as u64, ndark as u64, nstar as u64);
    if nsph + ndark + nstar != nbodies as u64 {
        return Err(header_error(format!(
            "nbodies {nbodies} is not nsph + ndark + nstar = {nsph} + {ndark} + {nstar}"
        )));
    }
    let records = nsph * TIPSY_GAS_BYTES + ndark * TIPSY_DARK_BYTES + nstar * TIPSY_STAR_BYTES;
    let len = bytes.len() as u64;
    let header_len = if len == TIPSY_HEADER_BYTES + records {
        TIPSY_HEADER_BYTES
    } else if len == TIPSY_HEADER_BYTES - 4 + records {
        TIPSY_HEADER_BYTES - 4
    } else {
        return Err(header_error(format!(
            "the file has {len} bytes but its header ({ndark} dark, {nstar} star particles) \
             needs {} (32-byte header) or {} (28-byte header without padding): truncated, or \
             not a big-endian Tipsy file",
            TIPSY_HEADER_BYTES + records,
            TIPSY_HEADER_BYTES - 4 + records
        )));
    };
    Ok((
        TipsyHeader {
            time,
            nsph,
            ndark,
            nstar,
        },
        header_len,
    ))
}

/// Reads a big-endian Tipsy file: dark-matter and star records become bodies (dark: `Halo`,
/// star: `Body`), and the time in its header is returned; gas particles are refused, saying so.
///
/// Errors name the file and the record (1-based over all records, in file order; 0 for the
/// header): a gas particle count, ndim ≠ 3, counts that do not add up, a file length that does
/// not match the header, a negative mass or a non-finite value.
pub fn read_tipsy(path: &Path) -> Result<(BodySet, f64), GravityError> {
    let bytes = read_bytes(path)?;
    let (header, header_len) = read_tipsy_header(path, &bytes)?;
    let mut bodies = BodySet::with_capacity((header.ndark + header.nstar) as usize);
    let mut at = header_len as usize;
    let groups = [
        (header.ndark, TIPSY_DARK_BYTES, Component::Halo, "dark"),
        (header.nstar, TIPSY_STAR_BYTES, Component::Body, "star"),
    ];
    let mut record = header.nsph as usize;
    for (count, size, component, kind) in groups {
        for _ in 0..count {
            record += 1;
            let values: [f64; 7] = std::array::from_fn(|k| be_f32(&bytes, at + 4 * k));
            check_values(path, record, &format!("{kind} record field"), &values)?;
            let [m, x, y, z, vx, vy, vz] = values;
            bodies.push(m, [x, y, z], [vx, vy, vz], component, 0);
            at += size as usize;
        }
    }
    Ok((bodies, header.time))
}

/// `v` as an f32, or an error naming the body when it does not fit one.
fn to_f32(v: f64, body: usize) -> io::Result<f32> {
    let f = v as f32;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("body {body}: {v:e} does not fit a Tipsy f32"),
        ))
    }
}

/// Bytes of a Tipsy file of `n` bodies, `halo` of them dark matter.
pub fn tipsy_bytes(n: usize, halo: usize) -> u64 {
    TIPSY_HEADER_BYTES + halo as u64 * TIPSY_DARK_BYTES + (n - halo) as u64 * TIPSY_STAR_BYTES
}

/// Writes `bodies` at time `t` as a big-endian Tipsy file to `w`: halo bodies as dark matter,
/// then the others as stars (metals and tform 0), each with softening `softening` and φ = 0.
/// A value that does not fit an f32 is an `InvalidData` error naming the body.
pub fn write_tipsy_to<W: Write>(
    w: &mut W,
    bodies: &BodySet,
    t: f64,
    softening: f64,
) -> io::Result<()> {
    let is_dark = |i: &usize| bodies.component[*i] == Component::Halo;
    let dark: Vec<usize> = (0..bodies.len()).filter(is_dark).collect();
    let count = |n: usize| {
        i32::try_from(n).map_err(|_| io::Error::other(format!("{n} bodies are too many for Tipsy")))
    };
    w.write_all(&t.to_be_bytes())?;
    for c in [
        count(bodies.len())?,
        3,
        0,
        count(dark.len())?,
        count(bodies.len() - dark.len())?,
        0,
    ] {
        w.write_all(&c.to_be_bytes())?;
    }
    let eps = to_f32(softening, 0)?;
    let stars = (0..bodies.len()).filter(|i| !is_dark(i));
    for (i, star) in dark
        .iter()
        .copied()
        .map(|i| (i, false))
        .chain(stars.map(|i| (i, true)))
    {
        let (x, v) = (bodies.x[i], bodies.v[i]);
        let mut record = vec![bodies.mass[i], x[0], x[1], x[2], v[0], v[1], v[2]];
        if star {
            record.extend([0.0, 0.0]); // metals, tform
        }
        for value in record {
            w.write_all(&to_f32(value, i)?.to_be_bytes())?;
        }
        w.write_all(&eps.to_be_bytes())?;
        w.write_all(&0f32.to_be_bytes())?; // phi
    }
    Ok(())
}

/// Writes `bodies` at time `t` as a big-endian Tipsy file (halo bodies as dark matter, the others
/// as stars, softening ε in each record), atomically.
pub fn write_tipsy(
    path: &Path,
    bodies: &BodySet,
    t: f64,
    softening: f64,
) -> Result<(), GravityError> {
    bodies.check()?;
    write_atomic_with(path, |w, _| {
        write_tipsy_to(w, bodies, t, softening).map_err(|e| OutputError::io("write", path, e))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BodySet {
        let mut b = BodySet::default();
        b.push(0.1, [1.0, -2.5, 1e-3], [0.3, 0.0, -0.7], Component::Disk, 0);
        b.push(
            1.0 / 3.0,
            [-0.0, 1e300, -7.25],
            [1e-310, 2.0, 3.0],
            Component::Halo,
            1,
        );
        b.push(
            0.0,
            [0.5, 0.25, 0.125],
            [1.0, -1.0, 0.5],
            Component::Bulge,
            1,
        );
        b
    }

    fn message(e: GravityError) -> String {
        e.to_string()
    }

    #[test]
    fn table_round_trips_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bodies.txt");
        let b = sample();
        write_table(&path, &b).unwrap();
        let back = read_table(&path).unwrap();
        let bits = |v: &[[f64; 3]]| {
            v.as_flattened()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&back.x), bits(&b.x));
        assert_eq!(bits(&back.v), bits(&b.v));
        let mb = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(mb(&back.mass), mb(&b.mass));
        assert!(back.component.iter().all(|c| *c == Component::Body));
        assert!(back.galaxy.iter().all(|g| *g == 0));
        // no temporary file left
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn table_reads_comments_blank_lines_and_any_white_space() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.txt");
        std::fs::write(
            &path,
            "# seed format\n\n1 0 0 0 0 0 0\n  2\t1 2 3  4 5 6 # a comment\n",
        )
        .unwrap();
        let b = read_table(&path).unwrap();
        assert_eq!(b.mass, vec![1.0, 2.0]);
        assert_eq!(b.v[1], [4.0, 5.0, 6.0]);
    }

    #[test]
    fn table_errors_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.txt");
        let good = "1 0 0 0 0 0 0\n";
        for (line, expected) in [
            (
                "1 2 3 4 5\n",
                "bad.txt:3: expected 7 numbers (m x y z vx vy vz), found 5",
            ),
            (
                "1 2 3 4 5 6 7 8\n",
                "bad.txt:3: expected 7 numbers (m x y z vx vy vz), found 8",
            ),
            (
                "1 2 3 4 x5 6 7\n",
                "bad.txt:3: column 5 (vx): \"x5\" is not a number",
            ),
            ("-1 2 3 4 5 6 7\n", "bad.txt:3: negative mass -1"),
            ("1 2 nan 4 5 6 7\n", "bad.txt:3: column 3 (y) is NaN"),
            ("1 2 3 4 5 6 inf\n", "bad.txt:3: column 7 (vz) is inf"),
        ] {
            std::fs::write(&path, format!("# header\n{good}{line}{good}")).unwrap();
            let msg = message(read_table(&path).unwrap_err());
            assert!(msg.contains(expected), "{msg}");
        }
        std::fs::write(&path, "# nothing\n\n").unwrap();
        let msg = message(read_table(&path).unwrap_err());
        assert!(msg.contains("bad.txt:0: no bodies"), "{msg}");
        let msg = message(read_table(&dir.path().join("missing.txt")).unwrap_err());
        assert!(msg.contains("missing.txt"), "{msg}");
    }

    #[test]
    fn tipsy_round_trips_to_f32_dark_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.tipsy");
        let mut b = sample();
        b.x[1][1] = 2.0; // 1e300 does not fit an f32
        write_tipsy(&path, &b, 1.25, 0.025).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, tipsy_bytes(3, 1));
        assert_eq!(be_i32(&bytes, 8), 3);
        assert_eq!(be_i32(&bytes, 12), 3);
        assert_eq!(
            (be_i32(&bytes, 16), be_i32(&bytes, 20), be_i32(&bytes, 24)),
            (0, 1, 2)
        );
        // the dark record's eps
        assert_eq!(be_f32(&bytes, 32 + 28), f64::from(0.025f32));
        let (back, t) = read_tipsy(&path).unwrap();
        assert_eq!(t, 1.25);
        // dark (halo) first, then the stars in order
        let order = [1, 0, 2];
        for (j, &i) in order.iter().enumerate() {
            let f = |v: f64| f64::from(v as f32);
            assert_eq!(back.mass[j], f(b.mass[i]));
            assert_eq!(back.x[j], b.x[i].map(f));
            assert_eq!(back.v[j], b.v[i].map(f));
        }
        assert_eq!(
            back.component,
            vec![Component::Halo, Component::Body, Component::Body]
        );
        // the same file without the header's padding reads the same
        let mut unpadded = bytes[..28].to_vec();
        unpadded.extend_from_slice(&bytes[32..]);
        std::fs::write(&path, &unpadded).unwrap();
        assert_eq!(read_tipsy(&path).unwrap(), (back, 1.25));
        // a value beyond f32 is refused, naming the body, and leaves no file
        let msg =
            message(write_tipsy(&dir.path().join("c.tipsy"), &sample(), 0.0, 0.0).unwrap_err());
        assert!(
            msg.contains("c.tipsy: body 1: 1e300 does not fit a Tipsy f32"),
            "{msg}"
        );
        assert!(!dir.path().join("c.tipsy").exists());
    }

    /// A Tipsy header with the given counts, padded.
    fn header(nbodies: i32, ndim: i32, nsph: i32, ndark: i32, nstar: i32) -> Vec<u8> {
        let mut h = 0.5f64.to_be_bytes().to_vec();
        for c in [nbodies, ndim, nsph, ndark, nstar, 0] {
            h.extend_from_slice(&c.to_be_bytes());
        }
        h
    }

    fn star(m: f32, x: f32) -> Vec<u8> {
        [m, x, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.01, 0.0]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect()
    }

    #[test]
    fn tipsy_errors_name_file_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tipsy");
        let check = |bytes: Vec<u8>, expected: &str| {
            std::fs::write(&path, bytes).unwrap();
            let msg = message(read_tipsy(&path).unwrap_err());
            assert!(msg.contains(expected), "{msg}");
        };
        let mut gas = header(1, 3, 1, 0, 0);
        gas.extend(vec![0u8; 48]);
        check(
            gas,
            "bad.tipsy:0: Tipsy gas particles are not supported: the file has 1 gas",
        );
        check(header(2, 2, 0, 0, 2), "bad.tipsy:0: ndim is 2");
        check(header(3, 3, 0, 0, 2), "bad.tipsy:0: nbodies 3 is not");
        let mut short = header(2, 3, 0, 0, 2);
        short.extend(star(1.0, 0.0));
        check(short, "bad.tipsy:0: the file has 76 bytes but its header");
        let mut file = header(3, 3, 0, 0, 3);
        file.extend(star(1.0, 0.0));
        file.extend(star(-1.0, 0.0));
        file.extend(star(1.0, 0.0));
        check(file, "bad.tipsy:2: negative mass -1");
        let mut file = header(2, 3, 0, 0, 2);
        file.extend(star(1.0, 0.0));
        file.extend(star(1.0, f32::NAN));
        check(file, "bad.tipsy:2: star record field 2 (x) is NaN");
        check(
            vec![0; 10],
            "bad.tipsy:0: a Tipsy file starts with a header",
        );
    }
}
