//! Writing results without losing what a job reads: checks a program runs on its output paths
//! before any work, and the CSV writer every alkit table goes through.
//!
//! A scores file, a plot or a table folder named by a user can be, by mistake, one of the
//! job's inputs, or a run, a session or a checkpoint alkit keeps; these checks refuse it up
//! front, naming the setting, so that no job overwrites what it reads or loses work already
//! done. Writes are atomic: a reader never sees half a file.

pub use crate::fsutil::{check_output, check_output_dir, write_csv, CsvFile};
