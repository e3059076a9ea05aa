//! Stopping rules: when labeling more has stopped paying, read off a model's predictions on a
//! fixed stop set, round after round. Each round gives one [`StopMeasure`] (its predictions
//! against the round before, and how uncertain they are), and each [`StopRule`] says from the
//! measures so far whether to stop, as small-text 1.4 (`small_text.stopping_criteria`) decides
//! it on the same predictions:
//!
//! - stabilising predictions (Bloodgood & Vijay-Shanker 2009, `KappaAverage`): the mean of the
//!   last 3 Cohen's kappas between successive rounds' predictions is at least 0.99 (a kappa of
//!   identical predictions is 1);
//! - classification change (Zhu, Wang & Hovy 2008, `ClassificationChange`): no prediction
//!   changed since the round before;
//! - overall uncertainty (Zhu, Wang & Hovy 2008, `OverallUncertainty`): the mean entropy of
//!   the predictions, divided by `ln C`, is below 0.05;
//! - the change in F (Altschuler & Bloodgood 2019, `DeltaFScore`, two classes only): the last 3
//!   values of `1 - 2a / (2a + b + c)` are below 0.05, with `a` the items both rounds call
//!   positive (class 1) and `b`, `c` those only one of them does.

impl std::str::FromStr for StopRule {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        StopRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = StopRule::ALL.map(StopRule::name).to_vec();
                format!(
                    "unknown stopping rule `{s}`; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for StopRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl StopMeasure {
    /// Whether the figures are ones [`measure`] could give: kappa in `[-1, 1]`, the changed
    /// fraction and the uncertainty in `[0, 1]`, the change in F in `[0, 1]`.
    pub fn is_sound(&self) -> bool {
        let within = |v: f64, lo: f64, hi: f64| v.is_finite() && (lo..=hi).contains(&v);
        self.kappa.is_none_or(|k| within(k, -1.0, 1.0))
            && self.changed.is_none_or(|c| within(c, 0.0, 1.0))
            && within(self.uncertainty, 0.0, 1.0 + 1e-9)
            && self.delta_f.is_none_or(|d| within(d, 0.0, 1.0))
    }
}

/// What one round's predictions on the stop set say.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StopMeasure {
    /// Cohen's kappa between this round's and the last round's predicted classes (none in the
    /// first round).
    pub kappa: Option<f64>,
    /// The fraction of the stop set whose predicted class changed since the last round (none
    /// in the first round).
    pub changed: Option<f64>,
    /// The mean entropy of the predicted distributions over `ln C`, in `[0, 1]`.
    pub uncertainty: f64,
    /// `1 - 2a / (2a + b + c)` against the last round, for two classes (none otherwise, in the
    /// first round, and when neither round predicts the positive class).
    pub delta_f: Option<f64>,
}

/// A stopping rule, with small-text's defaults; serialised as its [`StopRule::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    /// The mean of the last 3 kappas is at least 0.99.
    KappaAverage,
    /// No prediction changed since the last round.
    ClassificationChange,
    /// The normalised mean entropy is below 0.05.
    OverallUncertainty,
    /// The last 3 changes in F are below 0.05 (two classes).
    DeltaF,
}

/// The rules' window and thresholds (small-text's defaults).
const WINDOW: usize = 3;
const KAPPA: f64 = 0.99;
const UNCERTAINTY: f64 = 0.05;
const DELTA_F: f64 = 0.05;

impl StopRule {
    /// Every rule, in the order the outputs list them.
    pub const ALL: [StopRule; 4] = [
        StopRule::KappaAverage,
        StopRule::ClassificationChange,
        StopRule::OverallUncertainty,
        StopRule::DeltaF,
    ];

    /// The rule's name in files.
    pub fn name(self) -> &'static str {
        match self {
            StopRule::KappaAverage => "kappa-average",
            StopRule::ClassificationChange => "classification-change",
            StopRule::OverallUncertainty => "overall-uncertainty",
            StopRule::DeltaF => "delta-f",
        }
    }

    /// Refuses a rule that can never say stop for predictions over `classes` classes: the
    /// change in F reads the positive class of two.
    pub fn check_classes(self, classes: usize) -> Result<(), String> {
        match (self, classes) {
            (StopRule::DeltaF, c) if c != 2 => Err(format!(
                "delta-f compares two rounds' positive predictions, which needs two classes; \
                 this data has {c}: use kappa-average, classification-change or \
                 overall-uncertainty"
            )),
            _ => Ok(()),
        }
    }

    /// Where the rule's present word "stop" began: the first round (an index into
    /// `measures`) after which it has said stop at every round since; `None` when it does not
    /// say stop after the last.
    pub fn stop_since(self, measures: &[StopMeasure]) -> Option<usize> {
        let says = |k: usize| self.says_stop(&measures[..=k]);
        let last = measures.len().checked_sub(1).filter(|&k| says(k))?;
        Some(
            (0..=last)
                .rev()
                .take_while(|&k| says(k))
                .last()
                .unwrap_or(last),
        )
    }

    /// Whether the rule says stop after the last of `measures` (one per round, in order).
    pub fn says_stop(self, measures: &[StopMeasure]) -> bool {
        let Some(last) = measures.last() else {
            return false;
        };
        // The rounds compared with a round before them; a window needs that many.
        let compared = &measures[1.min(measures.len())..];
        let window = compared.len().checked_sub(WINDOW).map(|s| &compared[s..]);
        match self {
            StopRule::KappaAverage => window.is_some_and(|w| {
                let kappas: Vec<f64> = w.iter().map(|m| m.kappa.unwrap_or(f64::NAN)).collect();
                kappas.iter().sum::<f64>() / WINDOW as f64 >= KAPPA
            }),
            StopRule::ClassificationChange => last.changed == Some(0.0),
            StopRule::OverallUncertainty => last.uncertainty < UNCERTAINTY,
            StopRule::DeltaF => {
                window.is_some_and(|w| w.iter().all(|m| m.delta_f.is_some_and(|d| d < DELTA_F)))
            }
        }
    }
}

/// The measure of predictions `probs (n, classes)` on the stop set, with `previous` the last
/// round's predicted classes `(n,)` (none in the first round). Returns it and this round's
/// predicted classes (the argmax, ties to the lowest class).
pub fn measure(probs: &[f32], classes: usize, previous: Option<&[u32]>) -> (StopMeasure, Vec<u32>) {
    let classes = classes.max(1);
    let n = probs.len() / classes;
    let mut predicted = Vec::with_capacity(n);
    let mut entropy = 0f64;
    for row in probs.chunks_exact(classes) {
        predicted.push(super::argmax(row) as u32);
        entropy += row_entropy(row);
    }
    let norm = if classes > 1 {
        (classes as f64).ln()
    } else {
        1.0
    };
    let uncertainty = if n == 0 {
        0.0
    } else {
        entropy / n as f64 / norm
    };
    let prev = previous.filter(|p| p.len() == n);
    let measure = StopMeasure {
        kappa: prev.map(|p| cohen_kappa(&predicted, p, classes)),
        changed: prev.map(|p| {
            let changed = predicted.iter().zip(p).filter(|(a, b)| a != b).count();
            changed as f64 / n.max(1) as f64
        }),
        uncertainty,
        delta_f: prev
            .filter(|_| classes == 2)
            .and_then(|p| delta_f(&predicted, p)),
    };
    (measure, predicted)
}

/// The entropy of a row normalised to sum to one (as SciPy's `entropy` normalises it), nats.
fn row_entropy(row: &[f32]) -> f64 {
    let total: f64 = row.iter().map(|&p| f64::from(p)).sum();
    if total <= 0.0 {
        return 0.0;
    }
    row.iter()
        .map(|&p| f64::from(p) / total)
        .filter(|&p| p > 0.0)
        .map(|p| -p * p.ln())
        .sum()
}

/// Cohen's kappa between two labelings of the same items over classes `0..classes`, as
/// scikit-learn's `cohen_kappa_score` with `labels=range(classes)` computes it; identical
/// labelings have kappa 1 (small-text's adaptation, where the formula would divide by zero).
pub fn cohen_kappa(a: &[u32], b: &[u32], classes: usize) -> f64 {
    if a == b {
        return 1.0;
    }
    let n = a.len() as f64;
    let (mut ca, mut cb) = (vec![0f64; classes], vec![0f64; classes]);
    let mut agree = 0f64;
    for (&x, &y) in a.iter().zip(b) {
        if let (Some(p), Some(q)) = (ca.get_mut(x as usize), cb.get_mut(y as usize)) {
            *p += 1.0;
            *q += 1.0;
        }
        agree += f64::from(u8::from(x == y));
    }
    let expected: f64 = ca.iter().zip(&cb).map(|(p, q)| p * q).sum::<f64>() / (n * n);
    // 1 - observed disagreement / expected disagreement, scikit-learn's form.
    1.0 - (1.0 - agree / n) / (1.0 - expected)
}

/// `1 - 2a / (2a + b + c)` between two binary labelings (class 1 positive); none when neither
/// predicts the positive class.
fn delta_f(now: &[u32], before: &[u32]) -> Option<f64> {
    let (mut a, mut b, mut c) = (0usize, 0usize, 0usize);
    for (&x, &y) in now.iter().zip(before) {
        match (y == 1, x == 1) {
            (true, true) => a += 1,
            (true, false) => b += 1,
            (false, true) => c += 1,
            _ => {}
        }
    }
    let denominator = 2 * a + b + c;
    (denominator > 0).then(|| 1.0 - 2.0 * a as f64 / denominator as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_since_is_where_the_present_stop_began() {
        let m = |changed: f64| StopMeasure {
            kappa: None,
            changed: Some(changed),
            uncertainty: 0.5,
            delta_f: None,
        };
        let rule = StopRule::ClassificationChange;
        let seq = [m(0.1), m(0.0), m(0.2), m(0.0), m(0.0)];
        assert_eq!(rule.stop_since(&seq), Some(3));
        assert_eq!(rule.stop_since(&seq[..3]), None);
        assert_eq!(rule.stop_since(&seq[..2]), Some(1));
        assert_eq!(rule.stop_since(&[]), None);
        assert_eq!("delta-f".parse::<StopRule>(), Ok(StopRule::DeltaF));
        assert!("kappa"
            .parse::<StopRule>()
            .unwrap_err()
            .contains("kappa-average"));
    }

    #[test]
    fn kappa_worked_by_hand() {
        // Agreement 3/4; marginals (2, 2) and (1, 3): expected (2*1 + 2*3)/16 = 1/2.
        let k = cohen_kappa(&[0, 0, 1, 1], &[0, 1, 1, 1], 2);
        assert!((k - 0.5).abs() < 1e-12, "{k}");
        assert_eq!(cohen_kappa(&[2, 2], &[2, 2], 3), 1.0);
    }

    #[test]
    fn rules_wait_for_their_window() {
        let m = |kappa: f64| StopMeasure {
            kappa: Some(kappa),
            changed: Some(0.0),
            uncertainty: 0.5,
            delta_f: Some(0.0),
        };
        let first = StopMeasure {
            kappa: None,
            changed: None,
            uncertainty: 0.5,
            delta_f: None,
        };
        let mut seen = vec![first, m(1.0), m(1.0)];
        assert!(!StopRule::KappaAverage.says_stop(&seen));
        assert!(!StopRule::DeltaF.says_stop(&seen));
        seen.push(m(0.98));
        assert!(StopRule::KappaAverage.says_stop(&seen), "mean 0.9933");
        assert!(StopRule::DeltaF.says_stop(&seen));
        seen.push(m(0.9));
        assert!(!StopRule::KappaAverage.says_stop(&seen));
        assert!(StopRule::ClassificationChange.says_stop(&seen));
        assert!(!StopRule::OverallUncertainty.says_stop(&seen));
    }
}
