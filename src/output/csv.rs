//! Append-only CSV logs (energy.csv, spectra.csv, ...).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{format_f64, parent_dir, sync_dir_best_effort, write_atomic, OutputError};

/// An append-only CSV log.
///
/// The header is written at creation. Every append writes complete lines in a
/// single write, flushes and calls `sync_data`, so a killed process leaves at
/// most a partial last line. [`CsvLog::len_bytes`] is the file length after the
/// last complete append: record it in checkpoints and give it back to
/// [`CsvLog::reopen_truncated`] on resume, which drops everything written after
/// the checkpoint (so a resumed run neither duplicates nor loses rows).
#[derive(Debug)]
pub struct CsvLog {
    file: File,
    path: PathBuf,
    columns: usize,
    len: u64,
}

/// Quote a field if it contains a comma, a quote or a line break (RFC 4180).
fn escape(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// How a header `old` becomes `new` when `new` only adds columns (`old`'s names, in their
/// order, with others between or after them): for each column of `new`, its index in `old` or
/// `None`. `None` when `new` is not such an extension of `old`.
fn added_columns(old: &[&str], new: &[&str]) -> Option<Vec<Option<usize>>> {
    if old.len() >= new.len() {
        return None;
    }
    let mut next = 0;
    let map = new
        .iter()
        .map(|c| {
            if old.get(next) == Some(c) {
                next += 1;
                Some(next - 1)
            } else {
                None
            }
        })
        .collect();
    (next == old.len()).then_some(map)
}

/// One CSV line of `fields` (quoted as needed), ending in a line break.
fn csv_line<S: AsRef<str>>(fields: &[S]) -> String {
    let mut s = fields
        .iter()
        .map(|f| escape(f.as_ref()))
        .collect::<Vec<_>>()
        .join(",");
    s.push('\n');
    s
}

impl CsvLog {
    /// Create a new log at `path` (creating parent directories) and write the
    /// header line. Refuses with [`OutputError::AlreadyExists`] if the file exists.
    pub fn create(path: &Path, header: &[&str]) -> Result<CsvLog, OutputError> {
        if header.is_empty() {
            return Err(OutputError::invalid(path, "CSV header has no columns"));
        }
        let dir = parent_dir(path);
        fs::create_dir_all(dir).map_err(|e| OutputError::io("create directory", dir, e))?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    OutputError::AlreadyExists {
                        path: path.to_path_buf(),
                    }
                } else {
                    OutputError::io("create", path, e)
                }
            })?;
        sync_dir_best_effort(dir);
        let mut log = CsvLog {
            file,
            path: path.to_path_buf(),
            columns: header.len(),
            len: 0,
        };
        log.write_complete(csv_line(header).as_bytes())?;
        Ok(log)
    }

    /// Reopen the log of a resumed run: check that the file holds at least
    /// `len_bytes` bytes ending with a complete line, that its header is
    /// `header`, truncate it to `len_bytes` (the length recorded in the
    /// checkpoint, dropping any rows and partial line written afterwards) and
    /// continue appending. A log written by an older vpm, whose header lacks
    /// some of `header`'s columns, gets them first, `nan` in its rows
    /// ([`CsvLog::reopen_with_added_columns`]).
    pub fn reopen_truncated(
        path: &Path,
        header: &[&str],
        len_bytes: u64,
    ) -> Result<CsvLog, OutputError> {
        let expected = csv_line(header);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| OutputError::io("open", path, e))?;
        let actual_len = file
            .metadata()
            .map_err(|e| OutputError::io("inspect", path, e))?
            .len();
        if actual_len < len_bytes {
            return Err(OutputError::invalid(
                path,
                format!(
                    "file has {actual_len} bytes, fewer than the {len_bytes} recorded in the checkpoint"
                ),
            ));
        }
        // header check (read at most one line)
        let mut found = Vec::new();
        BufReader::new(&mut file)
            .take(expected.len() as u64 + 4096)
            .read_until(b'\n', &mut found)
            .map_err(|e| OutputError::io("read", path, e))?;
        if found != expected.as_bytes() {
            let found = String::from_utf8_lossy(&found);
            let found = found.trim_end_matches(['\n', '\r']);
            let old: Vec<&str> = found.split(',').collect();
            if let Some(map) = added_columns(&old, header) {
                return Self::reopen_with_added_columns(path, header, &map, len_bytes);
            }
            return Err(OutputError::CsvHeaderMismatch {
                path: path.to_path_buf(),
                expected: expected.trim_end_matches('\n').to_string(),
                found: found.to_string(),
            });
        }
        if len_bytes < expected.len() as u64 {
            return Err(OutputError::invalid(
                path,
                format!(
                    "recorded length {len_bytes} is shorter than the header ({} bytes)",
                    expected.len()
                ),
            ));
        }
        // the recorded length must end a line
        file.seek(SeekFrom::Start(len_bytes - 1))
            .map_err(|e| OutputError::io("seek in", path, e))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)
            .map_err(|e| OutputError::io("read", path, e))?;
        if last[0] != b'\n' {
            return Err(OutputError::invalid(
                path,
                format!("recorded length {len_bytes} does not end a line"),
            ));
        }
        if actual_len > len_bytes {
            tracing::info!(
                "{}: dropping {} bytes written after the checkpoint",
                path.display(),
                actual_len - len_bytes
            );
        }
        file.set_len(len_bytes)
            .map_err(|e| OutputError::io("truncate", path, e))?;
        file.sync_data()
            .map_err(|e| OutputError::io("fsync", path, e))?;
        file.seek(SeekFrom::Start(len_bytes))
            .map_err(|e| OutputError::io("seek in", path, e))?;
        Ok(CsvLog {
            file,
            path: path.to_path_buf(),
            columns: header.len(),
            len: len_bytes,
        })
    }

    /// [`CsvLog::reopen_truncated`] of a log whose header lacks columns of `header` (`map`:
    /// [`added_columns`]): its first `len_bytes` bytes are written again, atomically, under
    /// `header`, `nan` in the added columns of every row; appending continues after them.
    fn reopen_with_added_columns(
        path: &Path,
        header: &[&str],
        map: &[Option<usize>],
        len_bytes: u64,
    ) -> Result<CsvLog, OutputError> {
        let bytes = fs::read(path).map_err(|e| OutputError::io("read", path, e))?;
        let kept = usize::try_from(len_bytes)
            .ok()
            .and_then(|n| bytes.get(..n))
            .filter(|k| k.ends_with(b"\n"))
            .ok_or_else(|| {
                OutputError::invalid(
                    path,
                    format!("recorded length {len_bytes} does not end a line of the file"),
                )
            })?;
        let text = std::str::from_utf8(kept)
            .map_err(|_| OutputError::invalid(path, "the file is not UTF-8 text"))?;
        let old_columns = map.iter().flatten().count();
        let mut out = csv_line(header);
        let mut rows = 0;
        for (i, line) in text.lines().enumerate().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != old_columns || line.contains('"') {
                return Err(OutputError::invalid(
                    path,
                    format!(
                        "line {}: {} fields under a header of {old_columns}: cannot add the \
                         columns this vpm writes",
                        i + 1,
                        fields.len()
                    ),
                ));
            }
            let row: Vec<&str> = map.iter().map(|m| m.map_or("nan", |j| fields[j])).collect();
            out.push_str(&csv_line(&row));
            rows += 1;
        }
        write_atomic(path, out.as_bytes())?;
        let added: Vec<&str> = header
            .iter()
            .zip(map)
            .filter(|(_, m)| m.is_none())
            .map(|(c, _)| *c)
            .collect();
        tracing::info!(
            "{}: written by an older vpm; added the columns {} (nan in its {rows} rows)",
            path.display(),
            added.join(", ")
        );
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| OutputError::io("open", path, e))?;
        Ok(CsvLog {
            file,
            path: path.to_path_buf(),
            columns: header.len(),
            len: out.len() as u64,
        })
    }

    /// Write `bytes` (complete lines) at the end, flush and `sync_data`.
    /// On failure, try to cut the file back to the last complete append.
    fn write_complete(&mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let res = self
            .file
            .write_all(bytes)
            .and_then(|()| self.file.flush())
            .map_err(|e| OutputError::io("append to", &self.path, e))
            .and_then(|()| {
                self.file
                    .sync_data()
                    .map_err(|e| OutputError::io("fsync", &self.path, e))
            });
        match res {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = self.file.seek(SeekFrom::Start(self.len));
                Err(e)
            }
        }
    }

    fn check_columns(&self, n: usize) -> Result<(), OutputError> {
        if n != self.columns {
            return Err(OutputError::invalid(
                &self.path,
                format!("row has {n} fields, header has {}", self.columns),
            ));
        }
        Ok(())
    }

    fn encode_row(values: &[f64], out: &mut String) {
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format_f64(*v));
        }
        out.push('\n');
    }

    /// Append one row of numbers, each formatted with [`format_f64`].
    /// The number of values must equal the number of header columns.
    pub fn append_row(&mut self, values: &[f64]) -> Result<(), OutputError> {
        self.check_columns(values.len())?;
        let mut line = String::new();
        Self::encode_row(values, &mut line);
        self.write_complete(line.as_bytes())
    }

    /// Append several rows of numbers in one write (and one fsync).
    pub fn append_rows<R: AsRef<[f64]>>(&mut self, rows: &[R]) -> Result<(), OutputError> {
        let mut text = String::new();
        for r in rows {
            self.check_columns(r.as_ref().len())?;
            Self::encode_row(r.as_ref(), &mut text);
        }
        if text.is_empty() {
            return Ok(());
        }
        self.write_complete(text.as_bytes())
    }

    /// Append one row of preformatted fields (quoted as CSV requires, e.g. a
    /// field containing a comma). The number of fields must equal the number
    /// of header columns.
    pub fn append_row_fmt(&mut self, fields: &[String]) -> Result<(), OutputError> {
        self.check_columns(fields.len())?;
        self.write_complete(csv_line(fields).as_bytes())
    }

    /// File length after the last complete append (header included).
    pub fn len_bytes(&self) -> u64 {
        self.len
    }

    /// Path of the log file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &[&str] = &["step", "t", "K"];

    /// A new log of header [`H`] at `dir/energy.csv` holding `rows`, and its path.
    fn log_with_rows(dir: &Path, rows: &[[f64; 3]]) -> (PathBuf, CsvLog) {
        let p = dir.join("energy.csv");
        let mut log = CsvLog::create(&p, H).unwrap();
        log.append_rows(rows).unwrap();
        (p, log)
    }

    #[test]
    fn create_append_len() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("spectral").join("energy.csv");
        let mut log = CsvLog::create(&p, H).unwrap();
        assert_eq!(log.len_bytes(), fs::metadata(&p).unwrap().len());
        log.append_row(&[0.0, 0.0, 0.125]).unwrap();
        log.append_row(&[1.0, 0.01, 0.1]).unwrap();
        log.append_rows(&[[2.0, 0.02, 0.09], [3.0, 0.03, 0.08]])
            .unwrap();
        log.append_row_fmt(&["4".into(), "0.04".into(), "a,b".into()])
            .unwrap();
        assert_eq!(log.len_bytes(), fs::metadata(&p).unwrap().len());
        assert_eq!(log.path(), p.as_path());
        let text = fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "step,t,K");
        assert_eq!(
            lines[1],
            "0.0000000000000000e0,0.0000000000000000e0,1.2500000000000000e-1"
        );
        assert_eq!(lines[5], "4,0.04,\"a,b\"");
        assert_eq!(lines.len(), 6);
        // values parse back exactly
        let v: f64 = lines[2].split(',').nth(2).unwrap().parse().unwrap();
        assert_eq!(v, 0.1);
        // wrong number of fields is an error and writes nothing
        assert!(log.append_row(&[1.0]).is_err());
        assert_eq!(log.len_bytes(), fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn create_refuses_existing() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("energy.csv");
        fs::write(&p, "old data\n").unwrap();
        let err = CsvLog::create(&p, H).unwrap_err();
        assert!(matches!(err, OutputError::AlreadyExists { .. }));
        assert!(err.to_string().contains("energy.csv"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "old data\n");
    }

    #[test]
    fn reopen_truncated_drops_later_rows_and_partial_line() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, mut log) = log_with_rows(tmp.path(), &[[0.0, 0.0, 1.0], [1.0, 0.1, 0.9]]);
        let ckpt_len = log.len_bytes();
        let kept = fs::read(&p).unwrap();
        log.append_row(&[2.0, 0.2, 0.8]).unwrap();
        drop(log);
        // a killed process leaves a partial last line
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"3.0000000000000000e0,3.00000").unwrap();
        drop(f);

        let mut log = CsvLog::reopen_truncated(&p, H, ckpt_len).unwrap();
        assert_eq!(log.len_bytes(), ckpt_len);
        assert_eq!(fs::read(&p).unwrap(), kept);
        log.append_row(&[2.0, 0.2, 0.75]).unwrap();
        assert_eq!(log.len_bytes(), fs::metadata(&p).unwrap().len());
        let text = fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[3].ends_with("7.5000000000000000e-1"));
        assert!(text.as_bytes().starts_with(&kept));
    }

    #[test]
    fn reopen_checks_header_and_length() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, log) = log_with_rows(tmp.path(), &[[0.0, 0.0, 1.0]]);
        let len = log.len_bytes();
        drop(log);
        let before = fs::read(&p).unwrap();

        let err = CsvLog::reopen_truncated(&p, &["step", "t", "Z"], len).unwrap_err();
        assert!(
            matches!(err, OutputError::CsvHeaderMismatch { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("energy.csv"));
        // longer than the file
        assert!(CsvLog::reopen_truncated(&p, H, len + 10).is_err());
        // not at a line end
        assert!(CsvLog::reopen_truncated(&p, H, len - 3).is_err());
        // shorter than the header
        assert!(CsvLog::reopen_truncated(&p, H, 3).is_err());
        // nothing was modified by the failed attempts
        assert_eq!(fs::read(&p).unwrap(), before);
        // header-only length is fine
        let log = CsvLog::reopen_truncated(&p, H, "step,t,K\n".len() as u64).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "step,t,K\n");
        assert_eq!(log.len_bytes(), 9);
        // missing file
        let err = CsvLog::reopen_truncated(&tmp.path().join("no.csv"), H, 9).unwrap_err();
        assert!(err.to_string().contains("no.csv"));
    }

    #[test]
    fn reopen_adds_the_columns_an_older_header_lacks() {
        assert_eq!(
            added_columns(&["t", "K"], &["t", "dt", "K", "Z"]),
            Some(vec![Some(0), None, Some(1), None])
        );
        // Not an extension: a column renamed, reordered or dropped.
        assert_eq!(added_columns(&["t", "K"], &["K", "t", "Z"]), None);
        assert_eq!(added_columns(&["t", "E"], &["t", "K", "Z"]), None);
        assert_eq!(added_columns(H, H), None);

        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("energy.csv");
        let mut old = CsvLog::create(&p, &["step", "K"]).unwrap();
        old.append_rows(&[[0.0, 1.0], [1.0, 0.9]]).unwrap();
        let len = old.len_bytes();
        old.append_row(&[2.0, 0.8]).unwrap();
        drop(old);
        let mut log = CsvLog::reopen_truncated(&p, H, len).unwrap();
        log.append_row(&[2.0, 0.2, 0.75]).unwrap();
        assert_eq!(log.len_bytes(), fs::metadata(&p).unwrap().len());
        let text = fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "step,t,K");
        assert_eq!(lines[1], "0.0000000000000000e0,nan,1.0000000000000000e0");
        assert_eq!(lines[2], "1.0000000000000000e0,nan,9.0000000000000002e-1");
        assert_eq!(lines.len(), 4, "{text}");
        // A row that does not fit its header is an error naming the file, which is left alone.
        fs::write(&p, "step,K\n1,2,3\n").unwrap();
        let err = CsvLog::reopen_truncated(&p, H, 13).unwrap_err().to_string();
        assert!(
            err.contains("energy.csv") && err.contains("line 2"),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&p).unwrap(), "step,K\n1,2,3\n");
    }
}
