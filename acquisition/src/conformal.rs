//! Split conformal prediction: sets of classes that hold the true label with probability at
//! least `1 - alpha`, from a held-out calibration split (Vovk et al. 2005; Angelopoulos &
//! Bates 2021).
//!
//! A [`ConformalScore`] says how unlike a class is for an item, from its probabilities:
//! - LAC (Sadinle et al. 2019): `1 - p_y`;
//! - APS (Romano, Sesia & Candes 2020): with the classes ranked by probability (lower class
//!   index first on ties), the mass of the classes ranked strictly above `y`, plus `u p_y`;
//! - RAPS (Angelopoulos et al. 2021): APS plus `lambda (rank(y) - k_reg)^+` (rank from 1).
//!
//! What `u` is, the [`ApsForm`], decides what APS and RAPS sets do:
//! - [`ApsForm::Romano`] (the default), `u = 0`: Romano et al.'s own non-randomised rule.
//!   A set runs down the ranking while the mass above a class is at most the threshold. The
//!   most probable class scores the least any class can (0, or RAPS's penalty at rank 1),
//!   and the threshold is one of those scores, so every set holds it (never empty); sets
//!   cover the label with probability at least `1 - alpha`.
//! - [`ApsForm::Randomized`], `u` uniform in `[0, 1)`, one draw per item shared by its
//!   classes (as MAPIE draws it; the caller passes the draws): coverage `1 - alpha` exactly
//!   in expectation, and a set may be empty.
//! - [`ApsForm::Inclusive`], `u = 1` (torchcp's `randomized=False`): the mass at and above
//!   the class. On an accurate model the threshold is within a hair of 1, so the items the
//!   model is surest of get *empty* sets and the rest nearly full ones; kept for comparison.
//!
//! [`Conformal::calibrate`] takes the `ceil((n + 1)(1 - alpha))`-th smallest calibration
//! score as the threshold `q` (infinite when that exceeds `n`: every class); a set is every
//! class scoring `<= q`. For exchangeable calibration and test items the set covers the label
//! with probability `>= 1 - alpha` (and below `1 - alpha + 1 / (n + 1)` without ties).

use crate::{Evidence, Needs, Probs, ScoreError, Scorer};

/// How APS and RAPS weigh a class's own probability (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApsForm {
    /// The mass strictly above the class (`u = 0`): never empty, coverage `>= 1 - alpha`.
    #[default]
    Romano,
    /// The mass above plus a uniform draw `u` times the class's own: exact coverage.
    Randomized,
    /// The mass at and above the class (`u = 1`): the old non-randomised form.
    Inclusive,
}

impl ApsForm {
    /// The weight `u` of a class's own probability for an item whose draw is `draw`.
    fn weight(self, draw: f64) -> f64 {
        match self {
            ApsForm::Romano => 0.0,
            ApsForm::Randomized => draw,
            ApsForm::Inclusive => 1.0,
        }
    }
}

/// How a class's non-conformity is scored (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ConformalScore {
    /// `1 - p_y`.
    Lac,
    /// The mass ranked above `y` (and `u p_y`).
    Aps {
        /// How `y`'s own mass counts.
        form: ApsForm,
    },
    /// APS with a rank penalty.
    Raps {
        /// Penalty per rank beyond `k_reg`.
        lambda: f32,
        /// Ranks free of penalty.
        k_reg: usize,
        /// How `y`'s own mass counts.
        form: ApsForm,
    },
}

impl ConformalScore {
    /// APS by Romano et al.'s non-randomised rule, the default.
    pub const APS: ConformalScore = ConformalScore::Aps {
        form: ApsForm::Romano,
    };

    /// The name tables use: `lac`, `aps`, `raps`, with `-randomized` or `-inclusive` after
    /// the other forms.
    pub fn name(&self) -> &'static str {
        match self {
            ConformalScore::Lac => "lac",
            ConformalScore::Aps { form } => match form {
                ApsForm::Romano => "aps",
                ApsForm::Randomized => "aps-randomized",
                ApsForm::Inclusive => "aps-inclusive",
            },
            ConformalScore::Raps { form, .. } => match form {
                ApsForm::Romano => "raps",
                ApsForm::Randomized => "raps-randomized",
                ApsForm::Inclusive => "raps-inclusive",
            },
        }
    }

    /// The form of APS or RAPS (`None` for LAC).
    pub fn form(&self) -> Option<ApsForm> {
        match *self {
            ConformalScore::Lac => None,
            ConformalScore::Aps { form } | ConformalScore::Raps { form, .. } => Some(form),
        }
    }

    /// Whether each item needs a uniform draw ([`ApsForm::Randomized`]).
    pub fn randomized(&self) -> bool {
        self.form() == Some(ApsForm::Randomized)
    }

    /// The score of every class for one probability row `(c,)` of an item whose uniform
    /// draw is `draw` (read by the randomised forms only), `(c,)`.
    pub fn class_scores(&self, p: &[f32], draw: f64) -> Vec<f64> {
        match *self {
            ConformalScore::Lac => p.iter().map(|&v| 1.0 - f64::from(v)).collect(),
            ConformalScore::Aps { form } => cumulative(p, form.weight(draw), 0.0, 0),
            ConformalScore::Raps {
                lambda,
                k_reg,
                form,
            } => cumulative(p, form.weight(draw), f64::from(lambda), k_reg),
        }
    }
}

/// The classes of a probability row by rank: probability descending, lower index first.
fn ranking(p: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    order
}

/// The mass ranked above each class, plus `u` times its own and `lambda (rank - k_reg)^+`
/// (rank from 1).
fn cumulative(p: &[f32], u: f64, lambda: f64, k_reg: usize) -> Vec<f64> {
    let mut out = vec![0.0; p.len()];
    let mut above = 0.0;
    for (rank0, c) in ranking(p).into_iter().enumerate() {
        let own = f64::from(p[c]);
        out[c] = above + u * own + lambda * (rank0 + 1).saturating_sub(k_reg) as f64;
        above += own;
    }
    out
}

/// A calibrated conformal predictor: the score and its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conformal {
    /// The non-conformity score.
    pub score: ConformalScore,
    /// Sets hold the classes scoring at most this (infinite: every class).
    pub threshold: f64,
}

impl Conformal {
    /// Calibrates `score` at miscoverage `alpha` in `(0, 1)` on `probs (n, c)` of held-out
    /// items with their `labels (n,)`; `draws (n,)` are the items' uniform draws in `[0, 1)`
    /// for a randomised form, and empty otherwise.
    pub fn calibrate(
        score: ConformalScore,
        probs: &Probs,
        labels: &[usize],
        alpha: f64,
        draws: &[f64],
    ) -> Result<Self, ScoreError> {
        let scores = label_scores(score, probs, labels, alpha, draws)?;
        let threshold = conformal_quantile(scores, alpha);
        Ok(Self { score, threshold })
    }

    /// The prediction set of one probability row whose item drew `draw` (read by the
    /// randomised forms only): ascending class indices.
    pub fn set(&self, p: &[f32], draw: f64) -> Vec<usize> {
        set_within(self.score, p, draw, |_| self.threshold)
    }
}

/// A Mondrian (class-conditional) conformal predictor (Vovk et al. 2003; Vovk 2012): one
/// threshold per class, each calibrated on the calibration items of that class alone, and a
/// set holds class `c` when `c` scores at most class `c`'s threshold. Each class's items are
/// then covered with probability at least `1 - alpha`, where the marginal predictor promises
/// that only on average over classes (a rare, hard class may be covered far less). A class
/// with fewer than `1 / alpha - 1` calibration items gets an infinite threshold: it is in
/// every set.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassConformal {
    /// The non-conformity score.
    pub score: ConformalScore,
    /// Per class `(C,)`, sets hold it when it scores at most this (infinite: always).
    pub thresholds: Vec<f64>,
}

impl ClassConformal {
    /// Calibrates `score` at miscoverage `alpha` class by class on `probs (n, c)` with
    /// `labels (n,)` (and the randomised forms' `draws (n,)`), as [`Conformal::calibrate`].
    pub fn calibrate(
        score: ConformalScore,
        probs: &Probs,
        labels: &[usize],
        alpha: f64,
        draws: &[f64],
    ) -> Result<Self, ScoreError> {
        let scores = label_scores(score, probs, labels, alpha, draws)?;
        let mut by_class = vec![Vec::new(); probs.classes()];
        for (&y, s) in labels.iter().zip(scores) {
            by_class[y].push(s);
        }
        let thresholds = by_class
            .into_iter()
            .map(|s| conformal_quantile(s, alpha))
            .collect();
        Ok(Self { score, thresholds })
    }

    /// The prediction set of one probability row whose item drew `draw`: ascending class
    /// indices.
    pub fn set(&self, p: &[f32], draw: f64) -> Vec<usize> {
        // A class past the calibrated ones is never in the set.
        let q = |c: usize| self.thresholds.get(c).copied().unwrap_or(f64::NEG_INFINITY);
        set_within(self.score, p, draw, q)
    }
}

/// The classes of row `p` (its item drew `draw`) whose `score` is at most their
/// `threshold`, ascending.
fn set_within(
    score: ConformalScore,
    p: &[f32],
    draw: f64,
    threshold: impl Fn(usize) -> f64,
) -> Vec<usize> {
    score
        .class_scores(p, draw)
        .iter()
        .enumerate()
        .filter(|&(c, &s)| s <= threshold(c))
        .map(|(c, _)| c)
        .collect()
}

/// Each calibration item's score at its own label, after the checks both predictors share:
/// `alpha` in `(0, 1)`, one label below `C` per row, the draws a randomised form needs.
fn label_scores(
    score: ConformalScore,
    probs: &Probs,
    labels: &[usize],
    alpha: f64,
    draws: &[f64],
) -> Result<Vec<f64>, ScoreError> {
    if !(alpha > 0.0 && alpha < 1.0) {
        return Err(ScoreError::Setting {
            setting: "conformal",
            why: format!("the miscoverage level {alpha} must be in (0, 1)"),
        });
    }
    let n = probs.n();
    if labels.len() != n || n == 0 {
        return Err(ScoreError::Shape {
            what: "calibration labels",
            expected: format!("({n},) with n > 0"),
            got: format!("{} labels", labels.len()),
        });
    }
    if let Some(&bad) = labels.iter().find(|&&l| l >= probs.classes()) {
        return Err(ScoreError::Shape {
            what: "calibration labels",
            expected: format!("class indices below {}", probs.classes()),
            got: format!("label {bad}"),
        });
    }
    check_draws(score, draws, n, "calibration draws")?;
    let draw = |i: usize| draws.get(i).copied().unwrap_or(0.0);
    Ok(probs
        .rows()
        .zip(labels)
        .enumerate()
        .map(|(i, (p, &y))| score.class_scores(p, draw(i))[y])
        .collect())
}

/// The split-conformal threshold of calibration scores: the `ceil((n + 1)(1 - alpha))`-th
/// smallest, infinite when that rank exceeds `n` (and for no scores at all).
pub(crate) fn conformal_quantile(mut scores: Vec<f64>, alpha: f64) -> f64 {
    let n = scores.len();
    scores.sort_by(f64::total_cmp);
    // The tolerance keeps a product that is an integer in exact arithmetic (n = 99 at
    // alpha 0.01) from rounding up to the next rank.
    let rank = ((n as f64 + 1.0) * (1.0 - alpha) - 1e-9).ceil() as usize;
    if rank > n {
        f64::INFINITY
    } else {
        scores[rank.max(1) - 1]
    }
}

/// Refuses draws that do not fit `score`: one per item in `[0, 1)` for a randomised form,
/// none otherwise.
pub fn check_draws(
    score: ConformalScore,
    draws: &[f64],
    n: usize,
    what: &'static str,
) -> Result<(), ScoreError> {
    if !score.randomized() {
        if draws.is_empty() {
            return Ok(());
        }
        return Err(ScoreError::Setting {
            setting: "draws",
            why: format!(
                "`{}` draws nothing; uniform draws are for the randomised forms",
                score.name()
            ),
        });
    }
    if draws.len() != n {
        return Err(ScoreError::Shape {
            what,
            expected: format!("({n},): one uniform draw per item"),
            got: format!("{} draws", draws.len()),
        });
    }
    match draws.iter().position(|u| !(0.0..1.0).contains(u)) {
        Some(i) => Err(ScoreError::Setting {
            setting: "draws",
            why: format!("draw {i} is {}, not in [0, 1)", draws[i]),
        }),
        None => Ok(()),
    }
}

/// The size of each candidate's conformal set as an acquisition score (larger sets: less
/// certain), plus half the probability mass outside the set, so that items whose sets have
/// one size are ordered by how close the next class is to entering (with Romano's rule and
/// a threshold of 0, what a model that fits its labeled items gets, every set holds one
/// class and the order is the top class's probability, lowest first). Calibrated on
/// [`Evidence::reference`] with the last layer's probabilities. In an acquisition round the
/// reference is the labeled set the model was trained on, so the threshold is optimistic
/// (sets smaller than a held-out split would give) and the guarantee does not hold; the
/// ranking is what acquisition uses. The randomised forms are refused: a score must not
/// depend on a draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SetSize {
    /// The non-conformity score.
    pub score: ConformalScore,
    /// The miscoverage level.
    pub alpha: f32,
}

impl SetSize {
    /// The score of one probability row under `cal`.
    pub fn of(cal: &Conformal, p: &[f32]) -> f32 {
        let set = cal.set(p, 0.0);
        let inside: f64 = set.iter().map(|&c| f64::from(p[c])).sum();
        (set.len() as f64 + 0.5 * (1.0 - inside).clamp(0.0, 1.0)) as f32
    }
}

impl Scorer for SetSize {
    fn name(&self) -> &str {
        "conformal-size"
    }
    fn needs(&self) -> Needs {
        Needs {
            reference: true,
            ..Needs::FEATURES
        }
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let f = ev.features(self.name())?;
        let r = ev.reference.as_deref().ok_or(ScoreError::Missing {
            scorer: self.name().to_string(),
            evidence: "labeled items to calibrate on (reference evidence)",
        })?;
        if self.score.randomized() {
            return Err(ScoreError::Setting {
                setting: "conformal",
                why: "a set size to rank by cannot depend on a random draw: use a \
                      non-randomised form"
                    .into(),
            });
        }
        let (score, alpha) = (self.score, f64::from(self.alpha));
        let key = format!("conformal-{}-{alpha}-{score:?}", score.name());
        let cal = r.memo(&key, |r| {
            let probs = r.features().probs()?;
            Conformal::calibrate(score, &probs, r.labels(), alpha, &[])
        })?;
        let probs = f.probs()?;
        Ok(probs.rows().map(|p| SetSize::of(&cal, p)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn scores_match_hand_worked_values() {
        let p = [0.2f32, 0.5, 0.3];
        assert!(close(
            &ConformalScore::Lac.class_scores(&p, 0.0),
            &[0.8, 0.5, 0.7]
        ));
        // Order 1, 2, 0: mass above 0, 0.5, 0.8; at and above 0.5, 0.8, 1.0.
        let aps = |form| ConformalScore::Aps { form };
        assert!(close(
            &aps(ApsForm::Romano).class_scores(&p, 0.9),
            &[0.8, 0.0, 0.5]
        ));
        assert!(close(
            &aps(ApsForm::Inclusive).class_scores(&p, 0.9),
            &[1.0, 0.5, 0.8]
        ));
        // u = 0.5: above + 0.5 p.
        assert!(close(
            &aps(ApsForm::Randomized).class_scores(&p, 0.5),
            &[0.9, 0.25, 0.65]
        ));
        let raps = ConformalScore::Raps {
            lambda: 0.1,
            k_reg: 1,
            form: ApsForm::Inclusive,
        };
        assert!(close(&raps.class_scores(&p, 0.0), &[1.2, 0.5, 0.9]));
        let romano = ConformalScore::Raps {
            lambda: 0.1,
            k_reg: 1,
            form: ApsForm::Romano,
        };
        assert!(close(&romano.class_scores(&p, 0.0), &[1.0, 0.0, 0.6]));
    }

    #[test]
    fn the_threshold_is_the_finite_sample_quantile() {
        // Four calibration items, LAC scores 0.1, 0.2, 0.3, 0.4; alpha 0.4:
        // ceil(5 * 0.6) = 3 -> 0.3. alpha 0.1: ceil(4.5) = 5 > 4 -> infinite.
        let probs = Probs::new(vec![0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4], 4, 2).unwrap();
        let lac = ConformalScore::Lac;
        let c = Conformal::calibrate(lac, &probs, &[0; 4], 0.4, &[]).unwrap();
        assert!((c.threshold - 0.3).abs() < 1e-6);
        assert_eq!(c.set(&[0.75, 0.25], 0.0), vec![0]);
        let all = Conformal::calibrate(lac, &probs, &[0; 4], 0.1, &[]).unwrap();
        assert_eq!(all.set(&[1.0, 0.0], 0.0), vec![0, 1]);
        assert!(Conformal::calibrate(lac, &probs, &[0; 4], 1.0, &[]).is_err());
        assert!(Conformal::calibrate(lac, &probs, &[0, 0, 0, 2], 0.1, &[]).is_err());
    }

    #[test]
    fn romanos_sets_are_never_empty_where_the_inclusive_form_empties_them() {
        // The case: nine confident right items and one less sure; alpha 0.2 takes
        // the 9th of 10 scores. Romano: every calibration item's label is on top, q = 0, and
        // each test set is the top class. Inclusive: q = 0.9, and the 0.95 item gets no
        // class at all.
        let mut cal = [0.9f32, 0.1, 0.0].repeat(9);
        cal.extend([0.5, 0.3, 0.2]);
        let cal = Probs::new(cal, 10, 3).unwrap();
        let romano = Conformal::calibrate(ConformalScore::APS, &cal, &[0; 10], 0.2, &[]).unwrap();
        assert_eq!(romano.threshold, 0.0);
        for p in [[0.95f32, 0.05, 0.0], [0.85, 0.1, 0.05]] {
            assert_eq!(romano.set(&p, 0.0), vec![0]);
        }
        let inclusive = ConformalScore::Aps {
            form: ApsForm::Inclusive,
        };
        let old = Conformal::calibrate(inclusive, &cal, &[0; 10], 0.2, &[]).unwrap();
        assert!((old.threshold - 0.9).abs() < 1e-6);
        assert_eq!(old.set(&[0.95, 0.05, 0.0], 0.0), Vec::<usize>::new());
        // RAPS with k_reg 0 charges the top class too, and every calibration score as
        // much at least: the top class stays in.
        let raps = ConformalScore::Raps {
            lambda: 0.5,
            k_reg: 0,
            form: ApsForm::Romano,
        };
        let r = Conformal::calibrate(raps, &cal, &[0; 10], 0.2, &[]).unwrap();
        assert_eq!(r.threshold, 0.5);
        assert_eq!(r.set(&[0.2, 0.5, 0.3], 0.0), vec![1]);
    }

    #[test]
    fn randomised_forms_take_one_draw_per_item() {
        let probs = Probs::new(vec![0.9, 0.1, 0.6, 0.4], 2, 2).unwrap();
        let rand = ConformalScore::Aps {
            form: ApsForm::Randomized,
        };
        let e = Conformal::calibrate(rand, &probs, &[0, 0], 0.4, &[0.5])
            .unwrap_err()
            .to_string();
        assert!(e.contains("one uniform draw per item"), "{e}");
        assert!(Conformal::calibrate(rand, &probs, &[0, 0], 0.4, &[0.5, 1.0]).is_err());
        assert!(Conformal::calibrate(ConformalScore::APS, &probs, &[0, 0], 0.4, &[0.5]).is_err());
        // Scores u p_0: 0.45 and 0.3; alpha 0.4 takes ceil(1.8) = 2nd: 0.45.
        let c = Conformal::calibrate(rand, &probs, &[0, 0], 0.4, &[0.5, 0.5]).unwrap();
        assert!((c.threshold - 0.45).abs() < 1e-6);
        assert_eq!(c.set(&[0.9, 0.1], 0.9), Vec::<usize>::new());
        assert_eq!(c.set(&[0.9, 0.1], 0.1), vec![0]);
    }
}
