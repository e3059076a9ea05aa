//! Classification: OOD detection and calibration metrics over score vectors.
//!
//! Everything here works on plain score vectors, **higher score = more uncertain** (the
//! orientation of every alkit scorer), so any scorer, ours or a user's or one computed
//! elsewhere, gets the same metrics. Conventions, stated because users argue about them:
//!
//! - **AUROC** (OOD detection): OOD is the positive class, the score ranks positives high;
//!   ties count one half (the Mann-Whitney statistic with midranks, as scikit-learn's
//!   `roc_auc_score`).
//! - **AUPR-out** / **AUPR-in**: average precision (scikit-learn's `average_precision_score`,
//!   one threshold per distinct score, no interpolation) with OOD resp. in-distribution as the
//!   positive class; AUPR-in ranks by the negated score.
//! - **FPR@95**: in-distribution is the positive class, ranked by the negated score (OpenOOD
//!   v1.5's convention): the fraction of OOD items accepted at the first threshold where at
//!   least 95% of in-distribution items are accepted. OpenOOD since its commit of 2023-08-10
//!   takes the OOD items as the positives instead (the fraction of in-distribution items
//!   flagged where 95% of OOD items are caught), which gives other figures: 0.276 instead of
//!   0.336 for energy on the same scores.
//! - **rAULC** (Postels et al. 2021): order items by increasing uncertainty; `F_k` = accuracy of
//!   the `k` most certain; `AULC = (1/n) sum_k F_k / acc - 1`; `rAULC = AULC / AULC(oracle)`
//!   where the oracle puts every correct item first. Ties in the score are resolved by the
//!   expectation over random orders within each tied block. Undefined (an error) when the
//!   accuracy is 0 or 1.
//! - **ECE** / **MCE**: 15 equal-width bins on the confidence (max probability) `(0, 1/15],
//!   ..., (14/15, 1]` (0 goes to the first bin); ECE = `sum_b (|B_b| / n) |acc_b - conf_b|`,
//!   MCE = `max_b |acc_b - conf_b|` over non-empty bins.
//! - **NLL**: mean `-ln p(true class)`, nats. **Brier**: mean over items of
//!   `sum_c (p_c - 1[y = c])^2` (the multi-class form, in `[0, 2]`).
//! - **Misclassification AUROC**: AUROC with the misclassified items as positives.
//! - **Rejection curve**: accuracy on the retained items when the most uncertain fraction `r`
//!   is rejected, `r = 0, 0.01, ..., 0.99`; the theoretical maximum is `min(1, acc / (1 - r))`.

use crate::error::{Error, Result};
use serde::Serialize;

fn check_scores(scores: &[f32], what: &'static str) -> Result<()> {
    if scores.is_empty() {
        return Err(Error::config(what, "no scores"));
    }
    if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
        return Err(Error::config(
            what,
            format!("score at item {i} is {} (not finite)", scores[i]),
        ));
    }
    Ok(())
}

/// AUROC of `scores` for `positive` labels (higher score = more likely positive), ties half.
pub fn auroc(scores: &[f32], positive: &[bool]) -> Result<f64> {
    check_scores(scores, "scores")?;
    if scores.len() != positive.len() {
        return Err(Error::config(
            "labels",
            format!("{} scores, {} labels", scores.len(), positive.len()),
        ));
    }
    let n_pos = positive.iter().filter(|&&p| p).count();
    let n_neg = positive.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return Err(Error::config(
            "labels",
            "AUROC needs both classes present (only one is)",
        ));
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Midranks (1-based) over tied blocks; sum them for the positives.
    let mut rank_sum = 0f64;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let mid = (i + j) as f64 / 2.0 + 1.0;
        rank_sum += mid * order[i..=j].iter().filter(|&&k| positive[k]).count() as f64;
        i = j + 1;
    }
    let (p, q) = (n_pos as f64, n_neg as f64);
    Ok((rank_sum - p * (p + 1.0) / 2.0) / (p * q))
}

/// `(positives, negatives)` per distinct score, highest score first.
fn tied_blocks(scores: &[f32], positive: &[bool]) -> Vec<(f64, f64)> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut blocks: Vec<(f64, f64)> = Vec::new();
    for (i, &k) in order.iter().enumerate() {
        if i == 0 || scores[k] != scores[order[i - 1]] {
            blocks.push((0.0, 0.0));
        }
        let b = blocks.last_mut().expect("pushed above");
        if positive[k] {
            b.0 += 1.0;
        } else {
            b.1 += 1.0;
        }
    }
    blocks
}

/// Average precision of `scores` for `positive` labels (scikit-learn's definition).
pub fn average_precision(scores: &[f32], positive: &[bool]) -> Result<f64> {
    let _ = auroc(scores, positive)?; // the same input checks
    let n_pos = positive.iter().filter(|&&p| p).count() as f64;
    let (mut tp, mut fp, mut ap, mut prev_recall) = (0f64, 0f64, 0f64, 0f64);
    for (p, n) in tied_blocks(scores, positive) {
        tp += p;
        fp += n;
        let recall = tp / n_pos;
        ap += (recall - prev_recall) * tp / (tp + fp);
        prev_recall = recall;
    }
    Ok(ap)
}

/// ROC curve points `(fpr, tpr)` from the strictest threshold to the loosest, starting at
/// `(0, 0)`, one point per distinct score.
pub fn roc_curve(scores: &[f32], positive: &[bool]) -> Result<Vec<(f64, f64)>> {
    let _ = auroc(scores, positive)?;
    let n_pos = positive.iter().filter(|&&p| p).count() as f64;
    let n_neg = positive.len() as f64 - n_pos;
    let (mut tp, mut fp) = (0f64, 0f64);
    let mut pts = vec![(0.0, 0.0)];
    for (p, n) in tied_blocks(scores, positive) {
        tp += p;
        fp += n;
        pts.push((fp / n_neg, tp / n_pos));
    }
    Ok(pts)
}

/// OOD-detection metrics of one scorer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OodMetrics {
    /// AUROC, OOD positive.
    pub auroc: f64,
    /// Average precision, in-distribution positive (score negated).
    pub aupr_in: f64,
    /// Average precision, OOD positive.
    pub aupr_out: f64,
    /// FPR of OOD at 95% TPR of in-distribution.
    pub fpr95: f64,
}

/// OOD metrics from in-distribution and OOD scores (higher = more uncertain).
pub fn ood_metrics(in_dist: &[f32], ood: &[f32]) -> Result<OodMetrics> {
    check_scores(in_dist, "in-distribution scores")?;
    check_scores(ood, "OOD scores")?;
    let scores: Vec<f32> = in_dist.iter().chain(ood).copied().collect();
    let is_ood: Vec<bool> = (0..scores.len()).map(|i| i >= in_dist.len()).collect();
    let negated: Vec<f32> = scores.iter().map(|s| -s).collect();
    let is_in: Vec<bool> = is_ood.iter().map(|b| !b).collect();
    // FPR@95: ID positive on the negated score.
    let roc_in = roc_curve(&negated, &is_in)?;
    let fpr95 = roc_in
        .iter()
        .find(|(_, tpr)| *tpr >= 0.95 - 1e-12)
        .map_or(1.0, |p| p.0);
    Ok(OodMetrics {
        auroc: auroc(&scores, &is_ood)?,
        aupr_in: average_precision(&negated, &is_in)?,
        aupr_out: average_precision(&scores, &is_ood)?,
        fpr95,
    })
}

/// rAULC of `scores` (higher = more uncertain) given which predictions are `correct`.
pub fn raulc(scores: &[f32], correct: &[bool]) -> Result<f64> {
    check_scores(scores, "scores")?;
    if scores.len() != correct.len() {
        return Err(Error::config(
            "correct",
            format!("{} scores, {} labels", scores.len(), correct.len()),
        ));
    }
    let n = scores.len();
    let n_correct = correct.iter().filter(|&&c| c).count();
    if n_correct == 0 || n_correct == n {
        return Err(Error::config(
            "correct",
            "rAULC is undefined when the accuracy is 0 or 1",
        ));
    }
    let acc = n_correct as f64 / n as f64;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Expected sum_k F_k with ties averaged: within a tied block of size s holding c correct
    // items, the first j of the block hold j * c / s correct items in expectation.
    let mut sum_f = 0f64;
    let (mut before, mut k) = (0f64, 0usize);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let s = (j - i + 1) as f64;
        let c = order[i..=j].iter().filter(|&&q| correct[q]).count() as f64;
        for t in 1..=(j - i + 1) {
            k += 1;
            sum_f += (before + t as f64 * c / s) / k as f64;
        }
        before += c;
        i = j + 1;
    }
    let aulc = sum_f / n as f64 / acc - 1.0;
    // Oracle: all correct first. F_k = 1 for k <= n_correct, n_correct / k after.
    let oracle_sum: f64 = (1..=n)
        .map(|k| {
            if k <= n_correct {
                1.0
            } else {
                n_correct as f64 / k as f64
            }
        })
        .sum();
    let oracle = oracle_sum / n as f64 / acc - 1.0;
    Ok(aulc / oracle)
}

/// One reliability-diagram bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bin {
    /// Lower edge (exclusive, except 0 for the first bin).
    pub lo: f64,
    /// Upper edge (inclusive).
    pub hi: f64,
    /// Items in the bin.
    pub count: usize,
    /// Mean confidence of its items.
    pub confidence: f64,
    /// Accuracy of its items.
    pub accuracy: f64,
}

/// Reliability bins (15 equal-width on the confidence).
pub fn reliability(confidence: &[f32], correct: &[bool], bins: usize) -> Result<Vec<Bin>> {
    check_scores(confidence, "confidence")?;
    if confidence.len() != correct.len() {
        return Err(Error::config(
            "correct",
            format!("{} confidences, {} labels", confidence.len(), correct.len()),
        ));
    }
    let mut sums = vec![(0usize, 0f64, 0f64); bins];
    for (&c, &ok) in confidence.iter().zip(correct) {
        let c = f64::from(c).clamp(0.0, 1.0);
        let b = ((c * bins as f64).ceil() as usize).clamp(1, bins) - 1;
        sums[b].0 += 1;
        sums[b].1 += c;
        sums[b].2 += f64::from(u8::from(ok));
    }
    Ok(sums
        .iter()
        .enumerate()
        .map(|(b, &(count, conf, acc))| Bin {
            lo: b as f64 / bins as f64,
            hi: (b + 1) as f64 / bins as f64,
            count,
            confidence: if count > 0 { conf / count as f64 } else { 0.0 },
            accuracy: if count > 0 { acc / count as f64 } else { 0.0 },
        })
        .collect())
}

/// What a model's probabilities say of themselves against the labels: per item whether its
/// most likely class (the first of equal ones) is its label and its confidence (the largest
/// probability), and over all items the accuracy, ECE and MCE (15 bins), NLL and Brier.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbabilityMetrics {
    /// Per item: the most likely class is the label.
    pub correct: Vec<bool>,
    /// Per item: the largest probability.
    pub confidence: Vec<f32>,
    /// Fraction correct.
    pub accuracy: f64,
    /// Expected calibration error.
    pub ece: f64,
    /// Maximum calibration error.
    pub mce: f64,
    /// Mean negative log-likelihood.
    pub nll: f64,
    /// Multi-class Brier score.
    pub brier: f64,
}

/// [`ProbabilityMetrics`] of `probs (n, c)` for `labels (n,)`.
pub fn probability_metrics(
    probs: &alkit_acquisition::Probs,
    labels: &[u32],
) -> Result<ProbabilityMetrics> {
    let correct: Vec<bool> = probs
        .rows()
        .zip(labels)
        .map(|(r, &y)| {
            r.iter()
                .enumerate()
                .fold(0, |b, (i, &v)| if v > r[b] { i } else { b })
                == y as usize
        })
        .collect();
    let confidence: Vec<f32> = probs
        .rows()
        .map(|r| r.iter().cloned().fold(0.0, f32::max))
        .collect();
    let (ece, mce) = ece_mce(&confidence, &correct)?;
    let (nll, brier) = nll_brier(probs.as_slice(), probs.classes(), labels)?;
    let accuracy = correct.iter().filter(|&&k| k).count() as f64 / correct.len().max(1) as f64;
    Ok(ProbabilityMetrics {
        correct,
        confidence,
        accuracy,
        ece,
        mce,
        nll,
        brier,
    })
}

/// Expected and maximum calibration error over 15 bins.
pub fn ece_mce(confidence: &[f32], correct: &[bool]) -> Result<(f64, f64)> {
    let bins = reliability(confidence, correct, 15)?;
    let n = confidence.len() as f64;
    let ece = bins
        .iter()
        .map(|b| b.count as f64 / n * (b.accuracy - b.confidence).abs())
        .sum();
    let mce = bins
        .iter()
        .filter(|b| b.count > 0)
        .map(|b| (b.accuracy - b.confidence).abs())
        .fold(0.0, f64::max);
    Ok((ece, mce))
}

/// Mean NLL and multi-class Brier score of probabilities `(n, c)` for `labels`.
pub fn nll_brier(probs: &[f32], classes: usize, labels: &[u32]) -> Result<(f64, f64)> {
    if probs.len() != labels.len() * classes || labels.is_empty() {
        return Err(Error::config(
            "probs",
            format!(
                "{} values for {} labels x {classes} classes",
                probs.len(),
                labels.len()
            ),
        ));
    }
    let (mut nll, mut brier) = (0f64, 0f64);
    for (row, &y) in probs.chunks_exact(classes).zip(labels) {
        let y = y as usize;
        if y >= classes {
            return Err(Error::config(
                "labels",
                format!("label {y} is not below {classes}"),
            ));
        }
        nll -= f64::from(row[y]).max(1e-300).ln();
        brier += row
            .iter()
            .enumerate()
            .map(|(c, &p)| (f64::from(p) - f64::from(u8::from(c == y))).powi(2))
            .sum::<f64>();
    }
    let n = labels.len() as f64;
    Ok((nll / n, brier / n))
}

/// Rejection-classification curve: `(fraction rejected, accuracy retained, oracle accuracy)`
/// for fractions `0, 0.01, ..., 0.99`, rejecting the most uncertain first (ties rejected in
/// index order, after the stable sort).
pub fn rejection_curve(scores: &[f32], correct: &[bool]) -> Result<Vec<(f64, f64, f64)>> {
    check_scores(scores, "scores")?;
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let acc = correct.iter().filter(|&&c| c).count() as f64 / n as f64;
    Ok((0..100)
        .map(|p| {
            let r = p as f64 / 100.0;
            let keep = ((1.0 - r) * n as f64).round().max(1.0) as usize;
            let kept = order[..keep].iter().filter(|&&i| correct[i]).count() as f64 / keep as f64;
            (r, kept, (acc / (1.0 - r)).min(1.0))
        })
        .collect())
}

/// Calibration metrics of one scorer (the prediction's metrics do not depend on the scorer,
/// but are repeated per scorer in `metrics.json` for convenience).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibrationMetrics {
    /// rAULC of the scorer.
    pub raulc: f64,
    /// ECE of the predicted probabilities.
    pub ece: f64,
    /// MCE of the predicted probabilities.
    pub mce: f64,
    /// Mean NLL.
    pub nll: f64,
    /// Multi-class Brier score.
    pub brier: f64,
    /// AUROC of the scorer for detecting misclassified items.
    pub misclassification_auroc: f64,
}

/// Temperature scaling in place: each row of log-probabilities (or logits) `(n, classes)`
/// becomes `log softmax(row / t)`, with the log-sum-exp taken in `f64`.
pub fn temperature_scale(log_probs: &mut [f32], classes: usize, t: f64) -> Result<()> {
    if classes == 0 || !log_probs.len().is_multiple_of(classes) {
        return Err(Error::config(
            "logits",
            "shape does not match the class count",
        ));
    }
    if !(t.is_finite() && t > 0.0) {
        return Err(Error::config(
            "temperature",
            format!("{t} is not a positive number"),
        ));
    }
    for row in log_probs.chunks_exact_mut(classes) {
        let scaled: Vec<f64> = row.iter().map(|&v| f64::from(v) / t).collect();
        let m = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + scaled.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        for (r, v) in row.iter_mut().zip(scaled) {
            *r = (v - lse) as f32;
        }
    }
    Ok(())
}

/// Fits a temperature `T` on validation logits `(n, c)` by minimising the NLL of
/// `softmax(z / T)` (golden-section search on `ln T` in `[-3, 3]`).
pub fn fit_temperature(logits: &[f32], classes: usize, labels: &[u32]) -> Result<f64> {
    if logits.len() != labels.len() * classes || labels.is_empty() {
        return Err(Error::config("logits", "shape does not match the labels"));
    }
    if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
        return Err(Error::config(
            "logits",
            format!(
                "row {} holds a non-finite logit ({})",
                i / classes.max(1),
                logits[i]
            ),
        ));
    }
    let nll = |t: f64| -> f64 {
        let mut s = 0.0;
        for (row, &y) in logits.chunks_exact(classes).zip(labels) {
            let m = row
                .iter()
                .map(|&v| f64::from(v) / t)
                .fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row
                .iter()
                .map(|&v| (f64::from(v) / t - m).exp())
                .sum::<f64>()
                .ln();
            s += lse - f64::from(row[y as usize]) / t;
        }
        s
    };
    let (mut a, mut b) = (-3f64, 3f64);
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..80 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        if nll(c.exp()) < nll(d.exp()) {
            b = d;
        } else {
            a = c;
        }
    }
    Ok(((a + b) / 2.0).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auroc_and_ap_by_hand_with_ties() {
        // scores (pos?): 0.1(n) 0.4(p) 0.4(n) 0.8(p). Pairs (p, n): (0.4, 0.1) win, (0.4, 0.4)
        // tie = 1/2, (0.8, 0.1) win, (0.8, 0.4) win -> AUROC = 3.5 / 4 = 0.875 (sklearn agrees).
        let s = [0.1, 0.4, 0.4, 0.8];
        let p = [false, true, false, true];
        assert!((auroc(&s, &p).unwrap() - 0.875).abs() < 1e-12);
        // AP: thresholds 0.8: P=1, R=.5; 0.4: tp 2 fp 1 -> P=2/3, R=1; 0.1: R stays 1.
        // AP = 0.5 * 1 + 0.5 * 2/3 = 0.8333333 (sklearn's average_precision_score: 0.8333).
        assert!((average_precision(&s, &p).unwrap() - 5.0 / 6.0).abs() < 1e-12);
        // All-equal scores: AUROC 0.5, AP = prevalence.
        assert_eq!(auroc(&[1.0; 4], &p).unwrap(), 0.5);
        assert!((average_precision(&[1.0; 4], &p).unwrap() - 0.5).abs() < 1e-12);
        // One class only, NaN: clear errors.
        assert!(auroc(&s, &[true; 4]).is_err());
        assert!(auroc(&[0.1, f32::NAN], &[true, false])
            .unwrap_err()
            .to_string()
            .contains("item 1"));
    }

    #[test]
    fn matches_scikit_learn_with_ties() {
        // Reference values from scikit-learn 1.9.1 (roc_auc_score, average_precision_score,
        // and OpenOOD's fpr[argmax(tpr >= 0.95)] on roc_curve(1 - y, -s)) for this vector:
        // auroc 0.9, aupr_out 0.8357142857142857, aupr_in 0.9214285714285715, fpr95 0.6.
        let s = [0.3, 0.1, 0.7, 0.7, 0.2, 0.9, 0.5, 0.5, 0.5, 0.05, 0.8, 0.3];
        let y = [0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0];
        let id: Vec<f32> = s
            .iter()
            .zip(&y)
            .filter(|p| *p.1 == 0)
            .map(|p| *p.0)
            .collect();
        let ood: Vec<f32> = s
            .iter()
            .zip(&y)
            .filter(|p| *p.1 == 1)
            .map(|p| *p.0)
            .collect();
        let m = ood_metrics(&id, &ood).unwrap();
        assert!((m.auroc - 0.9).abs() < 1e-12, "{m:?}");
        assert!(
            (m.aupr_out - 0.835_714_285_714_285_7).abs() < 1e-12,
            "{m:?}"
        );
        assert!((m.aupr_in - 0.921_428_571_428_571_5).abs() < 1e-12, "{m:?}");
        assert!((m.fpr95 - 0.6).abs() < 1e-12, "{m:?}");
    }

    #[test]
    fn ood_metrics_by_hand() {
        // ID scores 0..=19 (20 items), OOD scores 10.5..=29.5 (20 items).
        // FPR@95: accept ID with score <= t; 95% of 20 = 19 items -> t = 18; OOD accepted
        // (score <= 18): 10.5..17.5 = 8 -> FPR = 0.4.
        let id: Vec<f32> = (0..20).map(|v| v as f32).collect();
        let ood: Vec<f32> = (0..20).map(|v| v as f32 + 10.5).collect();
        let m = ood_metrics(&id, &ood).unwrap();
        assert!((m.fpr95 - 0.4).abs() < 1e-12, "{m:?}");
        // AUROC: OOD item v+10.5 beats ID items 0..=min(19, v+10): count = min(20, v+11),
        // sum over v = 0..19 = 11+12+...+20 (v = 0..9: 110+45=155) + 10*20 = 355 -> 355/400.
        assert!((m.auroc - 355.0 / 400.0).abs() < 1e-12);
        assert!(m.aupr_in > 0.5 && m.aupr_out > 0.5);
    }

    #[test]
    fn raulc_by_hand_and_edge_cases() {
        // Perfect ranking (wrong items most uncertain) gives rAULC = 1; the reverse is negative.
        let correct = [true, true, false, true, false];
        assert!((raulc(&[0.1, 0.2, 0.9, 0.3, 0.8], &correct).unwrap() - 1.0).abs() < 1e-12);
        assert!(raulc(&[0.9, 0.8, 0.1, 0.7, 0.2], &correct).unwrap() < 0.0);
        // All tied: F_k = acc in expectation for every k -> AULC = 0 -> rAULC = 0.
        assert!(raulc(&[0.5; 5], &correct).unwrap().abs() < 1e-12);
        // Worked by hand, n = 4, correct = (1, 0, 1, 1), scores give order 0, 1, 2, 3:
        // F = (1, 1/2, 2/3, 3/4), acc = 3/4: AULC = (1 + .5 + .6667 + .75)/4/.75 - 1 = -0.0277778.
        // Oracle F = (1, 1, 1, 3/4): (3.75/4)/.75 - 1 = 0.25. rAULC = -0.1111111.
        let got = raulc(&[0.1, 0.2, 0.3, 0.4], &[true, false, true, true]).unwrap();
        assert!((got + 1.0 / 9.0).abs() < 1e-9, "{got}");
        assert!(raulc(&[0.1, 0.2], &[true, true]).is_err());
        assert!(raulc(&[0.1, 0.2], &[false, false]).is_err());
        assert!(raulc(&[0.1, f32::NAN], &[true, false]).is_err());
    }

    #[test]
    fn calibration_by_hand() {
        // Two items: p = (0.9, 0.1) label 0 (correct, conf .9); p = (0.6, 0.4) label 1 (wrong,
        // conf .6). Bins of width 1/15: .9 -> bin 13, .6 -> bin 8 (.6*15 = 9 -> ceil 9 -> 8).
        // ECE = .5 * |1 - .9| + .5 * |0 - .6| = 0.35; MCE = 0.6.
        let (ece, mce) = ece_mce(&[0.9, 0.6], &[true, false]).unwrap();
        assert!((ece - 0.35).abs() < 1e-6 && (mce - 0.6).abs() < 1e-6);
        // NLL = (-ln .9 - ln .4) / 2 = (0.1053605 + 0.9162907) / 2 = 0.5108256.
        // Brier = ((.1)^2 + (.1)^2 + (.6)^2 + (.6)^2) / 2 = (0.02 + 0.72) / 2 = 0.37.
        let (nll, brier) = nll_brier(&[0.9, 0.1, 0.6, 0.4], 2, &[0, 1]).unwrap();
        assert!((nll - 0.510_825_6).abs() < 1e-6 && (brier - 0.37).abs() < 1e-6);
        // Rejection: reject the most uncertain half -> retained accuracy 1.
        let curve = rejection_curve(&[0.1, 0.9], &[true, false]).unwrap();
        assert_eq!(curve[0].1, 0.5);
        assert_eq!(curve[50].1, 1.0);
    }

    #[test]
    fn temperature_recovers_a_known_scale() {
        // Logits 3 * (true class one-hot), labels always right except one in four: the NLL-
        // optimal temperature makes softmax put 3/4 on the labeled class: e^(3/T) / (e^(3/T) + 1)
        // = 0.75 -> T = 3 / ln 3 = 2.7307.
        let logits = [3.0, 0.0, 3.0, 0.0, 3.0, 0.0, 3.0, 0.0];
        let labels = [0, 0, 0, 1];
        let t = fit_temperature(&logits, 2, &labels).unwrap();
        assert!((t - 3.0 / 3f64.ln()).abs() < 1e-4, "{t}");
        // Scaled by that temperature the labeled class gets 3/4 (worked by hand above), and
        // the rows stay normalised.
        let mut lp = logits.to_vec();
        temperature_scale(&mut lp, 2, t).unwrap();
        assert!((f64::from(lp[0]).exp() - 0.75).abs() < 1e-4, "{lp:?}");
        assert!((f64::from(lp[0]).exp() + f64::from(lp[1]).exp() - 1.0).abs() < 1e-6);
        assert!(temperature_scale(&mut lp, 2, 0.0).is_err());
        assert!(temperature_scale(&mut lp, 3, 1.0).is_err());
    }
}
