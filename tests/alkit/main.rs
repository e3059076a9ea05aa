//! alkit's one integration test binary: real CPU tensors, the real MNIST subset in `data/`,
//! and reference values from independent sources (finite differences, hand-worked formulas).

mod acquisition_loop;
mod cli;
mod data;
mod device;
mod doc_commands;
mod duq;
mod embeddings;
mod feature_methods;
mod fidelity;
mod flag_sizes;
mod fuzz_corpora;
mod gradients;
mod hostile;
mod images;
mod kernel_batch;
mod label_page;
mod label_studio;
mod laplace;
mod last_layer;
mod layer_library;
mod layers;
mod lists;
mod multilabel;
mod numpy_files;
mod onnx;
mod pytorch;
mod regression;
mod regression_files;
mod scorers;
mod sessions;
mod shards;
mod sources;
mod statistics;
mod streaming;
mod surface;
mod timm;
mod words;

use alkit::acquire::{run, LoopConfig, RunContext, RunState};
use alkit::data::idx::{encode_images, encode_labels, write_gz};
use alkit::data::{load_idx_dir, Dataset, Normalizer};
use alkit::error::DataProblem;
use alkit::jobs::curve::{run_curve, state_path, CurveSpec};
use alkit::models::Arch;
use alkit::nn::init::seeded;
use alkit::nn::layers::{im2col, log_probs, max_pool2x2};
use alkit::nn::{CnnConfig, MlpConfig, Mode};
use alkit::observe::{Control, Event, Observer, Silent};
use alkit::rng::{stream, Purpose};
use alkit::round::Strategy;
use alkit::strategies::StrategyKind;
use alkit::train::ModelBuilder;
use alkit::train::TrainConfig;
use alkit::Error;
use candle_core::{DType, Device, Tensor, Var};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The registered strategy `name`.
fn kind(name: &str) -> StrategyKind {
    StrategyKind::named(name).unwrap_or_else(|| panic!("no strategy `{name}`"))
}

fn data_dir() -> PathBuf {
    // Every test touches the data or a temporary folder first: keep candle's buffers off mmap.
    alkit::tune_allocator();
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// A test's own scratch folder, removed when the test passes. A failing test leaves it for
/// a look (the panic message names the files); a passing one must not leave hundreds of
/// megabytes per run on the disk CI shares with everything else. Where `ALKIT_TEST_TIMES`
/// names a file (`.ci/run` does), the time from the folder's making to its removal is
/// appended to it with the test's name, for the table of the slowest tests.
struct Scratch(PathBuf, std::time::Instant);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
        if let Some(times) = std::env::var_os("ALKIT_TEST_TIMES") {
            use std::io::Write;
            let test = std::thread::current().name().unwrap_or("?").to_string();
            let line = format!("{test}\t{:.3}\n", self.1.elapsed().as_secs_f64());
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(times);
            // One write per line on a file opened to append: lines of parallel tests never mix.
            let _ = file.and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// Copies the tree `from` into `to` (created), files and folders.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dst = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dst);
        } else {
            std::fs::copy(&p, &dst).unwrap();
        }
    }
}

/// An empty scratch folder named for the test (and this process), see [`Scratch`].
fn tmp(name: &str) -> Scratch {
    alkit::tune_allocator();
    let dir = std::env::temp_dir().join(format!("alkit-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir, std::time::Instant::now())
}

fn write_idx_dir(
    dir: &Path,
    train: (usize, usize, usize),
    train_labels: &[u8],
    test: (usize, usize, usize),
    test_labels: &[u8],
) {
    let (n, h, w) = train;
    write_gz(
        &dir.join("train-images-idx3-ubyte.gz"),
        &encode_images(&vec![7; n * h * w], n, h, w),
    )
    .unwrap();
    write_gz(
        &dir.join("train-labels-idx1-ubyte.gz"),
        &encode_labels(train_labels),
    )
    .unwrap();
    let (n, h, w) = test;
    // Plain (not gzipped) test files: both encodings must be read.
    std::fs::write(
        dir.join("t10k-images-idx3-ubyte"),
        encode_images(&vec![9; n * h * w], n, h, w),
    )
    .unwrap();
    std::fs::write(
        dir.join("t10k-labels-idx1-ubyte"),
        encode_labels(test_labels),
    )
    .unwrap();
}

/// `train` and `test` written as a split folder `dir/{train,test}/CLASS/NNNNN.png`.
fn write_split_folder(dir: &Path, train: &Dataset, test: &Dataset) {
    for (split, ds) in [("train", train), ("test", test)] {
        let items: Vec<(usize, Option<String>)> = (0..ds.len())
            .map(|i| (i, Some(ds.labels()[i].to_string())))
            .collect();
        alkit::data::image::write_image_folder(&dir.join(split), ds, &items).unwrap();
    }
}

fn data_problem(e: Error) -> (PathBuf, DataProblem) {
    match e {
        Error::Data { path, problem } => (path, problem),
        other => panic!("expected a data error, got {other}"),
    }
}

// ------------------------------------------------------------------ gradients & kernels

/// Central finite differences of `f` w.r.t. `var` at `k` evenly spread coordinates,
/// compared with `analytic` (same shape); returns the max relative error.
fn fd_check(var: &Var, analytic: &Tensor, f: &dyn Fn() -> f64, k: usize) -> f64 {
    let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    let grad: Vec<f64> = analytic.flatten_all().unwrap().to_vec1().unwrap();
    let shape = var.as_tensor().shape().clone();
    let eps = 1e-6;
    let mut worst = 0f64;
    for j in 0..k.min(base.len()) {
        let i = j * base.len() / k.min(base.len());
        let mut v = base.clone();
        v[i] = base[i] + eps;
        var.set(&Tensor::from_vec(v.clone(), &shape, &Device::Cpu).unwrap())
            .unwrap();
        let up = f();
        v[i] = base[i] - eps;
        var.set(&Tensor::from_vec(v, &shape, &Device::Cpu).unwrap())
            .unwrap();
        let down = f();
        var.set(&Tensor::from_vec(base.clone(), &shape, &Device::Cpu).unwrap())
            .unwrap();
        let fd = (up - down) / (2.0 * eps);
        let rel = (fd - grad[i]).abs() / (fd.abs().max(grad[i].abs()).max(1e-3));
        worst = worst.max(rel);
    }
    worst
}

fn randn64(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = stream(seed, Purpose::Tool, 0);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| alkit::rng::normal(&mut rng)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

// -------------------------------------------------------------------- the loop, resume

fn small_spec(strategies: Vec<StrategyKind>) -> CurveSpec {
    let s = load_idx_dir(&data_dir()).unwrap();
    CurveSpec {
        data: data_dir(),
        model: Arch::Cnn(CnnConfig::standard(s.train.item_shape(), 10)),
        strategies,
        seeds: vec![5],
        config: LoopConfig {
            initial: 20,
            query: 10,
            cycles: 3,
            train: TrainConfig {
                steps: 25,
                batch_size: 16,
                lr: 1e-3,
                anchor: None,
            },
            batch: 256,
            ensemble: None,
            subsample: None,
            cold_start: false,
            balanced_start: false,
            stop: None,
        },
        scorers: Default::default(),
    }
}

/// A fresh (not resumed) curve run on CPU with no observer.
fn run_small(
    spec: &CurveSpec,
    train: &Dataset,
    test: &Dataset,
    out: &Path,
) -> alkit::Result<Vec<alkit::acquire::RunState>> {
    run_curve(
        spec,
        train,
        test,
        &std_of(),
        out,
        alkit::jobs::curve::Execution::default(),
        &Device::Cpu,
        &mut Silent,
    )
}

fn std_of() -> Vec<f32> {
    Normalizer::fit(&load_idx_dir(&data_dir()).unwrap().train).std
}

fn normalised() -> (Dataset, Dataset) {
    let s = load_idx_dir(&data_dir()).unwrap();
    let n = Normalizer::fit(&s.train);
    (n.apply(&s.train).unwrap(), n.apply(&s.test).unwrap())
}

fn strip_timings(csv: &str) -> String {
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    let timing = |i: usize| header.get(i).is_some_and(|h| h.ends_with("_s"));
    csv.lines()
        .map(|l| {
            let cells = l.split(',').enumerate().filter(|&(i, _)| !timing(i));
            cells.map(|(_, c)| c).collect::<Vec<_>>().join(",")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Stops the run at a given training step of a given cycle.
struct KillAt {
    cycle: usize,
    step: usize,
    current: usize,
}

impl Observer for KillAt {
    fn on(&mut self, e: &Event<'_>) -> Control {
        match e {
            Event::CycleStarted { cycle, .. } => self.current = *cycle,
            Event::TrainStep { step, .. } if self.current == self.cycle && *step == self.step => {
                return Control::Stop
            }
            _ => {}
        }
        Control::Continue
    }
}

// -------------------------------------------------------------------------------- CLI

/// A one-thread HTTP server on loopback answering every request with `answer(path)` (status
/// line and headers, then body), one request per connection. Returns its base URL.
fn serve(answer: fn(&str) -> (String, Vec<u8>)) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            // Drain the request headers.
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                    break;
                }
            }
            let (head, body) = answer(&path);
            let _ = conn.write_all(format!("{head}Connection: close\r\n\r\n").as_bytes());
            let _ = conn.write_all(&body);
        }
    });
    base
}

/// The numbers of a JSON fixture's value, nested arrays flattened in order (a reference
/// script's `tolist()`).
fn json_flat(v: &serde_json::Value) -> Vec<f64> {
    match v {
        serde_json::Value::Array(a) => a.iter().flat_map(json_flat).collect(),
        other => vec![other.as_f64().unwrap()],
    }
}

/// [`json_flat`] rounded to `f32`.
fn json_f32s(v: &serde_json::Value) -> Vec<f32> {
    json_flat(v).into_iter().map(|x| x as f32).collect()
}

fn alkit_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_alkit"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

// ----------------------------------------------------------------- gradient evidence

use alkit::acquisition::{Evidence, GradNorms, GradRequest, Needs, Probs, ReGrad, Scorer};
use alkit::nn::gradnorm::{autograd_grad_norms, GradOut};
use alkit::predict::Scoring;

fn named_tensors(p: &alkit::nn::init::Weights) -> Vec<(String, Tensor)> {
    p.named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect()
}

/// Max relative error over all rows and GradNorm values. With `zero_expected` (no
/// perturbation) the expected-gradient row is pure rounding noise around 0 and is checked
/// against the class rows' scale instead. (With perturbed copies it is `p0 - p(x_i)`-driven and
/// genuinely non-zero.)
fn max_rel(a: &GradOut, b: &GradOut, classes: usize, zero_expected: bool) -> f64 {
    assert_eq!(
        (a.rows, a.layers, a.sq.len()),
        (b.rows, b.layers, b.sq.len())
    );
    let rel = |x: f64, y: f64| (x - y).abs() / x.abs().max(y.abs()).max(1e-300);
    let per = a.rows * a.layers;
    let mut worst = 0f64;
    for (i, (ca, cb)) in a.sq.chunks(per).zip(b.sq.chunks(per)).enumerate() {
        let scale: f64 = ca[..classes * a.layers].iter().sum();
        for (j, (&x, &y)) in ca.iter().zip(cb).enumerate() {
            if j < classes * a.layers || !zero_expected {
                worst = worst.max(rel(x, y));
            } else {
                assert!(
                    x.abs() <= 1e-20 * scale && y.abs() <= 1e-20 * scale,
                    "expected row of {i}: {x} vs {y}"
                );
            }
        }
    }
    a.kl_l1
        .iter()
        .zip(&b.kl_l1)
        .fold(worst, |w, (&x, &y)| w.max(rel(x, y)))
}

// -------------------------------------------------------------------------------- DUQ

use alkit::duq::{DuqConfig, DuqLoss, DuqMlp, DuqSettings, Penalty};

/// The same seeded, scaled-down Fashion-MNIST DUQ model (channels 16/8/8, 6 features, input
/// 20x20, 3 classes) in f64, on the fused CPU path and on the candle-op composition.
fn small_duq_cnns(settings: DuqSettings) -> (alkit::duq::cnn::DuqCnn, alkit::duq::cnn::DuqCnn) {
    use alkit::duq::cnn::{DuqCnn, DuqCnnConfig};
    let cfg = DuqCnnConfig {
        channels: [16, 8, 8],
        features: 6,
        settings,
    };
    let make = |fused: bool| {
        let mut m = DuqCnn::seeded(
            &[1, 20, 20],
            3,
            &cfg,
            DType::F64,
            &Device::Cpu,
            stream(9, Purpose::Init, 0),
        )
        .unwrap();
        m.set_fused(fused);
        m
    };
    (make(true), make(false))
}

/// `max |a - b| / max |b|` (f64 tensors).
fn rel_max(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    let m = b.abs().unwrap().max_all().unwrap();
    d.to_scalar::<f64>().unwrap() / m.to_scalar::<f64>().unwrap().max(1e-12)
}

/// One SGD step of both models on `(x, y)`; their parameters and state then agree to 1e-9.
fn assert_same_state_after_a_step(
    a: &mut alkit::duq::cnn::DuqCnn,
    b: &mut alkit::duq::cnn::DuqCnn,
    x: &Tensor,
    y: &Tensor,
) {
    use alkit::duq::Sgd;
    let mut sa = Sgd::new(a.vars(), 0.05, 0.9, 1e-4);
    let mut sb = Sgd::new(b.vars(), 0.05, 0.9, 1e-4);
    a.step(&mut sa, x, y).unwrap();
    b.step(&mut sb, x, y).unwrap();
    let (ta, tb) = (a.state().unwrap(), b.state().unwrap());
    for ((name, u), (_, v)) in ta.named().into_iter().zip(tb.named()) {
        let e = rel_max(u.as_tensor(), v.as_tensor());
        assert!(e < 1e-9, "{name} after a step: {e}");
    }
}

/// How many rows of two-class kernel values `k (n, 2)` pick the label (ties count as class 0).
fn two_class_correct(k: &[f32], labels: &[u32]) -> usize {
    k.chunks(2)
        .zip(labels)
        .filter(|(r, &l)| u32::from(r[1] > r[0]) == l)
        .count()
}

/// A user's feature extractor for DUQ, written only against the public trait: two tanh layers
/// `2 -> 12 -> 8`. `Bug` plants the two mistakes a hand-written input gradient can make.
struct TanhNet {
    l1: candle_nn::Linear,
    l2: candle_nn::Linear,
    params: alkit::nn::init::Weights,
    bug: Bug,
}

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Drops the `1 - t^2` factor of the first layer: a wrong gradient.
    MissingFactor,
    /// Uses `W2.detach()`: the right values, but no second-order path to `W2`.
    Detached,
}

impl TanhNet {
    fn new(dtype: DType, seed: u64, bug: Bug) -> TanhNet {
        let (vb, params) = seeded(stream(seed, Purpose::Init, 7), dtype, &Device::Cpu);
        TanhNet {
            l1: candle_nn::linear(2, 12, vb.pp("l1")).unwrap(),
            l2: candle_nn::linear(12, 8, vb.pp("l2")).unwrap(),
            params,
            bug,
        }
    }
}

impl alkit::duq::Extractor for TanhNet {
    /// `(t1, t2)`: both layers' outputs.
    type Cache = (Tensor, Tensor);
    fn features(&self) -> usize {
        8
    }
    fn forward(&self, x: &Tensor, _train: bool) -> alkit::Result<(Tensor, Self::Cache)> {
        use candle_core::Module;
        let t1 = self.l1.forward(x)?.tanh()?;
        let t2 = self.l2.forward(&t1)?.tanh()?;
        Ok((t2.clone(), (t1, t2)))
    }
    fn input_gradient(&self, v: &Tensor, (t1, t2): &Self::Cache) -> alkit::Result<Tensor> {
        let dtanh = |t: &Tensor| -> candle_core::Result<Tensor> { 1.0 - t.sqr()? };
        let w2 = match self.bug {
            Bug::Detached => self.l2.weight().detach(),
            _ => self.l2.weight().clone(),
        };
        let g = (v * dtanh(t2)?)?.matmul(&w2)?;
        let g = match self.bug {
            Bug::MissingFactor => g,
            _ => (g * dtanh(t1)?)?,
        };
        Ok(g.matmul(self.l1.weight())?)
    }
    fn vars(&self) -> Vec<Var> {
        self.params.vars()
    }
}

// ------------------------------------------------------------------ real use: sources, hub, sessions

use alkit::data::image::write_image_folder;
use alkit::data::source::{load as load_source, Source};
use alkit::hub::{Hub, HubRepo, RepoKind};
use alkit::session::{Learner, QueryRequest, SessionConfig, SessionState};

/// The shipped IDX items' labels and `[0, 1]` pixels, for comparisons.
fn shipped() -> (Dataset, Dataset) {
    let s = load_idx_dir(&data_dir()).unwrap();
    (s.train, s.test)
}

/// Lays out `files` (repository path -> local file) as the hub cache does:
/// `CACHE/{kind}s--OWNER--NAME/refs/main` holding a commit, the files under
/// `snapshots/COMMIT/` (real caches symlink them to `blobs/`; copies read the same).
fn fake_hub_cache(cache: &Path, folder: &str, files: &[(&str, PathBuf)]) {
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let base = cache.join(folder);
    std::fs::create_dir_all(base.join("refs")).unwrap();
    std::fs::write(base.join("refs/main"), commit).unwrap();
    for (rel, src) in files {
        let dst = base.join("snapshots").join(commit).join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(src, &dst).unwrap();
    }
}

/// safetensors' serializer wants a `View`; candle tensors on CPU expose their bytes.
struct SafeView<'a>(&'a Tensor);

impl safetensors::View for SafeView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        match self.0.dtype() {
            DType::U8 => safetensors::Dtype::U8,
            DType::I64 => safetensors::Dtype::I64,
            _ => safetensors::Dtype::F32,
        }
    }
    fn shape(&self) -> &[usize] {
        self.0.dims()
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        let bytes: Vec<u8> = match self.0.dtype() {
            DType::U8 => self.0.flatten_all().unwrap().to_vec1::<u8>().unwrap(),
            DType::I64 => self
                .0
                .flatten_all()
                .unwrap()
                .to_vec1::<i64>()
                .unwrap()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            _ => unreachable!("only u8 and i64 here"),
        };
        bytes.into()
    }
    fn data_len(&self) -> usize {
        self.data().len()
    }
}

fn read_batch(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect()
}
