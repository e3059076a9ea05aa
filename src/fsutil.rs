//! Small filesystem helpers: atomic writes and JSON files with errors naming the path.

use crate::error::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, flushed and
/// synced, renamed over `path`, then the folder synced so that the rename itself survives a
/// power cut. A crash leaves either the old or the new file, never a torn one. The file gets
/// the ordinary permissions of a new file (`0666` less the umask), whatever `path` had.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = parent_dir(path);
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let (tmp, mut f) = temporary(path).map_err(|e| Error::io(path, e))?;
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// Syncs a folder's entries (a rename into it) to disk. Only Unix can open a folder for this;
/// elsewhere the rename is as durable as the platform makes it.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Serialises `value` as pretty JSON and writes it atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)
        .map_err(|e| Error::state(path, format!("cannot serialise: {e}")))?;
    s.push('\n');
    write_atomic(path, s.as_bytes())
}

/// Reads and parses a JSON file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let s = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&s).map_err(|e| Error::state(path, format!("invalid JSON: {e}")))
}

/// Writes a CSV file atomically (a temporary file renamed over `path`, so a reader never sees
/// half of it): `header`, then one record per row,
/// fields quoted as RFC 4180 requires (a comma, quote or line break inside a field reads back
/// intact).
pub fn write_csv<R, F>(path: &Path, header: &[&str], rows: R) -> Result<()>
where
    R: IntoIterator<Item = Vec<F>>,
    F: AsRef<[u8]>,
{
    let mut file = CsvFile::create(path, header)?;
    for row in rows {
        file.row(row)?;
    }
    file.finish()
}

/// A CSV file written a row at a time and put in place atomically, for tables too long to
/// hold: rows go to a temporary file beside `path` (each ended by `\n`, a field quoted only
/// where RFC 4180 needs it), and [`CsvFile::finish`] syncs it and renames it over `path` as
/// `write_atomic` does. Dropped unfinished (an error, a panic), the temporary file is
/// removed and `path` is as it was.
pub struct CsvFile {
    path: PathBuf,
    tmp: PathBuf,
    writer: Option<csv::Writer<std::io::BufWriter<std::fs::File>>>,
}

impl CsvFile {
    /// Creates the temporary file for `path` (and `path`'s folder) and writes `header`.
    pub fn create(path: &Path, header: &[&str]) -> Result<CsvFile> {
        let dir = parent_dir(path);
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let (tmp, f) = temporary(path).map_err(|e| Error::io(path, e))?;
        let mut file = CsvFile {
            path: path.to_path_buf(),
            tmp,
            writer: Some(csv::Writer::from_writer(std::io::BufWriter::new(f))),
        };
        file.row(header)?;
        Ok(file)
    }

    /// Appends one record.
    pub fn row<I, F>(&mut self, fields: I) -> Result<()>
    where
        I: IntoIterator<Item = F>,
        F: AsRef<[u8]>,
    {
        let w = self.writer.as_mut().ok_or_else(|| {
            Error::io(
                &self.path,
                std::io::Error::other("the file was already finished"),
            )
        })?;
        w.write_record(fields)
            .map_err(|e| Error::io(&self.path, std::io::Error::other(e)))
    }

    /// Flushes and syncs the rows, then renames the file over `path` and syncs the folder.
    pub fn finish(mut self) -> Result<()> {
        let Some(w) = self.writer.take() else {
            return Ok(());
        };
        let result = (|| {
            let f = w
                .into_inner()
                .map_err(|e| std::io::Error::other(e.into_error()))?
                .into_inner()
                .map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(&self.tmp, &self.path)?;
            sync_dir(parent_dir(&self.path))
        })();
        result.map_err(|e| {
            let _ = std::fs::remove_file(&self.tmp);
            Error::io(&self.path, e)
        })
    }
}

impl Drop for CsvFile {
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The folder a file is written into (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// A new temporary file beside `path` for an atomic write to rename over it, created (never
/// opened if it exists, so a link planted under its name is not followed) under a name of
/// this process and a counter of its own, so that two writes never share one.
fn temporary(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent_dir(path).join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    Ok((tmp, f))
}

/// The path as the file system resolves it, for comparing paths: canonical when it exists,
/// else its canonical parent joined with its name (an output that does not exist yet).
fn resolved(path: &Path) -> std::path::PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (parent.canonicalize(), path.file_name()) {
        (Ok(p), Some(name)) => p.join(name),
        _ => path.to_path_buf(),
    }
}

/// Whether `path` is a file alkit keeps state in: a run's `run.json` or `runs/*.json`, a
/// session's `session.json`, or a checkpoint's `config.json` / `model.safetensors`.
fn is_state_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = path.parent().unwrap_or(Path::new("."));
    match name {
        "run.json" | "session.json" => true,
        "config.json" | "model.safetensors" => {
            dir.join("config.json").is_file() && dir.join("model.safetensors").is_file()
        }
        n if n.ends_with(".json") => {
            dir.file_name().is_some_and(|d| d == "runs")
                && dir.parent().is_some_and(|r| r.join("run.json").is_file())
        }
        _ => false,
    }
}

/// Refuses, before any work, an output path (the setting `setting`) that is one of the command's
/// `inputs` (files, or folders whose files it reads) or one of alkit's state files, so that no
/// command can overwrite what it reads or lose a run, a session or a checkpoint.
pub fn check_output(setting: &'static str, out: &Path, inputs: &[&Path]) -> Result<()> {
    let o = resolved(out);
    for input in inputs {
        let i = resolved(input);
        if o == i || (i.is_dir() && o.starts_with(&i) && o.exists()) {
            return Err(Error::config(
                setting,
                format!(
                    "{} is an input of this command ({}); write elsewhere",
                    out.display(),
                    input.display()
                ),
            ));
        }
    }
    if is_state_file(&o) {
        return Err(Error::config(
            setting,
            format!(
                "{} is alkit state (a run, a session or a checkpoint); write elsewhere",
                out.display()
            ),
        ));
    }
    Ok(())
}

/// Refuses, before any work, an output folder (the setting `setting`) that would put the
/// command's files over what it reads or over alkit state: the folder is an input, lies inside
/// an input folder, or holds an input; or it holds a session (`session.json`), a checkpoint
/// (`config.json` + `model.safetensors`) or, unless `run_ok` (curve's own folder, which it
/// resumes), a curve run (`run.json`).
pub fn check_output_dir(
    setting: &'static str,
    out: &Path,
    inputs: &[&Path],
    run_ok: bool,
) -> Result<()> {
    let o = resolved(out);
    let refuse = |what: String| {
        Err(Error::config(
            setting,
            format!("{}: {what}; write elsewhere", out.display()),
        ))
    };
    for input in inputs {
        let i = resolved(input);
        if o == i || o.starts_with(&i) && i.is_dir() {
            return refuse(format!(
                "it is or lies inside an input of this command ({})",
                input.display()
            ));
        }
        if i.starts_with(&o) {
            return refuse(format!(
                "it holds an input of this command ({})",
                input.display()
            ));
        }
    }
    if o.join("session.json").is_file() {
        return refuse("it holds a labeling session".into());
    }
    if o.join("config.json").is_file() && o.join("model.safetensors").is_file() {
        return refuse("it is a checkpoint".into());
    }
    if !run_ok && o.join("run.json").is_file() {
        return refuse("it holds a curve run".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn atomic_writes_replace_content_and_take_a_new_files_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("alkit-fsutil-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // What the umask gives a new file, measured rather than assumed.
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let ordinary = std::fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
        let state = dir.join("state.json");
        std::fs::write(&state, b"old").unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&state, b"new").unwrap();
        assert_eq!(std::fs::read(&state).unwrap(), b"new");
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, ordinary, "{mode:o} vs {ordinary:o}");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn csv_fields_are_written_as_given_and_quoted_only_where_needed() {
        let rows = vec![
            vec!["0.500000".to_string(), "train/7".to_string()],
            vec!["NaN".to_string(), "a,\"b\"\nc".to_string()],
        ];
        let dir = std::env::temp_dir().join(format!("alkit-csv-{}", std::process::id()));
        let path = dir.join("t.csv");
        write_csv(&path, &["acc", "id"], rows.clone()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // Dropped unfinished, a streamed file leaves the finished one as it was.
        let mut partial = CsvFile::create(&path, &["other"]).unwrap();
        partial.row(["1"]).unwrap();
        drop(partial);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "acc,id\n0.500000,train/7\nNaN,\"a,\"\"b\"\"\nc\"\n"
        );
        let mut rd = csv::Reader::from_reader(&bytes[..]);
        assert_eq!(rd.headers().unwrap(), vec!["acc", "id"]);
        let back: Vec<Vec<String>> = rd
            .records()
            .map(|r| r.unwrap().iter().map(String::from).collect())
            .collect();
        assert_eq!(back, rows);
    }
}
