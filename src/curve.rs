//! Acquisition curves: several strategies x several seeds, written as CSV tables and plots.
//!
//! Layout of an output folder:
//! - `run.json`: the [`CurveSpec`] (what `--resume` continues);
//! - `runs/<strategy>-seed<k>.json`: one [`RunState`] per run, rewritten after every cycle;
//! - `curve.csv`: `scorer,seed,cycle,labeled,acc,nll,train_s,score_s`, rewritten after every
//!   finished run;
//! - `summary.csv`: per strategy, mean and sample std over seeds of ACC and NLL averaged over
//!   cycles `1..=cycles` (the paper's Table 3 convention);
//! - `curve.svg`, `curve.png`: mean ± std of ACC and NLL against the labeled count.

use crate::acquire::{run, LoopConfig, RunContext, RunState, Strategy};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_atomic, write_json};
use crate::nn::Arch;
use crate::observe::Observer;
use crate::plot::{Figure, Panel, Series};
use alkit_acquisition::{
    BatchBald, Builtin, DuqCertainty, ExGrad, ExGradV, GradNorm, GradRequest, NeGrad, PerturbKl,
    ReGrad, SampleRequest, SampleScore, SampleScorer, Scorer, Selection, UnGrad,
};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// The strategies the CLI knows by name: a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Predictive entropy, top-k.
    Entropy,
    /// Margin, top-k.
    Margin,
    /// Least confidence, top-k.
    LeastConfidence,
    /// Uniformly random.
    Random,
    /// REGrad* (layer selection + perturbation), top-k.
    RegradStar,
    /// REGrad (layer selection), top-k.
    Regrad,
    /// ExGrad, top-k.
    Exgrad,
    /// NEGrad, top-k.
    Negrad,
    /// UNGrad, top-k.
    Ungrad,
    /// GradNorm, top-k.
    Gradnorm,
    /// ExGrad's V-term, top-k.
    ExgradV,
    /// Expected KL under input noise, top-k.
    PerturbX,
    /// Expected KL under weight noise, top-k.
    PerturbTheta,
    /// BALD (mutual information) over MC-dropout samples.
    Bald,
    /// DUQ's `1 - max_c K_c` (needs a DUQ model).
    Duq,
    /// BatchBALD (Kirsch et al. 2019): the batch that maximises the joint mutual information
    /// over MC-dropout samples, chosen greedily.
    BatchBald,
    /// Entropy of the MC-dropout mean.
    McEntropy,
    /// Class variance over MC-dropout samples.
    ClassVariance,
    /// Variation ratio over MC-dropout samples.
    VariationRatio,
    /// One minus the mean max-probability over MC-dropout samples.
    McMaxProb,
}

/// How a curve's scored strategies select (applied to every strategy but `random`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectKind {
    /// The `query` highest scores.
    #[default]
    TopK,
    /// Sampling with weights `score^beta`.
    Power,
    /// Sampling with weights `exp(beta score)`.
    Softmax,
    /// Sampling with weights `rank^-beta`.
    Softrank,
    /// BatchBALD's joint selection (Kirsch et al. 2019). It needs the draws, not a score
    /// vector, so it applies to `bald` only (which then runs as `batchbald`).
    #[serde(rename = "batchbald")]
    BatchBald,
}

impl SelectKind {
    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            SelectKind::TopK => "top-k",
            SelectKind::Power => "power",
            SelectKind::Softmax => "softmax",
            SelectKind::Softrank => "softrank",
            SelectKind::BatchBald => "batchbald",
        }
    }

    /// The selection over scores with inverse temperature `beta`; `None` for
    /// [`SelectKind::BatchBald`], which does not select from scores.
    pub fn selection(self, beta: f32) -> Option<Selection> {
        Some(match self {
            SelectKind::TopK => Selection::TopK,
            SelectKind::Power => Selection::Power { beta },
            SelectKind::Softmax => Selection::Softmax { beta },
            SelectKind::Softrank => Selection::SoftRank { beta },
            SelectKind::BatchBald => return None,
        })
    }
}

impl FromStr for SelectKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            SelectKind::TopK,
            SelectKind::Power,
            SelectKind::Softmax,
            SelectKind::Softrank,
            SelectKind::BatchBald,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| {
            format!(
                "unknown selection `{s}`; expected one of: top-k, power, softmax, softrank, batchbald"
            )
        })
    }
}

/// Settings of the parameterised scorers (REGrad's `lambda`, REGrad*'s noise).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScorerSettings {
    /// REGrad layer-selection strength `lambda`.
    pub lambda: f32,
    /// REGrad* input-noise standard deviation on the `[0, 1]` scale.
    pub sigma: f32,
    /// REGrad*'s number of perturbed copies `N`.
    pub perturbations: usize,
    /// Perturb-x input-noise standard deviation on the `[0, 1]` scale.
    pub perturb_x_sigma: f32,
    /// Perturb-theta weight-noise standard deviation.
    pub perturb_theta_sigma: f32,
    /// Draws of Perturb-x and Perturb-theta.
    pub perturb_samples: usize,
    /// MC-dropout forward passes of the sample scorers (BALD, ...).
    pub mc_samples: usize,
    /// Selection mode of every scored strategy.
    pub select: SelectKind,
    /// Inverse temperature of the stochastic selection modes.
    pub beta: f32,
    /// Sample scorers and BatchBALD read the members of an ensemble model instead of
    /// MC-dropout passes (set when the loop trains ensembles).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub members: bool,
}

impl Default for ScorerSettings {
    fn default() -> Self {
        Self {
            lambda: 0.3,
            sigma: 0.02,
            perturbations: 8,
            perturb_x_sigma: 0.05,
            perturb_theta_sigma: 0.01,
            perturb_samples: 8,
            mc_samples: 20,
            select: SelectKind::TopK,
            beta: 1.0,
            members: false,
        }
    }
}

impl StrategyKind {
    /// Every strategy, in CLI order.
    pub const ALL: [StrategyKind; 20] = [
        StrategyKind::Entropy,
        StrategyKind::Margin,
        StrategyKind::LeastConfidence,
        StrategyKind::Random,
        StrategyKind::RegradStar,
        StrategyKind::Regrad,
        StrategyKind::Exgrad,
        StrategyKind::Negrad,
        StrategyKind::Ungrad,
        StrategyKind::Gradnorm,
        StrategyKind::ExgradV,
        StrategyKind::PerturbX,
        StrategyKind::PerturbTheta,
        StrategyKind::Bald,
        StrategyKind::BatchBald,
        StrategyKind::McEntropy,
        StrategyKind::ClassVariance,
        StrategyKind::VariationRatio,
        StrategyKind::McMaxProb,
        StrategyKind::Duq,
    ];

    /// The strategies `alkit curve` runs when none is named.
    pub const DEFAULT: [StrategyKind; 4] = [
        StrategyKind::Entropy,
        StrategyKind::Margin,
        StrategyKind::LeastConfidence,
        StrategyKind::Random,
    ];

    /// The CLI/CSV name.
    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Entropy => "entropy",
            StrategyKind::Margin => "margin",
            StrategyKind::LeastConfidence => "least-confidence",
            StrategyKind::Random => "random",
            StrategyKind::RegradStar => "regrad-star",
            StrategyKind::Regrad => "regrad",
            StrategyKind::Exgrad => "exgrad",
            StrategyKind::Negrad => "negrad",
            StrategyKind::Ungrad => "ungrad",
            StrategyKind::Gradnorm => "gradnorm",
            StrategyKind::ExgradV => "exgrad-v",
            StrategyKind::PerturbX => "perturb-x",
            StrategyKind::PerturbTheta => "perturb-theta",
            StrategyKind::Bald => "bald",
            StrategyKind::BatchBald => "batchbald",
            StrategyKind::McEntropy => "mc-entropy",
            StrategyKind::ClassVariance => "class-variance",
            StrategyKind::VariationRatio => "variation-ratio",
            StrategyKind::McMaxProb => "mc-max-prob",
            StrategyKind::Duq => "duq",
        }
    }

    /// The scorer, if the strategy scores one candidate at a time (all but `random` and
    /// `batchbald`).
    pub fn scorer(self, s: &ScorerSettings) -> Option<Arc<dyn Scorer>> {
        let regrad = |perturbations| ReGrad {
            lambda: s.lambda,
            request: GradRequest {
                perturbations,
                sigma: s.sigma,
                expected: false,
            },
        };
        let sample = |score| {
            if s.members {
                SampleScorer::members(score)
            } else {
                SampleScorer::mc_dropout(score, s.mc_samples)
            }
        };
        Some(match self {
            StrategyKind::Entropy => Arc::new(Builtin::Entropy),
            StrategyKind::Margin => Arc::new(Builtin::Margin),
            StrategyKind::LeastConfidence => Arc::new(Builtin::LeastConfidence),
            StrategyKind::Random | StrategyKind::BatchBald => return None,
            StrategyKind::RegradStar => Arc::new(regrad(s.perturbations.max(1))),
            StrategyKind::Regrad => Arc::new(regrad(0)),
            StrategyKind::Exgrad => Arc::new(ExGrad),
            StrategyKind::Negrad => Arc::new(NeGrad),
            StrategyKind::Ungrad => Arc::new(UnGrad),
            StrategyKind::Gradnorm => Arc::new(GradNorm),
            StrategyKind::ExgradV => Arc::new(ExGradV),
            StrategyKind::PerturbX => Arc::new(PerturbKl {
                request: SampleRequest::InputNoise {
                    sigma: s.perturb_x_sigma,
                    samples: s.perturb_samples,
                },
            }),
            StrategyKind::PerturbTheta => Arc::new(PerturbKl {
                request: SampleRequest::WeightNoise {
                    sigma: s.perturb_theta_sigma,
                    samples: s.perturb_samples,
                },
            }),
            StrategyKind::Bald => Arc::new(sample(SampleScore::Bald)),
            StrategyKind::McEntropy => Arc::new(sample(SampleScore::MeanEntropy)),
            StrategyKind::ClassVariance => Arc::new(sample(SampleScore::ClassVariance)),
            StrategyKind::VariationRatio => Arc::new(sample(SampleScore::VariationRatio)),
            StrategyKind::McMaxProb => Arc::new(sample(SampleScore::MaxProb)),
            StrategyKind::Duq => Arc::new(DuqCertainty),
        })
    }

    /// The runnable strategy: the scorer with `s.select` (named `<select>-<scorer>` unless
    /// top-k), BatchBALD (its own joint selection; `s.select` does not apply), or random.
    pub fn strategy(self, s: &ScorerSettings) -> Strategy {
        if self == StrategyKind::BatchBald
            || (self == StrategyKind::Bald && s.select == SelectKind::BatchBald)
        {
            return Strategy::batch(Arc::new(if s.members {
                BatchBald::members()
            } else {
                BatchBald::mc_dropout(s.mc_samples)
            }));
        }
        match self.scorer(s) {
            Some(sc) => {
                let name = match s.select {
                    SelectKind::TopK => self.name().to_string(),
                    other => format!("{}-{}", other.name(), self.name()),
                };
                // Other scorers never meet `batchbald` here: `run_curve` refuses the pair.
                let selection = s.select.selection(s.beta).unwrap_or(Selection::TopK);
                Strategy::scored(sc, selection).named(name)
            }
            None => Strategy::random(),
        }
    }
}

impl FromStr for StrategyKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        StrategyKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = StrategyKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown scorer `{s}`; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that defines a curve experiment; saved as `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveSpec {
    /// Where the data came from (informational; data identity is checked by fingerprint).
    pub data: PathBuf,
    /// The model trained every cycle.
    pub model: Arch,
    /// Strategies to compare.
    pub strategies: Vec<StrategyKind>,
    /// Seeds, one run per strategy and seed.
    pub seeds: Vec<u64>,
    /// Loop settings.
    pub config: LoopConfig,
    /// Settings of the parameterised scorers.
    #[serde(default)]
    pub scorers: ScorerSettings,
}

/// One row of `summary.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Strategy name.
    pub strategy: String,
    /// Number of seeds.
    pub seeds: usize,
    /// Mean over seeds of the ACC averaged over cycles 1..=cycles.
    pub acc_mean: f64,
    /// Sample standard deviation over seeds (0 for one seed).
    pub acc_std: f64,
    /// Same for NLL.
    pub nll_mean: f64,
    /// Same for NLL.
    pub nll_std: f64,
    /// Mean ACC at the last cycle.
    pub final_acc: f64,
}

/// Paths inside an output folder.
pub fn state_path(out: &Path, strategy: &str, seed: u64) -> PathBuf {
    out.join("runs").join(format!("{strategy}-seed{seed}.json"))
}

/// Runs (or, with `resume`, continues) every strategy x seed of `spec`, writing everything
/// under `out`. Without `resume`, an `out` that already holds a run is refused (no work is ever
/// overwritten). `train` and `test` must be normalised already, with per-channel standard
/// deviation `input_std`. Returns the finished states,
/// seed-major.
#[allow(clippy::too_many_arguments)]
pub fn run_curve(
    spec: &CurveSpec,
    train: &Dataset,
    test: &Dataset,
    input_std: &[f32],
    out: &Path,
    resume: bool,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<RunState>> {
    // Validate everything before touching the output folder.
    let params = spec.config.validate(train.len())?;
    if spec.scorers.select == SelectKind::BatchBald {
        if let Some(k) = spec.strategies.iter().find(|k| {
            !matches!(
                k,
                StrategyKind::Bald | StrategyKind::BatchBald | StrategyKind::Random
            )
        }) {
            return Err(Error::config(
                "select",
                format!(
                    "batchbald selects jointly from MC-dropout or ensemble draws; it applies to \
                     bald, not to `{k}`"
                ),
            ));
        }
    }
    if spec.scorers.members != spec.config.ensemble.is_some() {
        return Err(Error::config(
            "ensemble",
            "sample scorers read ensemble members exactly when the loop trains an ensemble",
        ));
    }
    let spec_path = out.join("run.json");
    if resume {
        let saved: CurveSpec = read_json(&spec_path)?;
        if &saved != spec {
            return Err(Error::state(
                &spec_path,
                "the saved experiment differs from the one requested",
            ));
        }
    } else {
        if spec_path.exists() {
            return Err(Error::state(
                &spec_path,
                "this folder already holds a run; continue it with --resume or choose another --out",
            ));
        }
        write_json(&spec_path, spec)?;
    }
    let model_desc = serde_json::to_string(&spec.model).unwrap_or_default();
    let ctx = RunContext {
        train,
        test,
        model: &spec.model,
        params: &params,
        input_std,
        device,
    };
    let mut states = Vec::new();
    for &seed in &spec.seeds {
        for &kind in &spec.strategies {
            let strategy = kind.strategy(&spec.scorers);
            let path = state_path(out, strategy.name(), seed);
            let fresh = RunState::new(
                &strategy,
                seed,
                &spec.config,
                model_desc.clone(),
                train,
                test,
            );
            let mut state = if path.exists() {
                let saved: RunState = read_json(&path)?;
                saved.check_matches(&fresh, &path)?;
                saved
            } else {
                fresh
            };
            if !state.is_complete() {
                run(&ctx, &strategy, &mut state, Some(&path), observer)?;
            }
            states.push(state);
            write_atomic(&out.join("curve.csv"), curve_csv(&states).as_bytes())?;
        }
    }
    let rows = summarize(&states);
    write_atomic(&out.join("summary.csv"), summary_csv(&rows).as_bytes())?;
    let fig = curve_figure(&states);
    write_atomic(&out.join("curve.svg"), fig.to_svg().as_bytes())?;
    write_atomic(&out.join("curve.png"), &fig.to_png())?;
    Ok(states)
}

/// `curve.csv` for `states`.
pub fn curve_csv(states: &[RunState]) -> String {
    let mut s = String::from("scorer,seed,cycle,labeled,acc,nll,train_s,score_s\n");
    for st in states {
        for r in &st.records {
            s.push_str(&format!(
                "{},{},{},{},{:.6},{:.6},{:.3},{:.3}\n",
                st.strategy, st.seed, r.cycle, r.labeled, r.acc, r.nll, r.train_s, r.score_s
            ));
        }
    }
    s
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n.max(1.0);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// Per strategy (in first-seen order): mean and sample std over seeds of the per-run averages
/// of ACC and NLL over cycles `1..=cycles` (cycle 0 alone when there are no acquisition
/// cycles).
pub fn summarize(states: &[RunState]) -> Vec<SummaryRow> {
    let mut names: Vec<&str> = Vec::new();
    for st in states {
        if !names.contains(&st.strategy.as_str()) {
            names.push(&st.strategy);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let runs: Vec<&RunState> = states.iter().filter(|s| s.strategy == name).collect();
            let avg = |st: &RunState, f: fn(&crate::acquire::CycleRecord) -> f64| {
                let rs: Vec<f64> = st.records.iter().filter(|r| r.cycle >= 1).map(f).collect();
                if rs.is_empty() {
                    st.records.first().map_or(f64::NAN, f)
                } else {
                    rs.iter().sum::<f64>() / rs.len() as f64
                }
            };
            let accs: Vec<f64> = runs.iter().map(|st| avg(st, |r| r.acc)).collect();
            let nlls: Vec<f64> = runs.iter().map(|st| avg(st, |r| r.nll)).collect();
            let finals: Vec<f64> = runs
                .iter()
                .filter_map(|st| st.records.last().map(|r| r.acc))
                .collect();
            let (acc_mean, acc_std) = mean_std(&accs);
            let (nll_mean, nll_std) = mean_std(&nlls);
            SummaryRow {
                strategy: name.to_string(),
                seeds: runs.len(),
                acc_mean,
                acc_std,
                nll_mean,
                nll_std,
                final_acc: mean_std(&finals).0,
            }
        })
        .collect()
}

/// `summary.csv` for `rows`.
pub fn summary_csv(rows: &[SummaryRow]) -> String {
    let mut s = String::from("scorer,seeds,acc_mean,acc_std,nll_mean,nll_std,final_acc\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{:.6},{:.6},{:.6},{:.6},{:.6}\n",
            r.strategy, r.seeds, r.acc_mean, r.acc_std, r.nll_mean, r.nll_std, r.final_acc
        ));
    }
    s
}

/// Two panels (ACC, NLL against labeled count), one line per strategy with a ± std band.
pub fn curve_figure(states: &[RunState]) -> Figure {
    let mut acc = Panel {
        title: "Test accuracy".into(),
        x_label: "labeled items".into(),
        y_label: "accuracy".into(),
        series: Vec::new(),
    };
    let mut nll = Panel {
        title: "Test NLL".into(),
        x_label: "labeled items".into(),
        y_label: "NLL (nats)".into(),
        series: Vec::new(),
    };
    for row in summarize(states) {
        let runs: Vec<&RunState> = states
            .iter()
            .filter(|s| s.strategy == row.strategy)
            .collect();
        let cycles = runs.iter().map(|s| s.records.len()).min().unwrap_or(0);
        for (panel, f) in [
            (
                &mut acc,
                (|r: &crate::acquire::CycleRecord| r.acc) as fn(&_) -> f64,
            ),
            (&mut nll, |r| r.nll),
        ] {
            let mut points = Vec::new();
            let mut band = Vec::new();
            for c in 0..cycles {
                let vals: Vec<f64> = runs.iter().map(|s| f(&s.records[c])).collect();
                let (m, sd) = mean_std(&vals);
                let x = runs[0].records[c].labeled as f64;
                points.push((x, m));
                band.push((x, m - sd, m + sd));
            }
            panel.series.push(Series {
                name: row.strategy.clone(),
                points,
                band,
            });
        }
    }
    Figure {
        panels: vec![acc, nll],
        panel_width: 480,
        height: 360,
    }
}
