//! A multi-label model's predictions against the true label sets: subset accuracy, Hamming
//! loss, micro and macro F1 (labels predicted where their probability reaches the threshold),
//! mean average precision and the mean per-label ECE (from the probabilities).
//!
//! The definitions are scikit-learn's (`accuracy_score`, `hamming_loss`, `f1_score` with
//! `zero_division=0`, `average_precision_score(average="macro")`), so that figures agree with
//! theirs on the same predictions; a label without a positive in the truth counts 0 average
//! precision in the mean, as scikit-learn counts it (its recall is undefined). The per-label
//! ECE is the binary reliability ECE (15 equal-width bins) of each label's probability against
//! its presence, averaged over labels.

use crate::error::{Error, Result};
use crate::metrics::ece_mce;
use serde::{Deserialize, Serialize};

/// The multi-label figures of one prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelMetrics {
    /// Fraction of items whose predicted set equals the true set.
    pub subset_accuracy: f64,
    /// Fraction of (item, label) pairs predicted wrongly.
    pub hamming_loss: f64,
    /// F1 over every (item, label) pair pooled.
    pub micro_f1: f64,
    /// Mean over labels of each label's F1.
    pub macro_f1: f64,
    /// Mean over labels of each label's average precision (0 for a label without a positive).
    pub map: f64,
    /// Mean over labels of each label's ECE.
    pub ece: f64,
}

/// The metrics of probabilities `probs (n, L)` against 0/1 `truth (n, L)`, labels predicted
/// where `p >= threshold`.
pub fn label_metrics(
    truth: &[u8],
    probs: &[f64],
    labels: usize,
    threshold: f64,
) -> Result<LabelMetrics> {
    if labels == 0
        || truth.is_empty()
        || truth.len() != probs.len()
        || !truth.len().is_multiple_of(labels)
    {
        return Err(Error::config(
            "probs",
            format!(
                "{} probabilities for {} truth values of {labels} labels",
                probs.len(),
                truth.len()
            ),
        ));
    }
    if let Some(p) = probs.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        return Err(Error::config("probs", format!("{p} is not a probability")));
    }
    let n = truth.len() / labels;
    let predicted: Vec<u8> = probs.iter().map(|&p| u8::from(p >= threshold)).collect();
    let exact = (0..n)
        .filter(|&i| truth[i * labels..(i + 1) * labels] == predicted[i * labels..(i + 1) * labels])
        .count();
    let wrong = truth.iter().zip(&predicted).filter(|(t, p)| t != p).count();
    let mut pooled = [0usize; 3];
    let (mut f1_sum, mut ap_sum, mut ece_sum) = (0.0, 0.0, 0.0);
    for l in 0..labels {
        let y: Vec<u8> = (0..n).map(|i| truth[i * labels + l]).collect();
        let p: Vec<f64> = (0..n).map(|i| probs[i * labels + l]).collect();
        let yhat: Vec<u8> = (0..n).map(|i| predicted[i * labels + l]).collect();
        let c = counts(&y, &yhat);
        pooled.iter_mut().zip(c).for_each(|(a, b)| *a += b);
        f1_sum += f1(c);
        ap_sum += average_precision(&y, &p).unwrap_or(0.0);
        let conf: Vec<f32> = p.iter().map(|&v| v as f32).collect();
        let hit: Vec<bool> = y.iter().map(|&v| v == 1).collect();
        ece_sum += ece_mce(&conf, &hit)?.0;
    }
    Ok(LabelMetrics {
        subset_accuracy: exact as f64 / n as f64,
        hamming_loss: wrong as f64 / truth.len() as f64,
        micro_f1: f1(pooled),
        macro_f1: f1_sum / labels as f64,
        map: ap_sum / labels as f64,
        ece: ece_sum / labels as f64,
    })
}

/// True positives, false positives and false negatives.
fn counts(y: &[u8], yhat: &[u8]) -> [usize; 3] {
    let mut c = [0usize; 3];
    for (&t, &p) in y.iter().zip(yhat) {
        match (t, p) {
            (1, 1) => c[0] += 1,
            (0, 1) => c[1] += 1,
            (1, 0) => c[2] += 1,
            _ => {}
        }
    }
    c
}

/// `2 tp / (2 tp + fp + fn)`, 0 when nothing is predicted or true.
fn f1([tp, fp, fn_]: [usize; 3]) -> f64 {
    let den = 2 * tp + fp + fn_;
    if den == 0 {
        0.0
    } else {
        (2 * tp) as f64 / den as f64
    }
}

/// Average precision of scores `p` for 0/1 truth `y`: `sum_k (R_k - R_{k-1}) P_k` over the
/// distinct thresholds, highest first (tied scores enter together); `None` without a positive.
pub fn average_precision(y: &[u8], p: &[f64]) -> Option<f64> {
    let positives = y.iter().filter(|&&v| v == 1).count();
    if positives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..y.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
    let (mut tp, mut seen, mut ap, mut last_recall) = (0usize, 0usize, 0.0, 0.0);
    let mut k = 0;
    while k < order.len() {
        let score = p[order[k]];
        while k < order.len() && p[order[k]] == score {
            tp += usize::from(y[order[k]] == 1);
            seen += 1;
            k += 1;
        }
        let recall = tp as f64 / positives as f64;
        ap += (recall - last_recall) * (tp as f64 / seen as f64);
        last_recall = recall;
    }
    Some(ap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_worked_by_hand() {
        // Two items, two labels; truth {a}, {a, b}; predicted at 0.5: {a}, {a}.
        let truth = [1, 0, 1, 1];
        let probs = [0.9, 0.2, 0.6, 0.4];
        let m = label_metrics(&truth, &probs, 2, 0.5).unwrap();
        assert_eq!(m.subset_accuracy, 0.5);
        assert_eq!(m.hamming_loss, 0.25);
        // Pooled: tp 2, fp 0, fn 1; label a F1 1, label b F1 0.
        assert!((m.micro_f1 - 0.8).abs() < 1e-12);
        assert!((m.macro_f1 - 0.5).abs() < 1e-12);
        // AP of a: both positive, 1; of b: its one positive ranked first, 1.
        assert!((m.map - 1.0).abs() < 1e-12);
    }

    #[test]
    fn ties_enter_together_and_no_positive_has_no_precision() {
        // Scores 0.5, 0.5, 0.1 with truth 1, 0, 1: one step to recall 1/2 at precision 1/2,
        // one to 1 at 2/3.
        let ap = average_precision(&[1, 0, 1], &[0.5, 0.5, 0.1]).unwrap();
        assert!((ap - (0.5 * 0.5 + 0.5 * 2.0 / 3.0)).abs() < 1e-12);
        assert_eq!(average_precision(&[0, 0], &[0.1, 0.2]), None);
        assert!(label_metrics(&[1, 0], &[0.5, 1.5], 2, 0.5).is_err());
    }
}
