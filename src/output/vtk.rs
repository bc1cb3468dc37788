//! VTK XML pieces shared by the files vpm writes for ParaView: inline binary `DataArray`s, the
//! `TimeValue`/`step` field data, and `.pvd` collections rebuilt from a folder's contents.
//!
//! Arrays are inline `format="binary"`: little-endian values preceded by a UInt64 byte count
//! (`header_type="UInt64"`), header and values base64-encoded as one stream, as VTK's own
//! writer does for uncompressed data.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::write::EncoderWriter;
use base64::Engine as _;

use super::npz::read_npz_time;
use super::{format_f64, write_atomic, OutputError};

/// Bytes handed to the base64 encoder at a time.
pub(crate) const RAW_CHUNK_BYTES: usize = 8 * 1536;

/// The standard base64 encoding (with `=` padding) of `bytes`, as VTK reads it.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// Write one inline binary `DataArray` element of `B`-byte values: the UInt64 byte count and
/// the little-endian values, base64-encoded together as one stream, in chunks.
pub(crate) fn write_binary_array<W, I, const B: usize>(
    w: &mut W,
    vtk_type: &str,
    name: &str,
    components: usize,
    values: I,
) -> io::Result<()>
where
    W: Write,
    I: ExactSizeIterator<Item = [u8; B]>,
{
    let n_bytes = (values.len() as u64) * B as u64;
    let tuples = if components > 1 {
        format!(" NumberOfComponents=\"{components}\"")
    } else {
        String::new()
    };
    write!(
        w,
        "        <DataArray type=\"{vtk_type}\" Name=\"{name}\"{tuples} format=\"binary\">\n          "
    )?;
    let mut enc = EncoderWriter::new(&mut *w, &BASE64);
    let mut raw: Vec<u8> = Vec::with_capacity(RAW_CHUNK_BYTES + B);
    raw.extend_from_slice(&n_bytes.to_le_bytes());
    for v in values {
        raw.extend_from_slice(&v);
        if raw.len() >= RAW_CHUNK_BYTES {
            enc.write_all(&raw)?;
            raw.clear();
        }
    }
    enc.write_all(&raw)?;
    enc.finish()?.write_all(b"\n        </DataArray>\n")
}

/// The `<FieldData>` element with the time (`TimeValue`, Float64, which ParaView shows as the
/// data set's time) and the step (UInt64).
pub(crate) fn write_time_field_data<W: Write>(w: &mut W, t: f64, step: u64) -> io::Result<()> {
    w.write_all(b"    <FieldData>\n")?;
    // FieldData arrays carry NumberOfTuples.
    for (vtk_type, name, bytes) in [
        ("Float64", "TimeValue", t.to_le_bytes()),
        ("UInt64", "step", step.to_le_bytes()),
    ] {
        let mut raw = 8u64.to_le_bytes().to_vec();
        raw.extend_from_slice(&bytes);
        let enc = base64_encode(&raw);
        write!(
            w,
            "      <DataArray type=\"{vtk_type}\" Name=\"{name}\" NumberOfTuples=\"1\" format=\"binary\">\n        "
        )?;
        w.write_all(enc.as_bytes())?;
        w.write_all(b"\n      </DataArray>\n")?;
    }
    w.write_all(b"    </FieldData>\n")
}

/// The value of attribute `name` in the tag text `tag` (`name="value"`).
pub(crate) fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = tag;
    while let Some(pos) = rest.find(name) {
        let before_ok = rest[..pos]
            .chars()
            .next_back()
            .is_some_and(char::is_whitespace);
        let after = rest[pos + name.len()..].trim_start();
        if before_ok {
            if let Some(after) = after.strip_prefix('=') {
                let after = after.trim_start();
                let quote = after.chars().next()?;
                if quote == '"' || quote == '\'' {
                    let value = &after[1..];
                    return value.find(quote).map(|end| &value[..end]);
                }
            }
        }
        rest = &rest[pos + name.len()..];
    }
    None
}

/// `file → time` for every `DataSet` entry of an existing collection file.
/// A missing or unreadable file gives an empty map (times are then read
/// from the data sets' companions).
fn read_pvd_times(path: &Path) -> BTreeMap<String, f64> {
    let mut times = BTreeMap::new();
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!("cannot read {}: {e}; rebuilding it", path.display());
            }
            return times;
        }
    };
    for piece in text.split("<DataSet").skip(1) {
        let Some(end) = piece.find('>') else { continue };
        let tag = &piece[..end];
        let file = attribute(tag, "file");
        let t = attribute(tag, "timestep").and_then(|s| s.trim().parse::<f64>().ok());
        if let (Some(file), Some(t)) = (file, t) {
            times.insert(file.to_string(), t);
        }
    }
    times
}

/// A series of VTK files `<prefix><step:08>.<ext>` in one folder and the collection file that
/// lists them.
pub(crate) struct Series<'a> {
    /// The file-name prefix, e.g. `particles-` or `spectral-`.
    pub prefix: &'a str,
    /// The data files' extension with its dot, e.g. `.vtp`.
    pub ext: &'a str,
    /// The collection file's name, e.g. `particles.pvd`.
    pub pvd: &'a str,
}

impl Series<'_> {
    /// `<prefix><step:08>` (the stem shared by a data file and its `.npz` companion).
    pub fn stem(&self, step: u64) -> String {
        format!("{}{step:08}", self.prefix)
    }

    /// The step of a file name `<prefix><digits><ext>`.
    pub fn step_of_file_name(&self, name: &str) -> Option<u64> {
        let digits = name.strip_prefix(self.prefix)?.strip_suffix(self.ext)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// Rebuild the collection file in `dir` from the data files present there, sorted by step;
    /// the file just written (`step`, `t`) takes its time from the caller, the others from the
    /// previous collection file, else from `time_of(stem)` (their `.npz` companion). Temporary
    /// files left in `dir` by interrupted writes of this series are removed.
    pub fn rewrite_pvd(&self, dir: &Path, step: u64, t: f64) -> Result<(), OutputError> {
        let pvd = dir.join(self.pvd);
        let known = read_pvd_times(&pvd);
        let mut entries: BTreeMap<u64, (String, f64)> = BTreeMap::new();
        let rd = fs::read_dir(dir).map_err(|e| OutputError::io("list directory", dir, e))?;
        // Temporary files are `.<name>.tmp-<pid>` ([`super::write_atomic`]): of data files and
        // of the collection file.
        let tmp_prefixes = [format!(".{}", self.prefix), format!(".{}.tmp-", self.pvd)];
        for de in rd {
            let de = de.map_err(|e| OutputError::io("list directory", dir, e))?;
            let name = de.file_name();
            let Some(name) = name.to_str() else { continue };
            if tmp_prefixes.iter().any(|p| name.starts_with(p.as_str())) && name.contains(".tmp-") {
                // temporary file of an interrupted write (ours are all renamed by now)
                tracing::info!("removing unfinished file {name}");
                let _ = fs::remove_file(de.path());
                continue;
            }
            let Some(s) = self.step_of_file_name(name) else {
                continue;
            };
            let time = if s == step {
                Some(t)
            } else if let Some(&t) = known.get(name) {
                Some(t)
            } else {
                let npz = dir.join(format!("{}.npz", name.trim_end_matches(self.ext)));
                match read_npz_time(&npz) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        tracing::warn!("leaving {name} out of {}: no time known ({e})", self.pvd);
                        None
                    }
                }
            };
            if let Some(time) = time.filter(|t| t.is_finite()) {
                // two names for one step (e.g. `particles-7.vtp` beside
                // `particles-00000007.vtp`): keep the canonical one
                let canonical = format!("{}{}", self.stem(s), self.ext);
                if name == canonical || !entries.contains_key(&s) {
                    entries.insert(s, (name.to_string(), time));
                }
            }
        }
        let mut text = String::from(
            "<?xml version=\"1.0\"?>\n\
             <VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"LittleEndian\">\n\
             \x20 <Collection>\n",
        );
        for (file, time) in entries.values() {
            text.push_str(&format!(
                "    <DataSet timestep=\"{}\" group=\"\" part=\"0\" file=\"{file}\"/>\n",
                format_f64(*time)
            ));
        }
        text.push_str("  </Collection>\n</VTKFile>\n");
        write_atomic(&pvd, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_parsing() {
        let tag = r#" timestep="1.5" group='' file="a b.vtp""#;
        assert_eq!(attribute(tag, "timestep"), Some("1.5"));
        assert_eq!(attribute(tag, "group"), Some(""));
        assert_eq!(attribute(tag, "file"), Some("a b.vtp"));
        assert_eq!(attribute(tag, "part"), None);
        // `step` inside `timestep` is not the attribute `step`.
        assert_eq!(attribute(tag, "step"), None);
    }

    #[test]
    fn series_names() {
        let s = Series {
            prefix: "spectral-",
            ext: ".vti",
            pvd: "spectral.pvd",
        };
        assert_eq!(s.stem(125), "spectral-00000125");
        assert_eq!(s.step_of_file_name("spectral-00000125.vti"), Some(125));
        assert_eq!(s.step_of_file_name("spectral-7.vti"), Some(7));
        assert_eq!(s.step_of_file_name("spectral-.vti"), None);
        assert_eq!(s.step_of_file_name("vortex-00000001.vti"), None);
        assert_eq!(s.step_of_file_name("spectral-00000001.npz"), None);
    }
}
