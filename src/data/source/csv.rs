//! CSV files of tabular items: a header, optional `id` and `label` columns, every other column
//! a number; ids are the `id` column or positions, labels the non-empty `label` cells (given by
//! a person). Read whole, or streamed a chunk of records at a time (a file with an `id` column
//! holds its ids to refuse duplicates), with the same checks in the same order. Also the CSV
//! reading that other files of alkit (item indices, scores, labels) go through.

use crate::data::labels::check_class_count;
use crate::data::plan::ImagePlan;
use crate::data::stream::{
    labels_beside_values, Chunk, Format, ItemStream, Items, Loaded, PoolLabels,
};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A CSV file of tabular items.
pub(crate) struct Csv<'a>(pub(crate) &'a Path);

impl Format for Csv<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn labels_are_given(&self) -> bool {
        true
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(CsvStream::open(self.0)?))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        Ok(Loaded {
            pool: load_csv(self.0)?,
            test: None,
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        Err(labels_beside_values(self.0))
    }
}

/// A CSV data row: its 1-based line number and its fields.
pub(crate) type CsvRow = (usize, Vec<String>);

/// A header and data rows through the `csv` crate: RFC 4180 quoting (a quoted comma or line
/// break stays in its field), a UTF-8 byte-order mark skipped, fields trimmed, blank lines
/// skipped; a row whose field count differs from the header's is an error naming its line.
pub(crate) fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<CsvRow>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_csv_from(path, &bytes)
}

/// [`read_csv`] over bytes in memory (`path` names them in errors).
pub(crate) fn read_csv_from(path: &Path, bytes: &[u8]) -> Result<(Vec<String>, Vec<CsvRow>)> {
    read_delimited(path, bytes, b',')
}

/// [`read_csv_from`] with another field delimiter (`b'\t'` for TSV).
pub(crate) fn read_delimited(
    path: &Path,
    bytes: &[u8],
    delimiter: u8,
) -> Result<(Vec<String>, Vec<CsvRow>)> {
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(delimiter)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let bad = |line: u64, problem: String| Error::Row {
        path: path.to_path_buf(),
        row: line as usize,
        problem,
    };
    // The crate positions a record where the previous one ended, before any blank lines it
    // skipped: step over those line breaks so that errors name the record's own line.
    let line_of = |pos: &csv::Position| -> u64 {
        let start = usize::try_from(pos.byte()).unwrap_or(usize::MAX);
        let skipped = bytes
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .filter(|&&b| b == b'\n')
            .count();
        pos.line() + skipped as u64
    };
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for rec in rd.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, line_of);
            bad(
                line,
                format!(
                    "unreadable {}: {e}",
                    if delimiter == b'\t' { "TSV" } else { "CSV" }
                ),
            )
        })?;
        if rec.iter().all(str::is_empty) {
            continue;
        }
        let line = rec.position().map_or(0, line_of);
        let fields: Vec<String> = rec.iter().map(str::to_string).collect();
        match &header {
            None => {
                unique_columns(&fields).map_err(|p| bad(line, p))?;
                header = Some(fields)
            }
            Some(h) if h.len() != fields.len() => {
                return Err(bad(
                    line,
                    format!("{} fields, the header has {}", fields.len(), h.len()),
                ))
            }
            Some(_) => rows.push((line as usize, fields)),
        }
    }
    let header = header
        .ok_or_else(|| Error::data(path, DataProblem::Other("is empty (no header)".into())))?;
    Ok((header, rows))
}

/// Refuses a header that names a column twice: a reader that looks a column up by name would
/// take one of them and silently drop the other.
fn unique_columns(header: &[String]) -> std::result::Result<(), String> {
    let mut seen = std::collections::HashMap::with_capacity(header.len());
    for (j, name) in header.iter().enumerate() {
        if let Some(k) = seen.insert(name.as_str(), j) {
            return Err(format!(
                "the header names column `{name}` twice (columns {} and {}): rename one",
                k + 1,
                j + 1
            ));
        }
    }
    Ok(())
}

/// Item indices into a split of `n` items: one per line, or the `index` column of a CSV with
/// a header (what `alkit score` and `query` write). Errors name the line.
pub fn read_indices(path: &Path, n: usize) -> Result<Vec<usize>> {
    let (header, rows) = read_csv(path)?;
    let headerless = header.len() == 1 && header[0].parse::<usize>().is_ok();
    let col = if headerless {
        0
    } else {
        header.iter().position(|h| h == "index").ok_or_else(|| {
            Error::data(
                path,
                DataProblem::Other("the header has no `index` column".into()),
            )
        })?
    };
    let first = headerless.then(|| (1, header.clone()));
    let mut out = Vec::with_capacity(rows.len() + 1);
    for (line, fields) in first.into_iter().chain(rows) {
        let f = fields.get(col).map_or("", String::as_str);
        let i: usize = f.parse().map_err(|_| Error::Row {
            path: path.to_path_buf(),
            row: line,
            problem: format!("`{f}` is not an item index"),
        })?;
        if i >= n {
            return Err(Error::Row {
                path: path.to_path_buf(),
                row: line,
                problem: format!("index {i} is outside the split of {n} items"),
            });
        }
        out.push(i);
    }
    if out.is_empty() {
        return Err(Error::data(path, DataProblem::Other("no indices".into())));
    }
    Ok(out)
}

/// Tabular items: optional `id` and `label` columns, every other column a number.
fn load_csv(path: &Path) -> Result<Items> {
    let (header, rows) = read_csv(path)?;
    let layout = CsvLayout::of(&header);
    layout.check(rows.len(), path)?;
    let classes: Vec<String> = layout
        .label
        .map(|c| {
            rows.iter()
                .map(|(_, r)| r[c].clone())
                .filter(|v| !v.is_empty())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    check_class_count(classes.len(), path)?;
    let mut x = Vec::with_capacity(rows.len() * layout.features.len());
    let mut ids = Vec::with_capacity(rows.len());
    let mut labels = Vec::with_capacity(rows.len());
    let mut seen = HashMap::new();
    for (i, (line, r)) in rows.iter().enumerate() {
        let row_error = |problem: String| Error::Row {
            path: path.to_path_buf(),
            row: *line,
            problem,
        };
        layout.values(&header, r, &mut x).map_err(row_error)?;
        let id = layout.id(r, i).map_err(row_error)?;
        if let Some(prev) = seen.insert(id.clone(), *line) {
            return Err(row_error(format!("id `{id}` already used on line {prev}")));
        }
        ids.push(id);
        labels.push(layout.label.and_then(|c| {
            let v = &r[c];
            (!v.is_empty()).then(|| classes.iter().position(|k| k == v).expect("collected") as u32)
        }));
    }
    Ok(Items {
        ids,
        x,
        item_shape: vec![layout.features.len()],
        labels,
        classes,
    })
}

/// Which columns of a tabular pool are what.
struct CsvLayout {
    id: Option<usize>,
    label: Option<usize>,
    features: Vec<usize>,
}

impl CsvLayout {
    /// The layout of `header`.
    fn of(header: &[String]) -> CsvLayout {
        let id = header.iter().position(|h| h == "id");
        let label = header.iter().position(|h| h == "label");
        let features: Vec<usize> = (0..header.len())
            .filter(|&c| Some(c) != id && Some(c) != label)
            .collect();
        CsvLayout {
            id,
            label,
            features,
        }
    }

    /// A pool needs a feature column and a row.
    fn check(&self, rows: usize, path: &Path) -> Result<()> {
        if self.features.is_empty() || rows == 0 {
            return Err(Error::data(
                path,
                DataProblem::Other("needs at least one feature column and one row".into()),
            ));
        }
        Ok(())
    }

    /// Appends a row's features to `x`, or says which field is not a finite number.
    fn values(
        &self,
        header: &[String],
        r: &[String],
        x: &mut Vec<f32>,
    ) -> std::result::Result<(), String> {
        for &c in &self.features {
            let v: f32 = r[c]
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    format!("column `{}`: `{}` is not a finite number", header[c], r[c])
                })?;
            x.push(v);
        }
        Ok(())
    }

    /// Row `i`'s id: its `id` field (not empty), else its position.
    fn id(&self, r: &[String], i: usize) -> std::result::Result<String, String> {
        let id = self
            .id
            .map(|c| r[c].clone())
            .unwrap_or_else(|| i.to_string());
        if id.is_empty() {
            return Err("empty id".into());
        }
        Ok(id)
    }
}

/// The records of a CSV file read front to back with [`read_csv`]'s settings, each with its
/// line (computed only when asked: the file is read again at the record's start).
struct CsvRecords {
    path: PathBuf,
    rd: csv::Reader<std::io::BufReader<std::fs::File>>,
    peek: std::fs::File,
    header_len: Option<usize>,
}

impl CsvRecords {
    fn open(path: &Path) -> Result<CsvRecords> {
        let open = || std::fs::File::open(path).map_err(|e| Error::io(path, e));
        let rd = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(std::io::BufReader::new(open()?));
        Ok(CsvRecords {
            path: path.to_path_buf(),
            rd,
            peek: open()?,
            header_len: None,
        })
    }

    /// The 1-based line of the record the crate positions at `pos` (where the previous
    /// record ended: the line breaks of blank lines skipped since are counted, as
    /// [`read_csv`] does).
    fn line_of(&mut self, pos: &csv::Position) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let mut skipped = 0u64;
        if self.peek.seek(SeekFrom::Start(pos.byte())).is_ok() {
            let mut buf = [0u8; 4096];
            'read: while let Ok(n) = self.peek.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for &b in &buf[..n] {
                    match b {
                        b'\n' => skipped += 1,
                        b'\r' => {}
                        _ => break 'read,
                    }
                }
            }
        }
        (pos.line() + skipped) as usize
    }

    /// The next non-blank record with its position; the first is the header. A record whose
    /// field count differs from the header's is an error naming its line.
    fn next_record(&mut self) -> Result<Option<(csv::Position, csv::StringRecord)>> {
        let mut rec = csv::StringRecord::new();
        loop {
            let more = match self.rd.read_record(&mut rec) {
                Ok(more) => more,
                Err(e) => {
                    let line = e.position().cloned().map_or(0, |p| self.line_of(&p));
                    return Err(Error::Row {
                        path: self.path.clone(),
                        row: line,
                        problem: format!("unreadable CSV: {e}"),
                    });
                }
            };
            if !more {
                return Ok(None);
            }
            if rec.iter().all(str::is_empty) {
                continue;
            }
            let pos = rec.position().cloned().unwrap_or_else(csv::Position::new);
            match self.header_len {
                None => {
                    let names: Vec<String> = rec.iter().map(str::to_string).collect();
                    if let Err(problem) = unique_columns(&names) {
                        let row = self.line_of(&pos);
                        return Err(Error::Row {
                            path: self.path.clone(),
                            row,
                            problem,
                        });
                    }
                    self.header_len = Some(rec.len())
                }
                Some(h) if h != rec.len() => {
                    let row = self.line_of(&pos);
                    return Err(Error::Row {
                        path: self.path.clone(),
                        row,
                        problem: format!("{} fields, the header has {h}", rec.len()),
                    });
                }
                Some(_) => {}
            }
            return Ok(Some((pos, rec)));
        }
    }
}

/// A CSV pool read a chunk of rows at a time, with [`load_csv`]'s checks: a first pass checks
/// every row (in the order [`load_csv`] reports problems) and counts them, holding the label
/// names and, with an `id` column, the ids; the second gives the values.
struct CsvStream {
    records: CsvRecords,
    header: Vec<String>,
    layout: CsvLayout,
    shape: Vec<usize>,
    n: usize,
    next: usize,
}

impl CsvStream {
    fn open(path: &Path) -> Result<CsvStream> {
        let mut rec = CsvRecords::open(path)?;
        let header: Vec<String> = match rec.next_record()? {
            Some((_, h)) => h.iter().map(str::to_string).collect(),
            None => {
                return Err(Error::data(
                    path,
                    DataProblem::Other("is empty (no header)".into()),
                ))
            }
        };
        let layout = CsvLayout::of(&header);
        let mut labels = BTreeSet::new();
        // Row problems wait until every record was read: a malformed record later in the file
        // is reported first, as the whole-file reader does.
        let mut first_problem: Option<(csv::Position, String)> = None;
        let mut seen: HashMap<String, csv::Position> = HashMap::new();
        let mut n = 0usize;
        let mut scratch = Vec::new();
        while let Some((pos, r)) = rec.next_record()? {
            let fields: Vec<String> = r.iter().map(str::to_string).collect();
            if let Some(c) = layout.label.filter(|&c| !fields[c].is_empty()) {
                if !labels.contains(&fields[c]) {
                    labels.insert(fields[c].clone());
                }
            }
            if first_problem.is_none() {
                scratch.clear();
                let problem = layout
                    .values(&header, &fields, &mut scratch)
                    .and_then(|()| layout.id(&fields, n))
                    .and_then(|id| match layout.id {
                        Some(_) => match seen.get(&id) {
                            Some(prev) => Err(format!("id `{id}` already used on line {}", {
                                let prev = prev.clone();
                                rec.line_of(&prev)
                            })),
                            None => {
                                seen.insert(id, pos.clone());
                                Ok(())
                            }
                        },
                        None => Ok(()),
                    });
                if let Err(p) = problem {
                    first_problem = Some((pos, p));
                    seen = HashMap::new();
                }
            }
            n += 1;
        }
        layout.check(n, path)?;
        check_class_count(labels.len(), path)?;
        if let Some((pos, problem)) = first_problem {
            return Err(Error::Row {
                path: path.to_path_buf(),
                row: rec.line_of(&pos),
                problem,
            });
        }
        drop(seen);
        let mut records = CsvRecords::open(path)?;
        records.next_record()?;
        Ok(CsvStream {
            records,
            shape: vec![layout.features.len()],
            header,
            layout,
            n,
            next: 0,
        })
    }
}

impl ItemStream for CsvStream {
    fn len(&self) -> usize {
        self.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if self.next >= self.n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.n - self.next));
        let mut x = Vec::with_capacity(k * self.layout.features.len());
        let mut ids = Vec::with_capacity(k);
        let path = self.records.path.clone();
        let changed = || {
            Error::data(
                &path,
                DataProblem::Other("the file changed while it was read".into()),
            )
        };
        for i in start..start + k {
            let (_, r) = self.records.next_record()?.ok_or_else(changed)?;
            let fields: Vec<String> = r.iter().map(str::to_string).collect();
            self.layout
                .values(&self.header, &fields, &mut x)
                .map_err(|_| changed())?;
            ids.push(self.layout.id(&fields, i).map_err(|_| changed())?);
        }
        self.next += k;
        Ok(Some(Chunk { start, ids, x }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_reads_quotes_a_bom_and_blank_lines_and_names_bad_lines() {
        let p = Path::new("t.csv");
        // A BOM, a quoted comma, an escaped quote, a quoted line break, a blank line.
        let text = "\u{feff}id,label\n\"a,b\",1\n\n\"say \"\"hi\"\"\",2\n\"two\nlines\",3\n";
        let (h, rows) = read_csv_from(p, text.as_bytes()).unwrap();
        assert_eq!(h, vec!["id", "label"]);
        let got: Vec<(usize, Vec<&str>)> = rows
            .iter()
            .map(|(n, f)| (*n, f.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, vec!["a,b", "1"]),
                (4, vec!["say \"hi\"", "2"]),
                (5, vec!["two\nlines", "3"]),
            ]
        );
        let e = read_csv_from(p, "id,label\nx,1\ny,2,3\n".as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Row { row: 3, .. }), "{e}");
        let e = read_csv_from(p, "id,label\n\r\n\nx,1,0\n".as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Row { row: 4, .. }), "{e}");
        assert!(read_csv_from(p, "".as_bytes()).is_err());
    }
}
