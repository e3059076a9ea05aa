//! Labeling sessions run every strategy of the registry through the shared round: scorers,
//! selections, BatchBALD and ensembles, exactly as the simulated loop does.

use super::{alkit_cmd, data_dir, kind, read_batch, shipped, tmp};
use alkit::data::image::write_image_folder;
use alkit::data::source::{load as load_source, Source};
use alkit::hub::Hub;
use alkit::label_studio::ExportFormat;
use alkit::models::Arch;
use alkit::observe::Silent;
use alkit::session::{Learner, QueryRequest, SessionConfig};
use alkit::strategies::{ScorerSettings, StrategyKind};
use alkit::train::TrainConfig;
use alkit::Error;
use candle_core::Device;
use std::collections::HashSet;

/// A session over 120 PNGs of the shipped subset, the first 20 labeled.
fn session(dir: &std::path::Path, ensemble: Option<usize>) -> Learner {
    session_with(dir, ensemble, None)
}

/// [`session`] passing on the word of the stopping rule `stop`.
fn session_with(
    dir: &std::path::Path,
    ensemble: Option<usize>,
    stop: Option<alkit::metrics::stopping::StopRule>,
) -> Learner {
    let (train, _) = shipped();
    let items: Vec<(usize, Option<String>)> = (0..120)
        .map(|i| (i, (i < 20).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("pool");
    write_image_folder(&pool, &train, &items).unwrap();
    let source = Source::Images(pool.clone());
    let loaded = load_source(
        &source,
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    let seeds = loaded.pool.given_labels();
    let config = SessionConfig {
        arch: Arch::default_for(&loaded.pool.item_shape, 10),
        train: TrainConfig {
            steps: 20,
            ..TrainConfig::default()
        },
        seed: 3,
        batch: 512,
        ensemble,
        display_root: None,
        stop,
    };
    let classes: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    Learner::new(&pool.to_string_lossy(), loaded, classes, &seeds, config).unwrap()
}

/// The shipped labels of a batch of [`session`]'s unlabeled PNGs (named by their index).
fn shipped_answers(
    batch: &[alkit::session::Query],
    train: &alkit::data::Dataset,
) -> Vec<(String, String)> {
    batch
        .iter()
        .map(|q| {
            let i: usize = q.id.trim_end_matches(".png").parse().unwrap();
            (q.id.clone(), train.labels()[i].to_string())
        })
        .collect()
}

/// Scorer settings with few MC draws and perturbations, to keep every strategy quick.
fn few_draws() -> ScorerSettings {
    ScorerSettings {
        mc_samples: 4,
        perturbations: 2,
        perturb_samples: 2,
        ..ScorerSettings::default()
    }
}

#[test]
fn sessions_run_every_strategy_of_the_registry() {
    let dir = tmp("session-strategies");
    let mut learner = session(&dir, None);
    let settings = few_draws();
    let (mut ran, mut refused) = (0, 0);
    for kind in StrategyKind::all() {
        let request = QueryRequest {
            strategy: kind.strategy(&settings).unwrap(),
            n: 5,
            include_pending: true,
            subsample: None,
        };
        let got = learner.query(&request, &Device::Cpu, &mut Silent);
        let needs = request.strategy.needs();
        let other_task = needs.is_some_and(|n| n.is_regression() || n.is_multi_label());
        if other_task {
            // A regression or multi-label score on a classifier's session: refused, naming
            // the scorer and the task it is for.
            let e = got.expect_err("another task's score on a classifier must be refused");
            let m = e.to_string();
            assert!(
                m.contains("regression") || m.contains("multi-label"),
                "{}: {m}",
                kind.name()
            );
            refused += 1;
            continue;
        }
        if kind.name() == "duq" {
            // Kernel values need a DUQ model: a settings error naming the scorer.
            let e = got.expect_err("duq on a CNN must be refused");
            assert!(
                matches!(
                    e,
                    Error::Config {
                        field: "scorer",
                        ..
                    }
                ),
                "{e}"
            );
            continue;
        }
        let batch = got.unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_eq!(batch.len(), 5, "{}", kind.name());
        let ids: HashSet<&str> = batch.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids.len(), 5, "{}: an item picked twice", kind.name());
        assert!(
            batch.iter().all(|q| !q.id.contains('/')),
            "{}: picked a labeled item",
            kind.name()
        );
        // Scorers report the picks' scores (top-k: best first); random picks and joint
        // criteria score no single item.
        let scored = matches!(kind.build(&settings), alkit::round::Pick::Scored { .. });
        assert_eq!(
            batch.iter().all(|q| q.score.is_some()),
            scored,
            "{}",
            kind.name()
        );
        if scored {
            let s: Vec<f32> = batch.iter().map(|q| q.score.unwrap()).collect();
            assert!(s.windows(2).all(|w| w[0] >= w[1]), "{}: {s:?}", kind.name());
        }
        let round = learner.state().rounds.last().unwrap();
        assert_eq!(round.scorer, kind.strategy(&settings).unwrap().name());
        ran += 1;
    }
    // duq, the four regression scores and seven regression batch rules, and the five
    // multi-label scores.
    assert_eq!((ran, refused), (StrategyKind::all().count() - 17, 16));
}

#[test]
fn an_ensemble_session_scores_with_member_draws_and_saves_every_member() {
    let dir = tmp("session-ensemble");
    let mut learner = session(&dir, Some(2));
    let settings = ScorerSettings {
        members: true,
        ..ScorerSettings::default()
    };
    for name in ["bald", "batchbald"] {
        let request = QueryRequest {
            strategy: StrategyKind::named(name)
                .unwrap()
                .strategy(&settings)
                .unwrap(),
            n: 4,
            include_pending: false,
            subsample: None,
        };
        let batch = learner.query(&request, &Device::Cpu, &mut Silent).unwrap();
        assert_eq!(batch.len(), 4);
    }
    let state = dir.join("state");
    learner.save(&state).unwrap();
    for m in 0..2 {
        let ck = alkit::checkpoint::load(&state.join("model").join(format!("m{m}")), &Device::Cpu)
            .unwrap();
        assert_eq!(ck.config.classes.len(), 10);
    }
    // MC-dropout draws cannot stand in for members: the members flag without an ensemble
    // is refused by the evidence step, not silently answered.
    let mut single = session(&tmp("session-single"), None);
    let request = QueryRequest {
        strategy: StrategyKind::named("bald")
            .unwrap()
            .strategy(&settings)
            .unwrap(),
        n: 4,
        include_pending: false,
        subsample: None,
    };
    let e = single
        .query(&request, &Device::Cpu, &mut Silent)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Config {
                field: "ensemble",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn ids_that_need_quoting_survive_query_then_teach() {
    // A CSV pool whose ids hold a comma, a quote and a line break: the batch file `query`
    // writes must give the same ids back to `teach`, and a BOM in the answers is accepted.
    let dir = tmp("session-quoting");
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("pool.csv");
    let mut text = String::from("id,label,f1,f2\n");
    let ids = ["plain", "a,b", "say \"hi\"", "two\nlines", "x", "y"];
    for (k, id) in ids.iter().enumerate() {
        let quoted = format!("\"{}\"", id.replace('"', "\"\""));
        let label = if k < 2 {
            (k % 2).to_string()
        } else {
            String::new()
        };
        text.push_str(&format!("{quoted},{label},{k}.5,{}\n", 10 - k));
    }
    std::fs::write(&pool, text).unwrap();
    let source = Source::parse(&pool.to_string_lossy()).unwrap();
    let loaded = load_source(
        &source,
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    let seeds = loaded.pool.given_labels();
    assert_eq!(loaded.pool.ids, ids);
    let config = SessionConfig {
        arch: Arch::default_for(&loaded.pool.item_shape, 2),
        train: TrainConfig {
            steps: 5,
            ..TrainConfig::default()
        },
        seed: 1,
        batch: 64,
        ensemble: None,
        display_root: None,
        stop: None,
    };
    let classes = vec!["0".to_string(), "1".to_string()];
    let mut learner =
        Learner::new(&pool.to_string_lossy(), loaded, classes, &seeds, config).unwrap();
    let request = QueryRequest {
        strategy: StrategyKind::named("entropy")
            .unwrap()
            .strategy(&ScorerSettings::default())
            .unwrap(),
        n: 4,
        include_pending: false,
        subsample: None,
    };
    let batch = learner.query(&request, &Device::Cpu, &mut Silent).unwrap();
    let out = dir.join("batch.csv");
    learner.write_batch(&out, &batch).unwrap();
    // The person's answers: the batch's id column as written, with a label, behind a BOM.
    let written = std::fs::read_to_string(&out).unwrap();
    let mut rd = csv::Reader::from_reader(written.as_bytes());
    let mut answers = String::from("\u{feff}id,label\n");
    let mut got = Vec::new();
    for rec in rd.records() {
        let rec = rec.unwrap();
        got.push(rec[0].to_string());
        answers.push_str(&format!("\"{}\",1\n", rec[0].replace('"', "\"\"")));
    }
    let want: Vec<String> = batch.iter().map(|q| q.id.clone()).collect();
    assert_eq!(got, want);
    let answered = dir.join("answers.csv");
    std::fs::write(&answered, answers).unwrap();
    assert_eq!(learner.teach_csv(&answered).unwrap().taught, 4);
    let labeled: HashSet<&str> = learner
        .state()
        .labeled
        .iter()
        .map(|l| l.id.as_str())
        .collect();
    for id in &want {
        assert!(labeled.contains(id.as_str()), "{id:?} was not taught");
    }
}

#[test]
fn label_studio_exports_resolve_annotators_by_majority_and_name_bad_tasks() {
    // The fixture follows Label Studio's documented export: p2 one annotator, p3 three that
    // disagree 2:1, p4 only a cancelled (skipped) annotation, p5 a cancelled one plus one
    // whose result also holds a non-choice region.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/label-studio/export.json");
    let e = alkit::label_studio::read_export(&fixture).unwrap();
    let rows: Vec<(usize, &str, &str)> = e
        .rows
        .iter()
        .map(|r| (r.row, r.id.as_str(), r.label.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![(1, "p2", "dog"), (2, "p3", "cat"), (4, "p5", "dog")]
    );
    assert_eq!(e.unanswered, 1);
    let dir = tmp("label-studio-export");
    let bad = |name: &str, json: &str| {
        let p = dir.join(name);
        std::fs::write(&p, json).unwrap();
        alkit::label_studio::read_export(&p)
            .unwrap_err()
            .to_string()
    };
    let vote = |c: &str| {
        format!(
            r#"{{"was_cancelled":false,"result":[{{"type":"choices","from_name":"label","to_name":"image","value":{{"choices":["{c}"]}}}}]}}"#
        )
    };
    let tie = format!(
        r#"[{{"data":{{"alkit_id":"a"}},"annotations":[]}},{{"data":{{"alkit_id":"b"}},"annotations":[{},{}]}}]"#,
        vote("cat"),
        vote("dog")
    );
    let m = bad("tie.json", &tie);
    assert!(m.contains("tie.json:2") && m.contains("no majority"), "{m}");
    let m = bad(
        "foreign.json",
        r#"[{"data":{"image":"x.png"},"annotations":[]}]"#,
    );
    assert!(
        m.contains("foreign.json:1") && m.contains("alkit_id"),
        "{m}"
    );
    let m = bad("object.json", r#"{"tasks":[]}"#);
    assert!(
        m.contains("object.json") && m.contains("list of tasks"),
        "{m}"
    );
    let m = bad(
        "two.json",
        &format!(
            r#"[{{"data":{{"alkit_id":"a"}},"annotations":[{}]}}]"#,
            vote("cat").replace(r#"["cat"]"#, r#"["cat","dog"]"#)
        ),
    );
    assert!(
        m.contains("two.json:1") && m.contains("one class per item"),
        "{m}"
    );
}

#[test]
fn label_studio_round_trip_teaches_what_the_csv_path_teaches() {
    // query --format label-studio -> (a person answers in Label Studio) -> export -> teach
    // leaves the session exactly as `teach` of the same answers as CSV.
    let (train, _) = shipped();
    let dir = tmp("label-studio-round-trip");
    let items: Vec<(usize, Option<String>)> = (0..120)
        .map(|i| (i, (i < 20).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("pool");
    write_image_folder(&pool, &train, &items).unwrap();
    let alkit = |args: &[&str]| {
        let o = super::alkit_cmd().arg("-q").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let s = |p: std::path::PathBuf| p.display().to_string();
    let (state, batch) = (dir.join("s"), dir.join("batch.json"));
    let classes = "0,1,2,3,4,5,6,7,8,9";
    alkit(&[
        "init",
        "--pool",
        &s(pool.clone()),
        "--state",
        &s(state.clone()),
        "--classes",
        classes,
        "--steps",
        "30",
    ]);
    alkit(&[
        "query",
        "--state",
        &s(state.clone()),
        "--n",
        "8",
        "--format",
        "label-studio",
        "--out",
        &s(batch.clone()),
    ]);
    let config = std::fs::read_to_string(dir.join("batch.xml")).unwrap();
    assert!(
        config.contains(r#"<Choices name="label" toName="image""#),
        "{config}"
    );
    assert_eq!(config.matches("<Choice value=").count(), 10);
    let tasks: serde_json::Value = serde_json::from_slice(&std::fs::read(&batch).unwrap()).unwrap();
    let tasks = tasks.as_array().unwrap();
    assert_eq!(tasks.len(), 8);
    let loaded = load_source(
        &Source::Images(pool.clone()),
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    let mut export = Vec::new();
    let mut csv = String::from("id,label\n");
    let (mut last_score, mut sums) = (0.0, (0.0, 0.0));
    for (rank, t) in tasks.iter().enumerate() {
        let id = t["data"]["alkit_id"].as_str().unwrap();
        let index = t["data"]["alkit_index"].as_u64().unwrap() as usize;
        assert_eq!(loaded.pool.ids[index], id);
        // The image is the item's own pixels, as a PNG data URI.
        let uri = t["data"]["image"].as_str().unwrap();
        let b64 = uri.strip_prefix("data:image/png;base64,").unwrap();
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let img = alkit::data::image::decode(&png, std::path::Path::new("task.png")).unwrap();
        let own = &loaded.pool.x[index * 784..(index + 1) * 784];
        let back: Vec<f32> = img.pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
        assert_eq!(back, own);
        // Label Studio shows the lowest prediction score first, as a confidence: the
        // scores rise along alkit's order, within [0, 1], and sum to the confidences'
        // sum (isotonic regression keeps each pooled block's mean) within its 1e-4 nudge.
        let p = &t["predictions"][0];
        let score = p["score"].as_f64().unwrap();
        assert!(score > last_score && score < 1.0, "rank {rank}: {score}");
        last_score = score;
        sums.0 += score;
        sums.1 += p["result"][0]["score"].as_f64().unwrap();
        assert_eq!(
            p["result"][0]["meta"]["alkit_rank"],
            serde_json::json!(rank + 1)
        );
        let predicted = p["result"][0]["value"]["choices"][0].as_str().unwrap();
        assert!(classes.split(',').any(|c| c == predicted));
        // The person's answer: the true digit.
        let truth =
            train.labels()[id.trim_end_matches(".png").parse::<usize>().unwrap()].to_string();
        let mut done = t.clone();
        done["id"] = serde_json::json!(500 + rank);
        done["annotations"] = serde_json::json!([{
            "id": 900 + rank, "completed_by": 1, "was_cancelled": false, "ground_truth": false,
            "result": [{"from_name": "label", "to_name": "image", "type": "choices",
                        "value": {"choices": [truth]}}],
        }]);
        export.push(done);
        csv.push_str(&format!("{id},{truth}\n"));
    }
    assert!((sums.0 - sums.1).abs() < 8e-4, "{sums:?}");
    let twin = dir.join("s-csv");
    std::fs::create_dir_all(&twin).unwrap();
    std::fs::copy(state.join("session.json"), twin.join("session.json")).unwrap();
    std::fs::write(
        dir.join("export.json"),
        serde_json::to_vec(&export).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("answers.csv"), csv).unwrap();
    alkit(&[
        "teach",
        "--state",
        &s(state.clone()),
        "--labels",
        &s(dir.join("export.json")),
    ]);
    alkit(&[
        "teach",
        "--state",
        &s(twin.clone()),
        "--labels",
        &s(dir.join("answers.csv")),
    ]);
    assert_eq!(
        std::fs::read(state.join("session.json")).unwrap(),
        std::fs::read(twin.join("session.json")).unwrap()
    );
    let st: alkit::session::SessionState = alkit::session::SessionState::read(&state).unwrap();
    assert_eq!((st.labeled.len(), st.pending.len()), (28, 0));
}

/// `learner`'s session started again over its pool read from the folder (the seed labels
/// from the folder's listing), then resumed from the saved state as a streamed session.
fn streamed_twin(learner: &Learner, pool: &std::path::Path) -> Learner {
    let source = Source::Images(pool.to_path_buf());
    let open = alkit::data::reader::opener(source.clone(), Hub::new(pool.join("nohub"), true));
    let given = alkit::data::source::listed_labels(&source)
        .unwrap()
        .unwrap()
        .given;
    let st = learner.state();
    let fresh = Learner::new_streamed(
        &st.source,
        open.clone(),
        None,
        st.classes.clone(),
        &given,
        st.config.clone(),
        &mut Silent,
    )
    .unwrap();
    assert_eq!(fresh.state(), st);
    let origin = std::path::Path::new("session.json");
    Learner::resume_streamed(st.clone(), open, None, origin, &mut Silent).unwrap()
}

#[test]
fn a_streamed_session_asks_for_what_one_in_memory_asks_for_under_every_strategy() {
    // The same session over its pool decoded in memory and over the pool read from the
    // folder a chunk at a time: every strategy of the registry (noise, ensembles' draws and
    // BatchBALD included) returns the same batch with the same score bits, round after round,
    // and the two states stay equal as answers arrive.
    let dir = tmp("session-streamed");
    let mut memory = session(&dir, None);
    let mut streamed = streamed_twin(&memory, &dir.join("pool"));
    assert_eq!(streamed.items().ids(), memory.items().ids());
    let (train, _) = shipped();
    let settings = few_draws();
    let mut ran = 0;
    // Not duq (a DUQ model's), nor the regression and multi-label scores (those models').
    let regression = |k: &StrategyKind| {
        k.strategy(&settings)
            .ok()
            .and_then(|s| s.needs())
            .is_some_and(|n| n.is_regression() || n.is_multi_label())
    };
    for (k, kind) in StrategyKind::all()
        .filter(|k| k.name() != "duq" && !regression(k))
        .enumerate()
    {
        let request = QueryRequest {
            // Two items each: every strategy of the registry fits in the 100 unlabeled.
            strategy: kind.strategy(&settings).unwrap(),
            n: 2,
            include_pending: false,
            subsample: (k % 3 == 0).then_some(40),
        };
        let a = memory.query(&request, &Device::Cpu, &mut Silent).unwrap();
        let b = streamed.query(&request, &Device::Cpu, &mut Silent).unwrap();
        let bits = |q: &[alkit::session::Query]| -> Vec<(String, usize, Option<u32>)> {
            q.iter()
                .map(|q| (q.id.clone(), q.index, q.score.map(f32::to_bits)))
                .collect()
        };
        assert_eq!(bits(&a), bits(&b), "{}", kind.name());
        let indices: Vec<usize> = a.iter().map(|q| q.index).collect();
        let (pa, pb) = (
            memory.predicted(&indices, &Device::Cpu).unwrap(),
            streamed.predicted(&indices, &Device::Cpu).unwrap(),
        );
        assert_eq!(format!("{pa:?}"), format!("{pb:?}"), "{}", kind.name());
        // The page's values of the batch: the source's, from memory or read for the batch.
        streamed.items().prefetch(&indices).unwrap();
        assert_eq!(
            streamed.items().values(&indices).unwrap(),
            memory.items().values(&indices).unwrap()
        );
        // Every other round the batch is answered (with the shipped labels) in both.
        if k % 2 == 1 {
            let answers = shipped_answers(&a, &train);
            memory.teach(&answers).unwrap();
            streamed.teach(&answers).unwrap();
        }
        assert_eq!(memory.state(), streamed.state(), "{}", kind.name());
        ran += 1;
    }
    assert_eq!(ran, StrategyKind::all().count() - 17);
    // The saved models are the same bytes.
    let (sa, sb) = (dir.join("a"), dir.join("b"));
    memory.save(&sa).unwrap();
    streamed.save(&sb).unwrap();
    for f in ["session.json", "model/model.safetensors"] {
        assert_eq!(
            std::fs::read(sa.join(f)).unwrap(),
            std::fs::read(sb.join(f)).unwrap(),
            "{f}"
        );
    }
    // A pool renamed under a running streamed session is refused at its next read, naming
    // the pool and the item, never scored as if it were the same.
    let pool = dir.join("pool");
    std::fs::rename(pool.join("00119.png"), pool.join("00119b.png")).unwrap();
    let request = QueryRequest {
        strategy: kind("entropy").strategy(&settings).unwrap(),
        n: 3,
        include_pending: false,
        subsample: None,
    };
    let e = streamed
        .query(&request, &Device::Cpu, &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("changed since the session read it") && e.contains("00119"),
        "{e}"
    );
}

#[test]
fn query_teach_and_label_studio_with_stream_write_what_they_write_in_memory() {
    // Two copies of one session on the shipped IDX data (a test split read alone when
    // streamed): every command run with --stream on one and without on the other leaves the
    // same files. A format 1 session is refused with --stream and upgraded without.
    let dir = tmp("session-stream-cli");
    let (train, _) = shipped();
    let run = |args: &[&str]| {
        let out = alkit_cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let data = data_dir();
    let (a, b) = (dir.join("a"), dir.join("b"));
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let init = ["init", "--pool", data.to_str().unwrap(), "--steps", "20"];
    // A streamed init reads no class list from IDX files: --classes is asked for.
    let out = alkit_cmd()
        .args(init)
        .args(["--state", b_s, "--stream"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--classes"), "{err}");
    assert!(!b.exists());
    let classes = ["--classes", "0,1,2,3,4,5,6,7,8,9"];
    run(&[&init[..], &["--state", a_s], &classes[..]].concat());
    run(&[&init[..], &["--state", b_s, "--stream"], &classes[..]].concat());
    let stream = |cmd: &[&str], on: &str| -> Vec<String> {
        let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        v.extend(["--state".into(), on.into()]);
        v
    };
    let both = |cmd: &[&str], out: Option<&str>| {
        for (s, streamed) in [(a_s, false), (b_s, true)] {
            let mut v = stream(cmd, s);
            if let Some(o) = out {
                v.extend(["--out".into(), format!("{s}-{o}")]);
            }
            if streamed {
                v.push("--stream".into());
            }
            let v: Vec<&str> = v.iter().map(String::as_str).collect();
            run(&v);
        }
    };
    let same = |f: &str| {
        assert_eq!(
            std::fs::read(format!("{a_s}{f}")).unwrap(),
            std::fs::read(format!("{b_s}{f}")).unwrap(),
            "{f}"
        );
    };
    let answer = |batch: &str| {
        let ids = read_batch(std::path::Path::new(&format!("{a_s}-{batch}")));
        let mut csv = String::from("id,label\n");
        for id in ids {
            let i: usize = id.parse().unwrap();
            csv.push_str(&format!("{id},{}\n", train.labels()[i]));
        }
        let p = dir.join(format!("{batch}.answers.csv"));
        std::fs::write(&p, csv).unwrap();
        p
    };
    same("/session.json");
    both(&["query", "--n", "8"], Some("q1.csv"));
    same("-q1.csv");
    let ans = answer("q1.csv");
    both(&["teach", "--labels", ans.to_str().unwrap()], None);
    both(&["query", "--n", "6", "--scorer", "bald"], Some("q2.csv"));
    same("-q2.csv");
    let ans = answer("q2.csv");
    both(&["teach", "--labels", ans.to_str().unwrap()], None);
    both(
        &["query", "--n", "4", "--format", "label-studio"],
        Some("q3.json"),
    );
    same("-q3.json");
    for f in ["/session.json", "/model/model.safetensors"] {
        same(f);
    }
    // A session of format 1 (ids, then every value, hashed as one stream).
    let mut st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("session.json")).unwrap()).unwrap();
    let mut h = alkit::data::Fnv1a::default();
    {
        use std::hash::Hasher;
        for i in 0..train.len() {
            h.write(i.to_string().as_bytes());
            h.write(&[0]);
        }
        for v in train.features() {
            h.write(&v.to_bits().to_le_bytes());
        }
        st["format"] = 1.into();
        st["pool_fingerprint"] = std::hash::Hasher::finish(&h).into();
    }
    std::fs::write(b.join("session.json"), serde_json::to_vec(&st).unwrap()).unwrap();
    let out = alkit_cmd()
        .args(["query", "--n", "2", "--stream", "--state", b_s, "--out"])
        .arg(dir.join("refused.csv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("format 1") && err.contains("`--stream` off"),
        "{err}"
    );
    assert!(!dir.join("refused.csv").exists());
    // Without --stream it is checked by the old hash and written back as format 2.
    let nothing = dir.join("nothing.csv");
    std::fs::write(&nothing, "id,label\n").unwrap();
    run(&[
        "teach",
        "--labels",
        nothing.to_str().unwrap(),
        "--state",
        b_s,
    ]);
    same("/session.json");
}

#[test]
fn every_export_format_label_studio_wrote_reads_as_the_same_answers() {
    // Files the real Label Studio 1.23.2 exported (see the fixture's README): the four
    // formats name the same answers, by alkit_id, never by Label Studio's task id.
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/label-studio/1.23.2");
    let want = vec![
        (Some(23), "1287", "3"),
        (Some(26), "1606", "7"),
        (Some(27), "968", "0"),
    ];
    for (file, format, unanswered) in [
        ("export.json", ExportFormat::Json, 2),
        ("export.min.json", ExportFormat::JsonMin, 1),
        ("export.csv", ExportFormat::Csv, 1),
        ("export.tsv", ExportFormat::Tsv, 1),
    ] {
        let e = alkit::label_studio::read_export(&dir.join(file)).unwrap();
        assert_eq!(e.format, format, "{file}");
        let got: Vec<(Option<u64>, &str, &str)> = e
            .rows
            .iter()
            .map(|r| (r.task, r.id.as_str(), r.label.as_str()))
            .collect();
        assert_eq!(got, want, "{file}");
        assert_eq!(e.unanswered, unanswered, "{file}");
    }
    // A Label Studio table of tasks alkit did not write is refused naming why; so is a
    // table that is neither an export nor alkit's answers.
    let scratch = tmp("label-studio-foreign");
    let refused = |name: &str, content: &str| {
        std::fs::write(scratch.join(name), content).unwrap();
        alkit::label_studio::read_export(&scratch.join(name))
            .unwrap_err()
            .to_string()
    };
    let csv = std::fs::read_to_string(dir.join("export.csv")).unwrap();
    let m = refused(
        "foreign.csv",
        &csv.replacen("\"alkit_id\"", "\"source_id\"", 1),
    );
    assert!(
        m.contains("foreign.csv:1") && m.contains("Label Studio export") && m.contains("alkit_id"),
        "{m}"
    );
    // A project whose Choices tag has another name: refused, not read as unanswered.
    let m = refused("renamed.csv", &csv.replacen("\"label\"", "\"digit\"", 1));
    assert!(
        m.contains("renamed.csv:1") && m.contains("no `label` column"),
        "{m}"
    );
    let min = std::fs::read_to_string(dir.join("export.min.json")).unwrap();
    let m = refused("renamed.json", &min.replace("\"label\":", "\"digit\":"));
    assert!(m.contains("no row has `label`"), "{m}");
    let m = refused("other.csv", "name,class\na,b\n");
    assert!(
        m.contains("neither a Label Studio CSV export") && m.contains("id,label"),
        "{m}"
    );
}

#[test]
fn a_session_measures_its_stop_set_each_round_and_passes_its_rule_on() {
    use alkit::metrics::stopping::{cohen_kappa, StopRule};
    let dir = tmp("session-stopping");
    let (train, _) = shipped();
    let rule = StopRule::ClassificationChange;
    let mut learner = session_with(&dir, None, Some(rule));
    let settings = ScorerSettings {
        class_balance: true,
        ..few_draws()
    };
    let request = QueryRequest {
        strategy: StrategyKind::named("entropy")
            .unwrap()
            .strategy(&settings)
            .unwrap(),
        n: 6,
        include_pending: false,
        subsample: None,
    };
    assert!(learner.state().stopping().is_none());
    let mut before: Vec<u32> = Vec::new();
    for round in 1..=4 {
        let batch = learner.query(&request, &Device::Cpu, &mut Silent).unwrap();
        let st = learner.state();
        let r = st.rounds.last().unwrap();
        assert_eq!(r.scorer, "balanced-entropy");
        let m = r.stopping.expect("a trained round measures its stop set");
        // The pool of 120 is its own stop set.
        assert_eq!(st.stop_predicted.len(), 120);
        assert!(st.stop_predicted.iter().all(|&c| c < 10));
        if before.is_empty() {
            assert_eq!((m.kappa, m.changed), (None, None));
        } else {
            let now = &st.stop_predicted;
            let changed = now.iter().zip(&before).filter(|(a, b)| a != b).count();
            assert_eq!(m.changed, Some(changed as f64 / 120.0), "round {round}");
            assert_eq!(
                m.kappa,
                Some(cohen_kappa(now, &before, 10)),
                "round {round}"
            );
        }
        let said = learner.state().stopping().unwrap();
        assert_eq!((said.round, said.rule), (round, Some(rule)));
        assert_eq!(said.stop, m.changed == Some(0.0));
        assert_eq!(said.since.len(), StopRule::ALL.len());
        before = st.stop_predicted.clone();
        let answers = shipped_answers(&batch, &train);
        learner.teach(&answers).unwrap();
    }
    // A ranking of the whole pool (Label Studio's order) has no batch to balance.
    let e = learner
        .rank(&request, &Device::Cpu, &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(e.contains("class_balance") && e.contains("ranking"), "{e}");
    // The summary `status --json` prints carries the rules' word.
    let summary = learner.state().summary();
    assert_eq!(summary["stopping"]["rule"], "classification-change");
    assert_eq!(summary["stopping"]["round"], 4);
    // A session file with stop-set predictions outside the classes is refused by name.
    learner.save(&dir).unwrap();
    let path = dir.join(alkit::session::STATE_FILE);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["stop_predicted"][0] = 10.into();
    std::fs::write(&path, json.to_string()).unwrap();
    let e = alkit::session::open(&dir, false, &Hub::new(dir.join("nohub"), true), &mut Silent)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("stop-set predictions"), "{e}");
}
