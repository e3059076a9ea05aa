//! The statistics over seeds (`alkit::metrics::stats`) against SciPy on the same numbers
//! (tests/reference/stats.py, live: the reference Python is `ALKIT_PYTHON`): Wilcoxon's
//! signed-rank test in each of SciPy's four regimes (exact, sign-flip permutation, normal
//! approximation with ties, zeros and more than 50 pairs), Student-t quantiles, the percentile
//! bootstrap interval within its Monte Carlo error, Friedman's test with ties, the chi-square
//! tail and the studentized range behind Nemenyi's critical difference; and by hand: the AUBC
//! of a curve worked out on paper, a t interval, the smallest exact p-values, Demšar's (2006)
//! table of Nemenyi's q and his worked critical difference. The stopping rules
//! (`alkit::metrics::stopping`) against small-text's criteria on the same prediction sequences
//! (tests/reference/stopping_smalltext.py).

use super::feature_methods::{python, reference};
use super::tmp;
use alkit::metrics::stats::{
    aubc, bootstrap_interval, chi2_sf, friedman, mean_interval, nemenyi_cd, t_quantile, wilcoxon,
};
use rand::SeedableRng;
use serde_json::{json, Value};

/// Paired differences that exercise every regime of scipy's `method="auto"`.
fn wilcoxon_cases() -> Vec<Vec<f64>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut draw = |n: usize, shift: f64| -> Vec<f64> {
        (0..n)
            .map(|_| alkit::rng::normal(&mut rng) * 0.02 + shift)
            .collect()
    };
    let mut cases = vec![
        draw(10, 0.01),                                           // exact
        draw(30, 0.004),                                          // exact
        draw(50, 0.0),                                            // exact, at the limit
        draw(51, 0.005),                                          // normal, no ties
        draw(80, 0.003),                                          // normal
        vec![0.5, -0.25, 0.25, 0.75, -0.5, 0.5, 1.0, 0.125],      // ties: permutation
        vec![0.1, 0.0, -0.2, 0.3, 0.0, 0.4, 0.5, -0.6, 0.7, 0.8], // zeros: permutation
        vec![0.03, 0.01, 0.02, 0.04, 0.05],                       // one sign: p = 1/16
        vec![1.0; 13],                                            // 13 ties
    ];
    // Ties and zeros past 13 pairs: the normal approximation with the tie correction.
    let tied: Vec<f64> = (0..20).map(|i| f64::from(i % 5 - 1) * 0.25).collect();
    cases.push(tied);
    let rounded: Vec<f64> = draw(40, 0.01)
        .iter()
        .map(|v| (v * 100.0).round() / 100.0)
        .collect();
    cases.push(rounded);
    cases
}

#[test]
fn statistics_equal_scipy_on_the_same_numbers() {
    let Some(py) = python() else { return };
    let dir = tmp("statistics");
    let cases = wilcoxon_cases();
    let t = [
        (0.975, 1.0),
        (0.975, 2.0),
        (0.975, 4.0),
        (0.975, 49.0),
        (0.995, 9.0),
        (0.025, 7.0),
        (0.9, 1000.0),
    ];
    let boot: Vec<Vec<f64>> = cases[..5].to_vec();
    let resamples = 20_000;
    let tables = friedman_tables();
    let chi2 = [
        (0.5, 1.0),
        (3.84, 1.0),
        (9.28, 3.0),
        (40.0, 9.0),
        (0.01, 12.0),
        (200.0, 4.0),
    ];
    let range: Vec<(f64, usize)> = (2..=12).map(|k| (0.95, k)).collect();
    let input = json!({"wilcoxon": cases, "t": t, "bootstrap": boot, "resamples": resamples,
        "friedman": tables, "chi2": chi2, "range": range});
    let out: Value = reference(&py, "stats.py", &input, &dir);
    for (d, want) in cases.iter().zip(out["wilcoxon"].as_array().unwrap()) {
        let got = wilcoxon(d);
        let (s, p) = (want[0].as_f64().unwrap(), want[1].as_f64().unwrap());
        assert_eq!(got.statistic, s, "{d:?}");
        assert!(
            (got.p - p).abs() <= 1e-12 + 1e-9 * p,
            "{} pairs: p {} vs scipy {p}",
            d.len(),
            got.p
        );
    }
    for (&(p, df), want) in t.iter().zip(out["t"].as_array().unwrap()) {
        let want = want.as_f64().unwrap();
        let got = t_quantile(p, df);
        assert!(
            (got - want).abs() <= 1e-10 * want.abs(),
            "t({p}, {df}): {got} vs {want}"
        );
    }
    let mut rng = alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0);
    for (d, want) in boot.iter().zip(out["bootstrap"].as_array().unwrap()) {
        let (lo, hi) = bootstrap_interval(d, resamples, 0.95, &mut rng);
        let (wlo, whi) = (want[0].as_f64().unwrap(), want[1].as_f64().unwrap());
        // Two Monte Carlo estimates of one quantile: within a small share of the width.
        let tol = 0.03 * (whi - wlo);
        assert!(
            (lo - wlo).abs() < tol && (hi - whi).abs() < tol,
            "{} pairs: ({lo}, {hi}) vs scipy ({wlo}, {whi})",
            d.len()
        );
    }
    for (table, want) in tables.iter().zip(out["friedman"].as_array().unwrap()) {
        let got = friedman(table);
        let (c, p) = (want[0].as_f64().unwrap(), want[1].as_f64().unwrap());
        assert!(
            (got.chi2 - c).abs() <= 1e-10 * c.abs().max(1.0),
            "{} vs {c}",
            got.chi2
        );
        assert!((got.p - p).abs() <= 1e-12 + 1e-9 * p, "{} vs {p}", got.p);
    }
    for (&(x, df), want) in chi2.iter().zip(out["chi2"].as_array().unwrap()) {
        let want = want.as_f64().unwrap();
        let got = chi2_sf(x, df);
        assert!(
            (got - want).abs() <= 1e-13 + 1e-10 * want,
            "chi2({x}, {df}): {got} vs {want}"
        );
    }
    for (&(_, k), want) in range.iter().zip(out["range"].as_array().unwrap()) {
        // The critical difference over one data set is q / sqrt(2) * sqrt(k (k + 1) / 6).
        let q = want.as_f64().unwrap() / 2f64.sqrt();
        let cd = q * ((k * (k + 1)) as f64 / 6.0).sqrt();
        let got = nemenyi_cd(k, 1, 0.05);
        assert!((got - cd).abs() < 1e-6 * cd, "k = {k}: {got} vs {cd}");
    }
}

/// Tables `[data set][strategy]` for Friedman's test: random, with ties, and one where every
/// data set ranks the strategies alike.
fn friedman_tables() -> Vec<Vec<Vec<f64>>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let random: Vec<Vec<f64>> = (0..14)
        .map(|_| (0..4).map(|_| alkit::rng::uniform(&mut rng)).collect())
        .collect();
    let tied = vec![
        vec![0.8, 0.8, 0.7, 0.6, 0.6],
        vec![0.9, 0.7, 0.7, 0.7, 0.5],
        vec![0.6, 0.5, 0.8, 0.6, 0.4],
        vec![0.7, 0.7, 0.7, 0.7, 0.7],
    ];
    let alike: Vec<Vec<f64>> = (0..6)
        .map(|d| (0..3).map(|s| f64::from(d) + f64::from(s) * 0.1).collect())
        .collect();
    vec![random, tied, alike]
}

#[test]
fn aubc_intervals_and_small_p_values_worked_by_hand() {
    // Labels 10, 20, 40; accuracies 0.5, 0.7, 0.8: trapezoids 10 * 0.6 + 20 * 0.75 = 21, over
    // 30 labels spent.
    assert!((aubc(&[10.0, 20.0, 40.0], &[0.5, 0.7, 0.8]) - 0.7).abs() < 1e-15);
    assert_eq!(aubc(&[10.0], &[0.25]), 0.25);
    // 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302652729749464: 2 ± 4.3027 / sqrt(3).
    let i = mean_interval(&[1.0, 2.0, 3.0], 0.95);
    let half = 4.302_652_729_749_464 / 3f64.sqrt();
    assert!((i.lo - (2.0 - half)).abs() < 1e-12 && (i.hi - (2.0 + half)).abs() < 1e-12);
    assert!(mean_interval(&[0.4], 0.95).lo.is_nan());
    // Three seeds all better: R+ = 6 is one of 2^3 sign patterns; two-sided p = 2/8. Three
    // seeds can never show a difference at 5%.
    let r = wilcoxon(&[0.01, 0.02, 0.03]);
    assert_eq!((r.statistic, r.p), (0.0, 0.25));
    // Six: 2/64.
    assert_eq!(wilcoxon(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).p, 2.0 / 64.0);
    assert_eq!(wilcoxon(&[0.0, 0.0, 0.0]).p, 1.0);
    // A difference that is not a number: no test (SciPy's `nan_policy="propagate"`).
    assert!(wilcoxon(&[0.01, f64::NAN, 0.03]).p.is_nan());
    // Demšar 2006, Table 5(a): Nemenyi's q at 5% for k = 2..10, and his example's critical
    // difference, 1.25 for 4 classifiers over 14 data sets.
    let table = [
        1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164,
    ];
    for (k, q) in (2..=10).zip(table) {
        let got = nemenyi_cd(k, 1, 0.05) / ((k * (k + 1)) as f64 / 6.0).sqrt();
        // The table truncates to three decimals (2.3437 is printed 2.343).
        assert!((got - q).abs() < 1e-3, "k = {k}: {got} vs {q}");
    }
    assert!((nemenyi_cd(4, 14, 0.05) - 1.25).abs() < 5e-3);
}

/// `summary.csv`'s `aubc_mean` by strategy.
fn summary_aubc(dir: &std::path::Path) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "aubc_mean").unwrap();
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[col].parse().unwrap())
        })
        .collect()
}

#[test]
fn compare_ranks_curve_folders_as_their_summaries_say() {
    let dir = tmp("compare");
    let emb = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/embeddings/mnist-rp32.safetensors");
    let names = ["one", "two", "three"];
    for (i, name) in names.iter().enumerate() {
        let o = super::alkit_cmd()
            .args(["-q", "curve", "--data"])
            .arg(&emb)
            .args(["--model", "linear", "--scorer", "entropy,typiclust,random"])
            .args(["--seeds", "2", "--cycles", "2", "--steps", "30", "--seed"])
            .arg((10 * i).to_string())
            .arg("--out")
            .arg(dir.join(name))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    batches_count_each_cycle_s_classes(&dir.join("one"), &emb);
    recall_adds_up_to_accuracy(&dir.join("one"), &emb);
    the_vs_random_plot_pairs_seeds(&dir.join("one"));
    let out = dir.join("cmp");
    let o = super::alkit_cmd()
        .arg("compare")
        .args(names.iter().map(|n| dir.join(n)))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Ranks worked out here from each folder's summary.csv (1 = highest AUBC; no ties in these
    // runs), summed over the three data sets.
    let mut sums = std::collections::BTreeMap::<String, f64>::new();
    let mut aubcs = std::collections::BTreeMap::<String, Vec<f64>>::new();
    for n in names {
        let mut rows = summary_aubc(&dir.join(n));
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert!(rows.windows(2).all(|w| w[0].1 != w[1].1), "a tie: {rows:?}");
        for (r, (s, a)) in rows.iter().enumerate() {
            *sums.entry(s.clone()).or_default() += (r + 1) as f64;
            aubcs.entry(s.clone()).or_default().push(*a);
        }
    }
    let text = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "strategy,mean_rank,near_best,one,two,three"
    );
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let rank: f64 = f[1].parse().unwrap();
        assert!((rank - sums[f[0]] / 3.0).abs() < 1e-4, "{l}");
        for (cell, want) in f[3..].iter().zip(&aubcs[f[0]]) {
            assert!((cell.parse::<f64>().unwrap() - want).abs() < 1e-6, "{l}");
        }
    }
    // Friedman by hand for k = 3, n = 3: 12 / (n k (k + 1)) sum R^2 - 3 n (k + 1), and with two
    // degrees of freedom the chi-square tail is exp(-x / 2).
    let chi2 = 12.0 / 36.0 * sums.values().map(|r| r * r).sum::<f64>() - 36.0;
    let json: Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let got = json["friedman"]["chi2"].as_f64().unwrap();
    assert!((got - chi2).abs() < 1e-9, "{got} vs {chi2}");
    let p = json["friedman"]["p"].as_f64().unwrap();
    assert!((p - (-chi2 / 2.0).exp()).abs() < 1e-12, "{p}");
    // Demšar's q for k = 3 is 2.343: CD = 2.343 sqrt(3 * 4 / (6 * 3)).
    let cd = json["critical_difference"].as_f64().unwrap();
    assert!((cd - 2.343 * (12.0f64 / 18.0).sqrt()).abs() < 1e-3, "{cd}");
    // The diagram names every strategy with its mean rank and draws the difference.
    let svg = std::fs::read_to_string(out.join("compare-cd.svg")).unwrap();
    for (s, r) in &sums {
        let label = format!("{s} ({:.2})", r / 3.0);
        assert!(svg.contains(&label), "{label} not in the diagram");
    }
    assert!(svg.contains(&format!("CD = {cd:.2}")));
    assert!(out.join("compare-cd.png").is_file());
}

/// `recall.csv` of the curve folder `run` against the test labels of `emb` and `curve.csv`:
/// each row's class recalls, weighted by the classes' test counts, give the cycle's accuracy,
/// and their mean (over classes with test items) its balanced accuracy, in both files.
fn recall_adds_up_to_accuracy(run: &std::path::Path, emb: &std::path::Path) {
    let labels = int_labels(emb, "test_labels");
    let classes = labels.iter().max().unwrap() + 1;
    let mut count = vec![0f64; classes];
    labels.iter().for_each(|&y| count[y] += 1.0);
    let table = |name: &str| -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(run.join(name)).unwrap();
        text.lines()
            .map(|l| l.split(',').map(String::from).collect())
            .collect()
    };
    let (recall, curve) = (table("recall.csv"), table("curve.csv"));
    let header: Vec<String> = ["scorer", "seed", "cycle", "labeled", "balanced_acc"]
        .map(String::from)
        .into_iter()
        .chain((0..classes).map(|c| format!("class_{c}")))
        .collect();
    assert_eq!(recall[0], header);
    assert_eq!(curve[0].last().unwrap(), "balanced_acc");
    assert_eq!(
        (recall.len(), curve.len()),
        (19, 19),
        "2 seeds x 3 scorers x 3 cycles"
    );
    for (r, c) in recall[1..].iter().zip(&curve[1..]) {
        assert_eq!(r[..4], c[..4]);
        let rec: Vec<f64> = r[5..].iter().map(|v| v.parse().unwrap()).collect();
        let acc: f64 =
            rec.iter().zip(&count).map(|(r, n)| r * n).sum::<f64>() / labels.len() as f64;
        assert!(
            (acc - c[4].parse::<f64>().unwrap()).abs() < 2e-6,
            "{r:?} {c:?}"
        );
        let balanced = rec.iter().sum::<f64>() / classes as f64;
        for cell in [&r[4], c.last().unwrap()] {
            assert!(
                (balanced - cell.parse::<f64>().unwrap()).abs() < 2e-6,
                "{r:?}"
            );
        }
    }
}

/// The paired-difference figure of the curve folder `run` (two seeds): its lines are each
/// strategy's mean accuracy difference to random per cycle, read back from the runs' states
/// and computed here from `curve.csv`; its bands the 95% t interval, with two seeds
/// `mean ± 12.706 |d1 - d2| / 2` (t at 0.975 with one degree of freedom, the sample standard
/// deviation of two values being `|d1 - d2| / sqrt 2`).
fn the_vs_random_plot_pairs_seeds(run: &std::path::Path) {
    assert!(run.join("vs-random.svg").is_file() && run.join("vs-random.png").is_file());
    let svg = std::fs::read_to_string(run.join("vs-random.svg")).unwrap();
    assert!(
        svg.contains("typiclust") && svg.contains("over 2 seeds"),
        "{svg}"
    );
    let mut states = Vec::new();
    for seed in 0..2 {
        for s in ["entropy", "typiclust", "random"] {
            let path = run.join(format!("runs/{s}-seed{seed}.json"));
            let st: alkit::acquire::RunState =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            states.push(st);
        }
    }
    let fig = alkit::jobs::curve::vs_random_figure(&states).unwrap();
    // A cycle recorded before recall was kept (a resumed older run) gets empty cells.
    let mut old = states.clone();
    (old[0].records[0].balanced_acc, old[0].records[0].recall) = (None, Vec::new());
    let path = run.join("recall-old.csv");
    alkit::jobs::curve::write_recall_csv(&path, &old).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(
        rows[1],
        format!(
            "entropy,0,0,{},{}",
            old[0].records[0].labeled,
            ",".repeat(10)
        )
    );
    let full = std::fs::read_to_string(run.join("recall.csv")).unwrap();
    assert_eq!(rows[2..], full.lines().collect::<Vec<_>>()[2..]);
    let text = std::fs::read_to_string(run.join("curve.csv")).unwrap();
    let cell = |s: &str, seed: &str, cycle: usize, column: usize| -> f64 {
        let row = text
            .lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|r| r[0] == s && r[1] == seed && r[2] == cycle.to_string())
            .unwrap();
        row[column].parse().unwrap()
    };
    let acc = |s: &str, seed: &str, cycle: usize| cell(s, seed, cycle, 4);
    let series = &fig.panels[0].series;
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["entropy", "typiclust", "random"]);
    for line in series {
        assert_eq!((line.points.len(), line.band.len()), (3, 3));
        for (c, (&(x, mean), band)) in line.points.iter().zip(&line.band).enumerate() {
            let d: Vec<f64> = ["0", "1"]
                .map(|seed| acc(&line.name, seed, c) - acc("random", seed, c))
                .to_vec();
            let half = 12.706 * (d[0] - d[1]).abs() / 2.0;
            let want = (d[0] + d[1]) / 2.0;
            assert_eq!(x, cell("random", "0", c, 3));
            assert!((mean - want).abs() < 2e-6, "{} {c}", line.name);
            assert!(
                (band.1 - (want - half)).abs() < 3e-5 + 2e-5 * half,
                "{band:?}"
            );
            assert!(
                (band.2 - (want + half)).abs() < 3e-5 + 2e-5 * half,
                "{band:?}"
            );
        }
    }
}

/// The integer labels `name` of the embedding file `emb`.
fn int_labels(emb: &std::path::Path, name: &str) -> Vec<usize> {
    let bytes = std::fs::read(emb).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    match t.dtype() {
        safetensors::Dtype::I64 => t
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as usize)
            .collect(),
        d => panic!("labels are {d:?}"),
    }
}

/// `batches.csv` of the curve folder `run` against its runs' labeled items and the labels
/// the embedding file `emb` holds, counted here.
fn batches_count_each_cycle_s_classes(run: &std::path::Path, emb: &std::path::Path) {
    let labels = int_labels(emb, "labels");
    let classes = labels.iter().max().unwrap() + 1;
    let mut want = vec![format!(
        "scorer,seed,cycle,items,{}",
        (0..classes)
            .map(|c| format!("class_{c}"))
            .collect::<Vec<_>>()
            .join(",")
    )];
    for seed in 0..2 {
        for s in ["entropy", "typiclust", "random"] {
            let path = run.join(format!("runs/{s}-seed{seed}.json"));
            let state: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let mut counts = vec![vec![0usize; classes]; 3];
            for pair in state["labeled"].as_array().unwrap() {
                let (i, c) = (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap());
                counts[c as usize][labels[i as usize]] += 1;
            }
            for (cycle, c) in counts.iter().enumerate() {
                let items: usize = c.iter().sum();
                let cells: Vec<String> = c.iter().map(usize::to_string).collect();
                want.push(format!("{s},{seed},{cycle},{items},{}", cells.join(",")));
            }
        }
    }
    let got = std::fs::read_to_string(run.join("batches.csv")).unwrap();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
}

/// Prediction sequences that settle as a model would: each item's logits drift from noise
/// towards its own class over `rounds` rounds, with a round that repeats the last one (kappa
/// 1, nothing changed), and for two classes a round that predicts no positive (no change in
/// F) and one that is nearly certain (overall uncertainty below 0.05).
fn settling(classes: usize, n: usize, rounds: usize, seed: u64) -> Vec<Vec<Vec<f32>>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let truth: Vec<usize> = (0..n).map(|i| (i * 7 + i / 3) % classes).collect();
    let mut seq: Vec<Vec<Vec<f32>>> = Vec::new();
    for t in 0..rounds {
        let noise = 3.0 / (1.0 + t as f64);
        let round: Vec<Vec<f32>> = (0..n)
            .map(|i| {
                let z: Vec<f64> = (0..classes)
                    .map(|c| {
                        let pull = if c == truth[i] { 0.6 * t as f64 } else { 0.0 };
                        pull + noise * alkit::rng::normal(&mut rng)
                    })
                    .collect();
                let m = z.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.iter().map(|v| (v / s) as f32).collect()
            })
            .collect();
        seq.push(round);
        if t == rounds / 2 {
            seq.push(seq.last().unwrap().clone());
        }
    }
    if classes == 2 {
        seq.insert(2, vec![vec![0.9, 0.1]; n]);
        seq.push(vec![vec![0.001, 0.999]; n]);
    }
    seq
}

#[test]
fn stopping_rules_answer_as_small_text_does() {
    use alkit::metrics::stopping::{measure, StopMeasure, StopRule};
    let Some(py) = python() else { return };
    let dir = tmp("stopping");
    let seqs = [
        (2, 120, 14, 1),
        (3, 90, 12, 2),
        (5, 200, 16, 3),
        (2, 40, 20, 4),
    ];
    let seqs: Vec<(usize, Vec<Vec<Vec<f32>>>)> = seqs
        .iter()
        .map(|&(c, n, r, s)| (c, settling(c, n, r, s)))
        .collect();
    let input = json!({"sequences": seqs.iter().map(|(c, r)| json!({"classes": c, "rounds": r}))
        .collect::<Vec<_>>()});
    let out: Value = reference(&py, "stopping_smalltext.py", &input, &dir);
    let close = |a: Option<f64>, b: &Value| match (a, b.as_f64()) {
        (None, None) => true,
        (Some(x), Some(y)) => (x - y).abs() < 1e-9,
        _ => false,
    };
    let mut fired = std::collections::BTreeSet::new();
    for ((classes, rounds), want) in seqs.iter().zip(out["sequences"].as_array().unwrap()) {
        let (mut seen, mut before): (Vec<StopMeasure>, Option<Vec<u32>>) = (Vec::new(), None);
        for (t, (round, w)) in rounds.iter().zip(want.as_array().unwrap()).enumerate() {
            let flat: Vec<f32> = round.concat();
            let (m, predicted) = measure(&flat, *classes, before.as_deref());
            seen.push(m);
            before = Some(predicted);
            let at = format!("{classes} classes, round {t}");
            assert!(
                close(m.kappa, &w["kappa"]),
                "{at}: kappa {:?} vs {}",
                m.kappa,
                w["kappa"]
            );
            assert!(close(m.changed, &w["changed"]), "{at}: changed");
            assert!(
                close(Some(m.uncertainty), &w["uncertainty"]),
                "{at}: uncertainty"
            );
            assert!(close(m.delta_f, &w["delta_f"]), "{at}: delta F");
            for rule in StopRule::ALL {
                let says = rule.says_stop(&seen);
                match w["stop"][rule.name()].as_bool() {
                    Some(want) => assert_eq!(says, want, "{at}: {}", rule.name()),
                    None => assert!(!says, "{at}: {} needs two classes", rule.name()),
                }
                if says {
                    fired.insert(rule.name());
                }
            }
        }
    }
    // Every rule stops somewhere and not everywhere, so each comparison has both answers.
    assert_eq!(fired.len(), 4, "{fired:?}");
}
