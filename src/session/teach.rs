//! Answers into a session: taught a whole batch at a time, every row checked before any is
//! applied; one answer at a time for the labeling page, with its undo; answer files read.

use super::learner::Learner;
use super::query::Query;
use super::state::{check_note, Answer, Labeled, Pending, Undo};
use crate::data::source::read_delimited;
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What teaching a file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Taught {
    /// Answers taught now.
    pub taught: usize,
    /// Answers for items that already had the class given: nothing changed for them.
    pub repeated: usize,
}

impl Learner {
    /// Teaches the seed labels `(id, class name)` the pool `source` gives (its class
    /// subfolders or label cells) as round 0; an error names the source and the item.
    pub(super) fn seeded(mut self, seeds: &[(String, String)], source: &str) -> Result<Learner> {
        let rows: Vec<Answer> = seeds
            .iter()
            .enumerate()
            .map(|(i, (id, c))| Answer::new(i + 1, id.clone(), c.clone()))
            .collect();
        match self.teach_rows(&rows, Path::new(source), 0, false) {
            Ok(_) => Ok(self),
            Err(Error::Row { path, row, problem }) => Err(Error::data(
                path,
                crate::error::DataProblem::Other(format!(
                    "the label it gives item `{}`: {problem}",
                    seeds.get(row.wrapping_sub(1)).map_or("?", |s| s.0.as_str())
                )),
            )),
            Err(e) => Err(e),
        }
    }

    /// Teaches `(row, id, class name)` answers read from `origin` (a file; `row` its line or
    /// task number in errors); all are checked before any is applied. An item already
    /// labeled with the class a row gives is left as it is and counted as repeated (a file
    /// exported again holds the earlier answers too); another class for it is an error.
    pub fn teach_from(
        &mut self,
        rows: &[(usize, String, String)],
        origin: &Path,
    ) -> Result<Taught> {
        let rows: Vec<Answer> = rows
            .iter()
            .map(|(r, id, c)| Answer::new(*r, id.clone(), c.clone()))
            .collect();
        self.teach_file_answers(&rows, origin)
    }

    /// [`Learner::teach_from`] for answers with their notes.
    pub fn teach_file_answers(&mut self, answers: &[Answer], origin: &Path) -> Result<Taught> {
        let round = self.state.rounds.len();
        self.teach_rows(answers, origin, round, true)
    }

    /// Teaches `answers` read from `origin` (a file, or what a page sent); all are checked
    /// before any is applied.
    pub fn teach_answers(&mut self, answers: &[Answer], origin: &Path) -> Result<usize> {
        let round = self.state.rounds.len();
        Ok(self.teach_rows(answers, origin, round, false)?.taught)
    }

    /// Teaches one answer, checked as [`Learner::teach_answers`] checks a file's rows, and
    /// returns what [`Learner::undo`] needs to take it back.
    pub fn teach_one(&mut self, answer: &Answer, origin: &Path) -> Result<Undo> {
        let removed: Vec<(usize, Pending)> = self
            .state
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.id == answer.id)
            .map(|(k, p)| (k, p.clone()))
            .collect();
        self.teach_answers(std::slice::from_ref(answer), origin)?;
        Ok(Undo {
            id: answer.id.clone(),
            removed,
        })
    }

    /// Takes back the answer `undo` came from: it must be the last label taught, in the
    /// current round. The item is unlabeled again and its pending entry is back in its place.
    pub fn undo(&mut self, undo: Undo) -> Result<()> {
        let round = self.state.rounds.len();
        match self.state.labeled.last() {
            Some(l) if l.id == undo.id && l.round == round && round > 0 => {}
            _ => {
                return Err(Error::config(
                    "undo",
                    format!(
                        "`{}` is not the last label taught in round {round}; only that one \
                         can be taken back",
                        undo.id
                    ),
                ))
            }
        }
        self.state.labeled.pop();
        let i = self
            .items
            .position(&undo.id)
            .ok_or_else(|| Error::config("undo", format!("`{}` is not in the pool", undo.id)))?;
        self.features.set_labels(&[(i, 0)])?;
        for (k, p) in undo.removed {
            let at = k.min(self.state.pending.len());
            self.state.pending.insert(at, p);
        }
        Ok(())
    }

    /// Writes a query's batch to `out` atomically as CSV: `id,index,path,score` (the image's
    /// path for image-folder pools, else empty; the score empty for random picks and joint
    /// criteria), best first, quoted as RFC 4180 requires so that `teach` reads every id back.
    pub fn write_batch(&self, out: &Path, batch: &[Query]) -> Result<()> {
        let folder = match crate::data::source::Source::parse(&self.state.source) {
            Ok(crate::data::source::Source::Images(dir)) => Some(dir),
            _ => None,
        };
        let rows = batch.iter().map(|q| {
            let path = folder
                .as_ref()
                .map(|d| d.join(&q.id).to_string_lossy().into_owned())
                .unwrap_or_default();
            let score = q.score.map(|v| v.to_string()).unwrap_or_default();
            vec![q.id.clone(), q.index.to_string(), path, score]
        });
        crate::fsutil::write_csv(out, &["id", "index", "path", "score"], rows)
    }

    /// Teaches `(id, class name)` answers; all are checked before any is applied.
    pub fn teach(&mut self, answers: &[(String, String)]) -> Result<usize> {
        let rows: Vec<Answer> = answers
            .iter()
            .enumerate()
            .map(|(i, (id, c))| Answer::new(i + 1, id.clone(), c.clone()))
            .collect();
        let round = self.state.rounds.len();
        Ok(self
            .teach_rows(&rows, Path::new("answers"), round, false)?
            .taught)
    }

    /// Teaches the answers in a CSV file with columns `id,label` and an optional `note`
    /// (label = class name); every row is checked before any is applied, and an error names
    /// the file and line. Repeated answers are as [`Learner::teach_from`] takes them.
    pub fn teach_csv(&mut self, path: &Path) -> Result<Taught> {
        let rows = read_answers(path)?;
        self.teach_file_answers(&rows, path)
    }
    /// The checks of an answer on its own: its note, its guess (a class) and the round it was
    /// given after (not past the session's `round`).
    fn check_answer(&self, answer: &Answer, round: usize) -> std::result::Result<(), String> {
        let id = &answer.id;
        if let Some(n) = &answer.note {
            check_note(id, n)?;
        }
        if let Some(g) = answer
            .guess
            .as_ref()
            .filter(|g| !self.state.classes.contains(g))
        {
            return Err(format!(
                "the model's guess `{g}` on `{id}` is not one of the classes"
            ));
        }
        match answer.round.filter(|&r| r > round) {
            Some(r) => Err(format!(
                "the answer on `{id}` is given after round {r}, yet the session has had {round} \
                 rounds: it belongs to another session.json (restore that one, or fix or \
                 delete this journal; its answers are then lost)"
            )),
            None => Ok(()),
        }
    }

    /// Checks every row, then applies them. With `repeats`, a row giving an already labeled
    /// item the class it has is skipped and counted; without, it is an error like any
    /// other relabeling.
    fn teach_rows(
        &mut self,
        rows: &[Answer],
        origin: &Path,
        round: usize,
        repeats: bool,
    ) -> Result<Taught> {
        let row_err = |row: usize, problem: String| Error::Row {
            path: origin.to_path_buf(),
            row,
            problem,
        };
        let labeled: HashMap<&str, &Labeled> = self
            .state
            .labeled
            .iter()
            .map(|l| (l.id.as_str(), l))
            .collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut labels = Vec::with_capacity(rows.len());
        let mut new: Vec<&Answer> = Vec::with_capacity(rows.len());
        let mut repeated = 0;
        for answer in rows {
            let Answer {
                row,
                id,
                label: class,
                ..
            } = answer;
            self.check_answer(answer, round)
                .map_err(|p| row_err(*row, p))?;
            let Some(i) = self.items.position(id) else {
                return Err(row_err(*row, format!("unknown id `{id}`")));
            };
            if let Some(prev) = seen.insert(id.as_str(), *row) {
                return Err(row_err(
                    *row,
                    format!("id `{id}` appears twice (also row {prev})"),
                ));
            }
            if let Some(l) = labeled.get(id.as_str()) {
                if repeats && l.label == *class {
                    repeated += 1;
                    continue;
                }
                return Err(row_err(
                    *row,
                    format!(
                        "id `{id}` is already labeled `{}` (round {}); this answer says `{class}`",
                        l.label, l.round
                    ),
                ));
            }
            let Some(c) = self.state.classes.iter().position(|k| k == class) else {
                return Err(row_err(
                    *row,
                    format!(
                        "label `{class}` is not one of the classes {:?}",
                        self.state.classes
                    ),
                ));
            };
            labels.push((i, c as u32));
            new.push(answer);
        }
        self.features.set_labels(&labels)?;
        let taught: HashSet<&str> = new.iter().map(|r| r.id.as_str()).collect();
        self.state
            .pending
            .retain(|p| !taught.contains(p.id.as_str()));
        self.state.labeled.extend(new.iter().map(|a| Labeled {
            id: a.id.clone(),
            label: a.label.clone(),
            round: a.round.unwrap_or(round),
            note: a.note.clone(),
            guess: a.guess.clone(),
        }));
        Ok(Taught {
            taught: new.len(),
            repeated,
        })
    }
}

/// Reads `id,label` rows (header required, extra columns ignored) with their line numbers.
pub fn read_answer_csv(path: &Path) -> Result<Vec<(usize, String, String)>> {
    Ok(read_answers(path)?
        .into_iter()
        .map(|a| (a.row, a.id, a.label))
        .collect())
}

/// Reads `id,label` rows and the optional `note` column (header required, other columns
/// ignored; an empty note is none) with their line numbers.
pub fn read_answers(path: &Path) -> Result<Vec<Answer>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_answers_from(path, &bytes, b',')
}

/// [`read_answers`] over bytes already read from `path`, fields split at `delimiter`
/// (`b'\t'` for TSV).
pub(crate) fn read_answers_from(path: &Path, bytes: &[u8], delimiter: u8) -> Result<Vec<Answer>> {
    let (header, rows) = read_delimited(path, bytes, delimiter)?;
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::Row {
                path: PathBuf::from(path),
                row: 1,
                problem: format!("the header has no `{name}` column (expected id,label)"),
            })
    };
    let (ic, lc) = (col("id")?, col("label")?);
    let nc = header.iter().position(|h| h == "note");
    rows.into_iter()
        .map(|(n, r)| {
            if r[lc].is_empty() {
                return Err(Error::Row {
                    path: PathBuf::from(path),
                    row: n,
                    problem: format!("id `{}` has an empty label", r[ic]),
                });
            }
            let note = nc.map(|c| r[c].clone()).filter(|s| !s.is_empty());
            Ok(Answer {
                row: n,
                id: r[ic].clone(),
                label: r[lc].clone(),
                note,
                guess: None,
                round: None,
            })
        })
        .collect()
}
