//! `stopping.csv`: per run and cycle, what the cycle's predictions on the run's stop set say
//! ([`StopMeasure`]) and whether each stopping rule ([`StopRule`]) would have ended the
//! labeling there, from that run's measures up to that cycle.

use crate::acquire::RunState;
use crate::error::Result;
use crate::fsutil::write_csv;
use crate::metrics::stopping::{StopMeasure, StopRule};
use std::path::Path;

/// Writes `stopping.csv`: `scorer,seed,cycle,labeled,kappa,changed,uncertainty,delta_f`, then
/// one 0/1 column per rule (named as [`StopRule::name`]). A cycle recorded before the measures
/// were kept, or a measure a cycle has none of, writes empty cells; so does a rule after such
/// a cycle in the same run, whose window it would need.
pub fn write_stopping_csv(path: &Path, states: &[RunState]) -> Result<()> {
    let mut header = vec![
        "scorer",
        "seed",
        "cycle",
        "labeled",
        "kappa",
        "changed",
        "uncertainty",
        "delta_f",
    ];
    header.extend(StopRule::ALL.map(StopRule::name));
    let rows = states.iter().flat_map(|st| {
        let measures: Vec<Option<StopMeasure>> = st.records.iter().map(|r| r.stopping).collect();
        st.records.iter().enumerate().map(move |(i, r)| {
            let m = measures[i];
            let mut row = vec![
                st.strategy.clone(),
                st.seed.to_string(),
                r.cycle.to_string(),
                r.labeled.to_string(),
                cell(m.and_then(|m| m.kappa)),
                cell(m.and_then(|m| m.changed)),
                cell(m.map(|m| m.uncertainty)),
                cell(m.and_then(|m| m.delta_f)),
            ];
            // The rules read every measure up to this cycle: all of them must be there.
            let seen: Option<Vec<StopMeasure>> = measures[..=i].iter().copied().collect();
            row.extend(StopRule::ALL.map(|rule| match &seen {
                Some(seen) => u8::from(rule.says_stop(seen)).to_string(),
                None => String::new(),
            }));
            row
        })
    });
    write_csv(path, &header, rows)
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.6}"))
}
