//! The labeling page while the next model trains: what it offers (the batch's open items,
//! then the last ranking's next ones, the "spares"), the answers it takes meanwhile (saved to
//! the session's [`journal`] before the reply) and their teaching once the model is ready.

use super::http::Reply;
use super::state::{Action, AnswerBody, App, Inner, ServeEvent, Spare};
use crate::error::Result;
use crate::rng::{stream, Purpose};
use crate::session::journal::{self, Queued};
use crate::session::{check_note, Learner};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;

/// The fewest spares kept for a round (a batch of 5 answered in seconds still leaves the
/// person items to answer while the model trains).
const MIN_SPARES: usize = 20;

/// One item the page offers.
pub(super) struct Offer<'a> {
    pub(super) id: &'a str,
    round: Option<usize>,
    score: Option<f32>,
    /// `(rank from 1, of how many)`; 0 when unknown.
    rank: (usize, usize),
    spare: bool,
}

/// How many spares a round of batch size `n` keeps.
pub(super) fn spare_count(n: usize) -> usize {
    n.max(MIN_SPARES)
}

/// The spares after a query of `batch`: the candidates left by score (best first, ties by
/// pool position) when the round ranked them (`scored`: its `(indices, scores)`), else a
/// seeded random draw ([`random_spares`]).
pub(super) fn spares_after(
    learner: &Learner,
    scored: Option<(Vec<usize>, Vec<f32>)>,
    n: usize,
    key: u64,
) -> Vec<Spare> {
    let Some((indices, scores)) = scored else {
        return random_spares(learner, n, key);
    };
    let open: HashSet<usize> = learner.candidates(false).into_iter().collect();
    let mut order: Vec<usize> = (0..indices.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .enumerate()
        .filter(|&(_, k)| open.contains(&indices[k]))
        .take(n)
        .map(|(rank, k)| Spare {
            id: learner.items().ids()[indices[k]].clone(),
            index: indices[k],
            rank: Some(rank + 1),
            score: Some(scores[k]),
        })
        .collect()
}

/// `n` of the session's unlabeled, unqueried items drawn from the stream of
/// `(seed, Reserve, key)`, for a round that ranked none.
pub(super) fn random_spares(learner: &Learner, n: usize, key: u64) -> Vec<Spare> {
    let cand = learner.candidates(false);
    let mut rng = stream(learner.state().config.seed, Purpose::Reserve, key);
    rand::seq::index::sample(&mut rng, cand.len(), n.min(cand.len()))
        .into_iter()
        .map(|p| Spare {
            id: learner.items().ids()[cand[p]].clone(),
            index: cand[p],
            rank: None,
            score: None,
        })
        .collect()
}

/// What the page offers, in order: the batch's open items (neither skipped nor waiting),
/// then, while the next model trains, the open spares.
pub(super) fn offers(inner: &Inner) -> Vec<Offer<'_>> {
    let waiting: HashSet<&str> = inner.queue.iter().map(|q| q.id.as_str()).collect();
    let open = |id: &str| {
        !inner.skipped.contains(id) && !inner.spare_skips.contains(id) && !waiting.contains(id)
    };
    let mut out: Vec<Offer<'_>> = inner
        .state
        .pending
        .iter()
        .filter(|p| open(&p.id))
        .map(|p| Offer {
            id: &p.id,
            round: Some(p.round),
            score: p.score,
            rank: inner.ranks.get(&p.id).copied().unwrap_or((0, 0)),
            spare: false,
        })
        .collect();
    if inner.learner.is_none() {
        let pending: HashSet<&str> = inner.state.pending.iter().map(|p| p.id.as_str()).collect();
        out.extend(
            inner
                .spares
                .iter()
                .filter(|s| open(&s.id) && !pending.contains(s.id.as_str()))
                .map(|s| Offer {
                    id: &s.id,
                    round: None,
                    score: s.score,
                    rank: (s.rank.unwrap_or(0), 0),
                    spare: true,
                }),
        );
    }
    out
}

impl App {
    /// The offers as the page reads them, with the last model's guess on each.
    pub(super) fn offers_json(&self, inner: &Inner) -> Vec<Value> {
        offers(inner)
            .into_iter()
            .map(|o| {
                let predicted = inner
                    .predicted
                    .get(o.id)
                    .map(|&(c, prob)| json!({ "class": self.classes[c], "p": prob }));
                json!({
                    "id": o.id,
                    "index": self.items.position(o.id),
                    "round": o.round,
                    "score": o.score,
                    "rank": o.rank.0,
                    "of": o.rank.1,
                    "spare": o.spare,
                    "predicted": predicted,
                })
            })
            .collect()
    }

    /// Takes an answer while the model trains: checked against the state as saved and the
    /// answers already waiting, written to the journal, taught when the model is ready.
    pub(super) fn queue_answer(
        &self,
        inner: &mut Inner,
        b: AnswerBody,
        guess: Option<String>,
    ) -> std::result::Result<Reply, Reply> {
        if !offers(inner).iter().any(|o| o.id == b.id) {
            let why = if inner.queue.iter().any(|q| q.id == b.id) {
                "is answered and waits to be taught"
            } else {
                "is not waiting for an answer"
            };
            return Err(Reply::error(409, format!("`{}` {why}", b.id)));
        }
        let note = b.note.filter(|n| !n.trim().is_empty());
        if let Some(n) = &note {
            check_note(&b.id, n).map_err(|p| Reply::error(400, p))?;
        }
        inner.queue.push(Queued {
            round: Some(inner.state.rounds.len()),
            guess,
            note,
            ..Queued::new(b.id.clone(), b.label.clone())
        });
        if let Err(e) = journal::write(&self.dir, &inner.queue) {
            inner.queue.pop();
            return Err(Reply::error(500, format!("the answer was not saved: {e}")));
        }
        inner.undo.push(Action::Queued(b.id.clone()));
        (self.events)(&ServeEvent::Queued {
            id: &b.id,
            label: &b.label,
            waiting: inner.queue.len(),
        });
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    /// Undo while the model trains: a skip, or an answer still waiting.
    pub(super) fn undo_waiting(&self, inner: &mut Inner) -> std::result::Result<Reply, Reply> {
        match inner.undo.pop() {
            None => return Err(Reply::error(409, "nothing to undo in this batch")),
            Some(Action::Skip(id)) => inner.unskip(&id),
            Some(Action::Queued(id)) => {
                let Some(k) = inner.queue.iter().rposition(|q| q.id == id) else {
                    return Err(Reply::error(409, format!("`{id}` is not waiting")));
                };
                let q = inner.queue.remove(k);
                let saved = if inner.queue.is_empty() {
                    journal::clear(&self.dir)
                } else {
                    journal::write(&self.dir, &inner.queue)
                };
                if let Err(e) = saved {
                    inner.queue.insert(k, q);
                    inner.undo.push(Action::Queued(id));
                    return Err(Reply::error(500, format!("the undo was not saved: {e}")));
                }
                (self.events)(&ServeEvent::Undone { id: &id });
            }
            Some(a @ Action::Answer(..)) => {
                inner.undo.push(a);
                return Err(Self::busy());
            }
        }
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    /// Teaches the answers that waited while the model trained, each in the round it was
    /// given after, saves the state and clears the journal. On failure they stay waiting (and
    /// in the journal), taught again next time as repeats where they were taught.
    pub(super) fn teach_waiting(&self, learner: &mut Learner, inner: &mut Inner) -> Result<()> {
        inner.undo.retain(|a| !matches!(a, Action::Queued(_)));
        if inner.queue.is_empty() {
            return Ok(());
        }
        let queue = std::mem::take(&mut inner.queue);
        let taught = journal::teach(learner, &queue, Path::new("the labeling page"))
            .and_then(|t| learner.save_state(&self.dir).map(|()| t))
            .and_then(|t| journal::clear(&self.dir).map(|()| t));
        match taught {
            Ok(t) => {
                let ids: HashSet<&str> = queue.iter().map(|q| q.id.as_str()).collect();
                inner.spares.retain(|s| !ids.contains(s.id.as_str()));
                (self.events)(&ServeEvent::TaughtWaiting { taught: t.taught });
                Ok(())
            }
            Err(e) => {
                inner.queue = queue;
                Err(e)
            }
        }
    }
}

/// The last model's guesses on `spares`, added to `guesses`. Best effort, item by item when
/// the whole fails: a spare that cannot be read is dropped, never the round.
pub(super) fn guess_spares(
    learner: &Learner,
    spares: Vec<Spare>,
    device: &candle_core::Device,
    guesses: &mut std::collections::HashMap<String, (usize, f32)>,
) -> Vec<Spare> {
    let all = indices(&spares);
    let readable = |at: &[usize]| learner.predicted(at, device);
    if let Ok(p) = readable(&all) {
        for (s, cp) in spares.iter().zip(p.into_iter().flatten()) {
            guesses.insert(s.id.clone(), cp);
        }
        return spares;
    }
    spares
        .into_iter()
        .filter(|s| match readable(&[s.index]) {
            Ok(p) => {
                if let Some(&cp) = p.as_ref().and_then(|p| p.first()) {
                    guesses.insert(s.id.clone(), cp);
                }
                true
            }
            Err(_) => false,
        })
        .collect()
}

/// The spares' pool positions.
pub(super) fn indices(spares: &[Spare]) -> Vec<usize> {
    spares.iter().map(|s| s.index).collect()
}
