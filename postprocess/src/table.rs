//! Reading the simple numeric CSV files the simulator writes.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A numeric CSV file held column by column.
///
/// Every column has the same length, [`Table::len`]. Fields that parse as
/// `NaN` or `inf` are kept as such: the plotting code skips them.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The file the table was read from (used in error messages).
    pub path: PathBuf,
    /// Column names from the header row, trimmed, in file order.
    pub headers: Vec<String>,
    /// One vector per header, in the same order as `headers`.
    pub columns: Vec<Vec<f64>>,
}

impl Table {
    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.columns.first().map_or(0, Vec::len)
    }

    /// Whether the table has no data rows (a run that has not written any yet).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The column called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&[f64]> {
        self.headers
            .iter()
            .position(|h| h == name)
            .map(|i| self.columns[i].as_slice())
    }

    /// The column called `name`, or an error naming the column and the file.
    pub fn column(&self, name: &str) -> Result<&[f64]> {
        self.get(name).with_context(|| {
            format!(
                "{}: no column {name:?} (columns are: {})",
                self.path.display(),
                self.headers.join(",")
            )
        })
    }

    /// The columns called `names`, in that order; an error names the first
    /// that is missing (see [`Table::column`]).
    pub fn columns<const N: usize>(&self, names: [&str; N]) -> Result<[&[f64]; N]> {
        let mut out: [&[f64]; N] = [&[]; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = self.column(name)?;
        }
        Ok(out)
    }
}

/// Read a comma-separated file with one header row and numeric fields.
///
/// Columns are found by header name, so their order does not matter and
/// extra columns are harmless. The reader is meant for files that may still
/// be growing:
///
/// * a header with no data rows gives an empty table;
/// * the last line is ignored when it is incomplete: no trailing newline,
///   the wrong number of fields, or a field that is not a number;
/// * blank lines are skipped.
///
/// A malformed line anywhere else is an error naming the file and line, as
/// is a missing file or a file without a header row.
pub fn read_csv_columns(path: impl AsRef<Path>) -> Result<Table> {
    let path = path.as_ref();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_csv(path, &text)
}

fn parse_csv(path: &Path, text: &str) -> Result<Table> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let complete_last = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();

    let Some(header_idx) = lines.iter().position(|l| !l.trim().is_empty()) else {
        bail!("{}: empty file, no header row", path.display());
    };
    let headers: Vec<String> = lines[header_idx]
        .split(',')
        .map(|h| h.trim().to_string())
        .collect();
    if headers.iter().any(String::is_empty) {
        bail!(
            "{}: header row has an empty column name: {:?}",
            path.display(),
            lines[header_idx]
        );
    }

    let mut columns = vec![Vec::new(); headers.len()];
    let mut row = Vec::with_capacity(headers.len());
    let last = lines.len() - 1;
    for (idx, line) in lines.iter().enumerate().skip(header_idx + 1) {
        if line.trim().is_empty() {
            continue;
        }
        let is_last = idx == last;
        if is_last && !complete_last {
            // Being written right now: not a full record yet.
            break;
        }
        match parse_row(line, headers.len(), &mut row) {
            Ok(()) => {
                for (col, &v) in columns.iter_mut().zip(&row) {
                    col.push(v);
                }
            }
            Err(_) if is_last => break,
            Err(msg) => bail!("{}:{}: {msg}", path.display(), idx + 1),
        }
    }

    Ok(Table {
        path: path.to_path_buf(),
        headers,
        columns,
    })
}

fn parse_row(line: &str, width: usize, row: &mut Vec<f64>) -> std::result::Result<(), String> {
    row.clear();
    for field in line.split(',') {
        let field = field.trim();
        let v: f64 = field
            .parse()
            .map_err(|_| format!("field {:?} is not a number", field))?;
        row.push(v);
    }
    if row.len() != width {
        return Err(format!("{} fields where the header has {width}", row.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Table> {
        parse_csv(Path::new("x.csv"), text)
    }

    #[test]
    fn columns_by_name() {
        let t = parse("a, b ,c\n1,2,3\n4.5e0,NaN,-inf\n").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.column("b").unwrap()[0], 2.0);
        assert!(t.column("b").unwrap()[1].is_nan());
        assert_eq!(t.column("c").unwrap()[1], f64::NEG_INFINITY);
        assert_eq!(t.get("a"), Some(&[1.0, 4.5][..]));
        let err = t.column("zz").unwrap_err().to_string();
        assert!(err.contains("x.csv") && err.contains("zz"), "{err}");
    }

    #[test]
    fn header_only_and_partial_lines() {
        assert!(parse("t,K\n").unwrap().is_empty());
        assert!(parse("t,K").unwrap().is_empty());
        // No trailing newline: the last record may be cut anywhere.
        assert_eq!(parse("t,K\n1,2\n3,4").unwrap().len(), 1);
        assert_eq!(parse("t,K\n1,2\n3,").unwrap().len(), 1);
        // Trailing newline but short or garbled last line.
        assert_eq!(parse("t,K\n1,2\n3\n").unwrap().len(), 1);
        assert_eq!(parse("t,K\n1,2\n3,4.0e\n").unwrap().len(), 1);
        // CRLF and blank lines.
        assert_eq!(parse("t,K\r\n1,2\r\n\r\n3,4\r\n").unwrap().len(), 2);
    }

    #[test]
    fn malformed_middle_line_is_an_error() {
        let err = parse("t,K\n1,2\n3\n5,6\n").unwrap_err().to_string();
        assert!(err.contains("x.csv:3"), "{err}");
        let err = parse("t,K\n1,x\n5,6\n").unwrap_err().to_string();
        assert!(err.contains("x.csv:2") && err.contains("\"x\""), "{err}");
        assert!(parse("").is_err());
        assert!(parse("\n\n").is_err());
    }
}
