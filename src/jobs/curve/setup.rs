//! Setting a curve run up: what it runs on ([`CurveData`]: the normalised splits, the pool in
//! memory or streamed from its source) and its [`CurveSpec`] from the settings a person gives
//! ([`CurveOptions`]: every default filled in, every combination checked once, before anything
//! is read or written), or from the folder of a run to resume; then [`run`], which writes every
//! pool scoring too when asked.

use super::runs::{remove_outputs, run_curve, CurveSpec, Execution, MAX_SEEDS};
use crate::acquire::{LoopConfig, RunState};
use crate::data::{Dataset, Normalizer, PoolReader, Source};
use crate::error::{Error, Result, ResultExt};
use crate::hub::Hub;
use crate::metrics::stopping::StopRule;
use crate::models::{Arch, ModelKind};
use crate::nn::MlpConfig;
use crate::observe::Observer;
use crate::strategies::{ScorerSettings, StrategyKind};
use candle_core::Device;
use std::path::{Path, PathBuf};

/// What a curve runs on: the normalised splits, the pool in memory or streamed.
pub struct CurveData {
    /// The training split, normalised, every item labeled.
    pub train: Box<dyn PoolReader>,
    /// The test split, normalised.
    pub test: Dataset,
    /// Fitted on the training split.
    pub norm: Normalizer,
    /// Shape of one item.
    pub item_shape: Vec<usize>,
    /// Number of classes.
    pub classes: usize,
}

impl CurveData {
    /// Splits in memory, normalised with statistics of `train`.
    pub fn of(train: &Dataset, test: &Dataset) -> Result<CurveData> {
        let norm = Normalizer::fit(train);
        Ok(CurveData {
            item_shape: train.item_shape().to_vec(),
            classes: train.classes(),
            train: Box::new(norm.apply(train)?),
            test: norm.apply(test)?,
            norm,
        })
    }

    /// Loads the data source `data` (a folder, a file or `hf:OWNER/NAME`, with a train and a
    /// test split), or with `stream` reads its training split once (labels from the label files
    /// or listing, the normaliser from one pass) to stream it during the run.
    pub fn load(
        data: &Path,
        stream: bool,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<CurveData> {
        let name = data.to_string_lossy().into_owned();
        if !stream {
            let splits = crate::data::source::load_splits(&name, None, hub, observer)?;
            return CurveData::of(&splits.train, &splits.test);
        }
        let source = Source::parse(&name).context_with(|| format!("data source {name}"))?;
        let s = crate::data::reader::stream_splits(&source, hub, observer)
            .context_with(|| format!("reading the data {name}"))?;
        Ok(CurveData {
            item_shape: s.train.item_shape().to_vec(),
            classes: s.classes,
            train: Box::new(s.train),
            test: s.test,
            norm: s.normalizer,
        })
    }
}

/// The file in a run's folder holding the splits a run on arrays was started with.
pub const ARRAYS_FILE: &str = "arrays.safetensors";

/// Refuses, before a run starts on them, arrays that its saved file would not give back:
/// class names that are empty, repeated, hold a comma or surrounding spaces (the file keeps
/// them comma-joined), fewer names than classes, or features that are not finite.
fn check_arrays(train: &Dataset, test: &Dataset, classes: &[String]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    if let Some(c) = classes.iter().find(|c| {
        c.is_empty() || c.trim() != c.as_str() || c.contains(',') || !seen.insert(c.as_str())
    }) {
        return Err(Error::config(
            "classes",
            format!("class name {c:?} is empty, repeated, or holds a comma or surrounding spaces"),
        ));
    }
    if classes.len() < train.classes().max(test.classes()) {
        return Err(Error::config(
            "classes",
            format!("{} names for {} classes", classes.len(), train.classes()),
        ));
    }
    for (name, d) in [("train items", train), ("test items", test)] {
        if let Some(i) = d.features().iter().position(|v| !v.is_finite()) {
            let item = i / d.item_len().max(1);
            return Err(Error::config(
                name,
                format!("item {item} holds a value that is not finite"),
            ));
        }
    }
    Ok(())
}

/// Writes `train` and `test` to `path` as a safetensors pool alkit reads back: `x` and
/// `x_test` F32 `(n, *item_shape)`, `y` and `y_test` U32, metadata `classes`.
fn save_splits(path: &Path, train: &Dataset, test: &Dataset, classes: &[String]) -> Result<()> {
    use safetensors::tensor::TensorView;
    let bad = |e: safetensors::SafeTensorError| Error::state(path, format!("cannot write: {e}"));
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bytes: Vec<_> = [("", train), ("_test", test)]
        .into_iter()
        .flat_map(|(suffix, d)| {
            let shape = [&[d.len()][..], d.item_shape()].concat();
            [
                (
                    format!("x{suffix}"),
                    f32s(d.features()),
                    shape,
                    safetensors::Dtype::F32,
                ),
                (
                    format!("y{suffix}"),
                    u32s(d.labels()),
                    vec![d.len()],
                    safetensors::Dtype::U32,
                ),
            ]
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, b, shape, dtype)| {
            TensorView::new(*dtype, shape.clone(), b).map(|v| (name.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(bad)?;
    let meta = std::collections::HashMap::from([("classes".to_string(), classes.join(","))]);
    let file = safetensors::serialize(views, Some(meta)).map_err(bad)?;
    crate::fsutil::write_atomic(path, &file)
}

/// A new curve's settings as a person gives them; `None` takes the default.
#[derive(Debug, Clone, Default)]
pub struct CurveOptions {
    /// The data source [default: `data`, the folder shipped with alkit].
    pub data: Option<PathBuf>,
    /// Read the pool a chunk at a time instead of decoding it into memory.
    pub stream: bool,
    /// The model trained every cycle [default: the CNN].
    pub model: Option<ModelKind>,
    /// Strategies to compare [default: [`StrategyKind::defaults`]].
    pub strategies: Option<Vec<StrategyKind>>,
    /// First seed [default: 0].
    pub seed: Option<u64>,
    /// Seeds, one run per strategy and seed [default: 1; at most [`MAX_SEEDS`]].
    pub seeds: Option<u64>,
    /// Labeled items to start from.
    pub initial: Option<usize>,
    /// Items acquired per cycle.
    pub query: Option<usize>,
    /// Acquisition cycles.
    pub cycles: Option<usize>,
    /// Optimiser steps per training.
    pub steps: Option<usize>,
    /// Mini-batch size [default: the model's].
    pub batch_size: Option<usize>,
    /// Adam's learning rate (softmax models only).
    pub lr: Option<f64>,
    /// Train a deep ensemble of this many members every cycle.
    pub ensemble: Option<usize>,
    /// Anchored training's `tau` (softmax models only).
    pub anchor: Option<f64>,
    /// Score a seeded random subsample of this many candidates each cycle.
    pub subsample: Option<usize>,
    /// Strategies that can (core-set, TypiClust, ProbCover) choose the initial items too.
    pub cold_start: bool,
    /// Draw the random seed set class by class, an equal share per class.
    pub balanced_start: bool,
    /// The hidden layers' widths of an `mlp` or `mlp-dropout` model [default: the model's].
    pub hidden: Option<Vec<usize>>,
    /// End each run where this stopping rule says stop.
    pub stop: Option<StopRule>,
    /// The parameterised scorers' settings (`members` is set here from `ensemble`).
    pub scorers: ScorerSettings,
}

impl CurveOptions {
    /// The run's spec over `on`, the data of [`CurveOptions::data`].
    pub fn spec(&self, on: &CurveData) -> Result<CurveSpec> {
        let seeds = self.seed_list()?;
        if let Some(rule) = self.stop {
            rule.check_classes(on.classes)
                .map_err(|m| Error::config("stop", m))?;
        }
        let defaults = LoopConfig::default();
        let model = self.sized(Arch::for_shape(
            self.model.unwrap_or(ModelKind::named("cnn")),
            &on.item_shape,
            on.classes,
        ))?;
        let train = self.train(model.kind())?;
        Ok(CurveSpec {
            data: self.data_path(),
            model: model.with_batch(train.batch_size),
            strategies: self
                .strategies
                .clone()
                .unwrap_or_else(StrategyKind::defaults),
            seeds,
            config: LoopConfig {
                initial: self.initial.unwrap_or(defaults.initial),
                query: self.query.unwrap_or(defaults.query),
                cycles: self.cycles.unwrap_or(defaults.cycles),
                train,
                batch: crate::predict::default_batch(on.item_shape.iter().product()),
                ensemble: self.ensemble,
                subsample: self.subsample,
                cold_start: self.cold_start,
                balanced_start: self.balanced_start,
                stop: self.stop,
            },
            scorers: ScorerSettings {
                members: self.ensemble.is_some(),
                ..self.scorers
            },
        })
    }

    /// `model` with the hidden widths asked for (setting `hidden`), which only an MLP with
    /// hidden layers takes.
    fn sized(&self, model: Arch) -> Result<Arch> {
        let Some(widths) = &self.hidden else {
            return Ok(model);
        };
        check_widths(widths)?;
        match model {
            Arch::Mlp(c) if !c.hidden.is_empty() => Ok(Arch::Mlp(MlpConfig {
                hidden: widths.clone(),
                ..c
            })),
            other => Err(Error::config(
                "hidden",
                format!(
                    "model `{}` has no hidden layers to size: train `mlp` or `mlp-dropout`, \
                     or leave the widths out",
                    other.kind()
                ),
            )),
        }
    }

    /// Starts a run in `out`: refuses an `out` that would overwrite the data or another run
    /// (with `force`, a previous run there is cleared, once everything else checked out), loads
    /// the data and builds the spec.
    pub fn start(
        &self,
        out: &Path,
        force: bool,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<(CurveSpec, CurveData)> {
        let data = self.data_path();
        crate::fsutil::check_output_dir("out", out, &[&data], true)?;
        // Settings that need no data are checked before it is read.
        self.seed_list()?;
        self.train(self.model.unwrap_or(ModelKind::named("cnn")))?;
        self.hidden.as_deref().map(check_widths).transpose()?;
        let on = CurveData::load(&data, self.stream, hub, observer)?;
        let spec = self.spec(&on)?;
        if force && out.join("run.json").exists() {
            remove_outputs(out).context_with(|| {
                format!(
                    "clearing {} to start again (setting `force`)",
                    out.display()
                )
            })?;
        }
        Ok((spec, on))
    }

    /// Starts a run in `out` on splits given in memory (a notebook's arrays): the same checks
    /// as [`CurveOptions::start`], then the splits saved to `out/`[`ARRAYS_FILE`] (safetensors
    /// `x`, `y`, `x_test`, `y_test` and the class names), which is the run's data, so that
    /// [`resume`] reads them back. A run already in `out` is refused unless `force`.
    pub fn start_on(
        &self,
        out: &Path,
        force: bool,
        (train, test): (&Dataset, &Dataset),
        classes: &[String],
    ) -> Result<(CurveSpec, CurveData)> {
        crate::fsutil::check_output_dir("out", out, &[], true)?;
        self.seed_list()?;
        self.train(self.model.unwrap_or(ModelKind::named("cnn")))?;
        if out.join("run.json").exists() && !force {
            return Err(Error::config(
                "out",
                format!(
                    "{} holds a curve run: resume it, or start again with setting `force`",
                    out.display()
                ),
            ));
        }
        check_arrays(train, test, classes)?;
        let on = CurveData::of(train, test)?;
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        // Absolute: the run resumes from any folder.
        let arrays = std::fs::canonicalize(out)
            .map_err(|e| Error::io(out, e))?
            .join(ARRAYS_FILE);
        let options = CurveOptions {
            data: Some(arrays.clone()),
            ..self.clone()
        };
        let spec = options.spec(&on)?;
        if force && out.join("run.json").exists() {
            remove_outputs(out).context_with(|| {
                format!(
                    "clearing {} to start again (setting `force`)",
                    out.display()
                )
            })?;
        }
        save_splits(&arrays, train, test, classes)?;
        Ok((spec, on))
    }

    /// The seeds `seed, seed + 1, ...`, checked.
    fn seed_list(&self) -> Result<Vec<u64>> {
        let seed = self.seed.unwrap_or(0);
        let seeds = self.seeds.unwrap_or(1);
        if seeds == 0 || seeds > MAX_SEEDS {
            return Err(Error::config(
                "seeds",
                format!("{seeds} is not in 1..={MAX_SEEDS}"),
            ));
        }
        if seed.checked_add(seeds - 1).is_none() {
            return Err(Error::config(
                "seed",
                format!(
                    "seeds {seed}, {seed}+1, ... would pass the largest seed, {}",
                    u64::MAX
                ),
            ));
        }
        Ok((0..seeds).map(|k| seed + k).collect())
    }

    /// The training settings of `kind`, checked.
    fn train(&self, kind: ModelKind) -> Result<crate::train::TrainConfig> {
        kind.train_config(
            self.steps.unwrap_or(LoopConfig::default().train.steps),
            self.batch_size,
            self.lr,
            self.anchor,
        )
    }

    /// The first setting given here (a `Some`, or a `true`) whose value is not `run`'s own,
    /// with the run's value: what resuming `run` with these options must refuse, while the
    /// same settings repeated (a script that adds `--resume` to the command it ran) pass.
    /// The scorers' settings count as one, `scorers`, compared whole when any differs from
    /// its default. `data` compares the paths as given, else both made absolute. A setting is
    /// named as its field is (setting `cold_start`), the strategies as setting `scorer`.
    pub fn differs_from(&self, run: &CurveSpec) -> Option<(&'static str, String)> {
        let given_scorers = ScorerSettings {
            members: run.scorers.members,
            ..self.scorers
        };
        let scorers_differ =
            self.scorers != ScorerSettings::default() && given_scorers != run.scorers;
        self.run_differs(run)
            .into_iter()
            .chain(self.config_differs(&run.config))
            .find(|c| c.1)
            .map(|(name, _, was)| (name, was))
            .or(scorers_differ.then(|| {
                let json = serde_json::to_string(&run.scorers).unwrap_or_default();
                ("scorers", json)
            }))
    }

    /// The run's own settings given here: `(setting, differs, the run's value)`.
    fn run_differs(&self, run: &CurveSpec) -> [(&'static str, bool, String); 6] {
        let same_path = |a: &Path, b: &Path| {
            a == b
                || matches!(
                    (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                    (Ok(x), Ok(y)) if x == y
                )
        };
        let seeds = self.seed_list().ok();
        let run_widths = match &run.model {
            Arch::Mlp(c) => Some(&c.hidden),
            _ => None,
        };
        [
            (
                "data",
                self.data
                    .as_deref()
                    .is_some_and(|d| !same_path(d, &run.data)),
                run.data.display().to_string(),
            ),
            (
                "model",
                self.model.is_some_and(|m| m != run.model.kind()),
                run.model.kind().to_string(),
            ),
            (
                "scorer",
                self.strategies
                    .as_ref()
                    .is_some_and(|s| *s != run.strategies),
                names(&run.strategies),
            ),
            (
                "seed",
                self.seed.is_some() && seeds.as_ref().and_then(|s| s.first()) != run.seeds.first(),
                format!("{:?}", run.seeds.first()),
            ),
            (
                "seeds",
                self.seeds.is_some_and(|n| n as usize != run.seeds.len()),
                run.seeds.len().to_string(),
            ),
            (
                "hidden",
                self.hidden.as_ref().is_some_and(|h| Some(h) != run_widths),
                run_widths.map_or("none".into(), |w| {
                    w.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
        ]
    }

    /// The loop's settings given here against the run's configuration `c`: `(setting,
    /// differs, the run's value)`.
    fn config_differs(&self, c: &LoopConfig) -> [(&'static str, bool, String); 12] {
        [
            (
                "initial",
                self.initial.is_some_and(|v| v != c.initial),
                c.initial.to_string(),
            ),
            (
                "query",
                self.query.is_some_and(|v| v != c.query),
                c.query.to_string(),
            ),
            (
                "cycles",
                self.cycles.is_some_and(|v| v != c.cycles),
                c.cycles.to_string(),
            ),
            (
                "steps",
                self.steps.is_some_and(|v| v != c.train.steps),
                c.train.steps.to_string(),
            ),
            (
                "batch_size",
                self.batch_size.is_some_and(|v| v != c.train.batch_size),
                c.train.batch_size.to_string(),
            ),
            (
                "lr",
                self.lr.is_some_and(|v| v != c.train.lr),
                c.train.lr.to_string(),
            ),
            (
                "ensemble",
                self.ensemble.is_some() && self.ensemble != c.ensemble,
                format!("{:?}", c.ensemble),
            ),
            (
                "anchor",
                self.anchor.is_some() && self.anchor != c.train.anchor,
                format!("{:?}", c.train.anchor),
            ),
            (
                "subsample",
                self.subsample.is_some() && self.subsample != c.subsample,
                format!("{:?}", c.subsample),
            ),
            (
                "cold_start",
                self.cold_start && !c.cold_start,
                c.cold_start.to_string(),
            ),
            (
                "balanced_start",
                self.balanced_start && !c.balanced_start,
                c.balanced_start.to_string(),
            ),
            (
                "stop",
                self.stop.is_some() && self.stop != c.stop,
                c.stop.map_or("none".to_string(), |r| r.name().to_string()),
            ),
        ]
    }

    fn data_path(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| PathBuf::from("data"))
    }
}

/// [`resume`] with the settings a person gave again beside it: each must be the run's own
/// ([`CurveOptions::differs_from`]), else it is refused naming the setting and the run's
/// value; `options.stream` says how to read the pool.
pub fn resume_with(
    dir: &Path,
    options: &CurveOptions,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<(CurveSpec, CurveData)> {
    let spec: CurveSpec = crate::fsutil::read_json(&dir.join("run.json"))
        .context_with(|| format!("resuming {}: not a run folder", dir.display()))?;
    if let Some((name, was)) = options.differs_from(&spec) {
        let what = match name {
            "scorers" => "the scorers' settings".to_string(),
            _ => format!("setting `{name}`"),
        };
        return Err(Error::config(
            "resume",
            format!(
                "the run in {} has {what} {was}, and resuming continues it with its own \
                 settings: give the run's value or none (see its run.json), or start a new \
                 run in another folder",
                dir.display()
            ),
        ));
    }
    let on = CurveData::load(&spec.data, options.stream, hub, observer)?;
    Ok((spec, on))
}

/// The spec and the data of the run in `dir`, to resume it (streamed with `stream`).
pub fn resume(
    dir: &Path,
    stream: bool,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<(CurveSpec, CurveData)> {
    let spec: CurveSpec = crate::fsutil::read_json(&dir.join("run.json"))
        .context_with(|| format!("resuming {}: not a run folder", dir.display()))?;
    let on = CurveData::load(&spec.data, stream, hub, observer)?;
    Ok((spec, on))
}

/// Runs (or with `how.resume` continues) `spec` over `on` into `out` ([`run_curve`]).
pub fn run(
    spec: &CurveSpec,
    on: &CurveData,
    out: &Path,
    how: Execution,
    device: &Device,
    observer: &mut (dyn Observer + Send),
) -> Result<Vec<RunState>> {
    let (train, test, std) = (on.train.as_ref(), &on.test, &on.norm.std);
    run_curve(spec, train, test, std, out, how, device, observer)
        .context_with(|| format!("curve run in {}", out.display()))
}

/// The most hidden layers setting `hidden` takes, and the widest layer.
const MAX_HIDDEN: (usize, usize) = (16, 65_536);

/// Hidden widths a person gave: one to [`MAX_HIDDEN`] layers of 1 to 65,536 units.
fn check_widths(widths: &[usize]) -> Result<()> {
    let (layers, widest) = MAX_HIDDEN;
    if widths.is_empty() || widths.len() > layers {
        return Err(Error::config(
            "hidden",
            format!("{} widths; give 1 to {layers}", widths.len()),
        ));
    }
    match widths.iter().find(|&&w| w == 0 || w > widest) {
        Some(w) => Err(Error::config(
            "hidden",
            format!("a layer of {w} units; each takes 1 to {widest}"),
        )),
        None => Ok(()),
    }
}

/// Strategy names, comma-separated, as a person types them.
fn names(strategies: &[StrategyKind]) -> String {
    strategies
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
