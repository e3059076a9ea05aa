//! The library's settings spoken as this command line's flags. The library names a setting in
//! its messages as ``setting `NAME` `` after the field of its options (a program using it
//! never had our flags); before printing an error, the binary replaces each mapped name with
//! the flag that sets it. The unit tests keep the table complete: every setting the library
//! names that has a flag of the same name is mapped, and every mapped flag exists.
/// The library's settings (named in its errors as ``setting `NAME` ``, after the fields of its
/// options) and the flag that gives each here. Settings with no flag of their own (DUQ's
/// internals, a checkpoint's normaliser) keep the library's words.
const SETTING_FLAGS: &[(&str, &str)] = &[
    ("anchor", "--anchor"),
    ("backbone", "--backbone"),
    ("batch", "--batch"),
    ("batch_size", "--batch-size"),
    ("beta", "--beta"),
    ("candidates", "--candidates"),
    ("checkpoint", "--checkpoint"),
    ("chunk", "--chunk"),
    ("classes", "--classes"),
    ("cold_start", "--cold-start"),
    ("conformal", "--conformal"),
    ("cycles", "--cycles"),
    ("data", "--data"),
    ("ensemble", "--ensemble"),
    ("force", "--force"),
    ("format", "--format"),
    ("indices", "--indices"),
    ("initial", "--initial"),
    ("input_mean", "--input-mean"),
    ("input_std", "--input-std"),
    ("knn_k", "--knn-k"),
    ("label_studio_url", "--label-studio-url"),
    ("labels", "--labels"),
    ("lambda", "--lambda"),
    ("layers", "--layers"),
    ("lr", "--lr"),
    ("mc_samples", "--mc-samples"),
    ("members", "--members"),
    ("model", "--model"),
    ("n", "--n"),
    ("noise", "--noise"),
    ("onnx_features", "--onnx-features"),
    ("onnx_config", "--onnx-config"),
    ("embed_cache", "--embed-cache"),
    ("ood_data", "--ood-data"),
    ("out", "--out"),
    ("perturb_samples", "--perturb-samples"),
    ("perturb_theta_sigma", "--perturb-theta-sigma"),
    ("perturb_x_sigma", "--perturb-x-sigma"),
    ("perturbations", "--perturbations"),
    ("points", "--points"),
    ("pool", "--pool"),
    ("port", "--port"),
    ("probcover_delta", "--probcover-delta"),
    ("query", "--query"),
    ("repeats", "--repeats"),
    ("resume", "--resume"),
    ("retrain_every", "--retrain-every"),
    ("save_scores", "--save-scores"),
    ("scorer", "--scorer"),
    ("scores", "--scores"),
    ("seed", "--seed"),
    ("seeds", "--seeds"),
    ("select", "--select"),
    ("shard", "--shard"),
    ("shards", "--shards"),
    ("sigma", "--sigma"),
    ("split", "--split"),
    ("steps", "--steps"),
    ("stream", "--stream"),
    ("subsample", "--subsample"),
    ("temperature", "--temperature"),
    ("top", "--top"),
    ("train_steps", "--train-steps"),
    ("vim_dim", "--vim-dim"),
];

/// `message` (a library error, printed whole) with every setting it names spoken as this
/// command line's flag: "invalid setting `top`: ..." reads "invalid `--top`: ...".
pub(crate) fn in_flags(message: &str) -> String {
    let mut out = message.to_owned();
    for (setting, flag) in SETTING_FLAGS {
        out = out.replace(&format!("setting `{setting}`"), &format!("`{flag}`"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::Cli;
    use clap::CommandFactory;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn long_flags(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for a in cmd.get_arguments() {
            if let Some(l) = a.get_long() {
                out.insert(format!("--{l}"));
            }
        }
        for s in cmd.get_subcommands() {
            long_flags(s, out);
        }
    }

    fn library_sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("bin") {
                    library_sources(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p.display().to_string(), text));
            }
        }
    }

    #[test]
    fn every_mapped_setting_is_a_flag_of_this_command_line() {
        let mut flags = BTreeSet::new();
        long_flags(&Cli::command(), &mut flags);
        for (setting, flag) in SETTING_FLAGS {
            assert!(
                flags.contains(*flag),
                "setting `{setting}` maps to {flag}, which no subcommand takes"
            );
        }
    }

    /// Every setting a library message names (``setting `x` `` in its text, or the field of an
    /// `Error::config`) is either mapped or has no flag of that name: a library setting that
    /// gains a flag is caught unmapped.
    #[test]
    fn every_setting_the_library_names_is_spoken_as_its_flag() {
        let mut flags = BTreeSet::new();
        long_flags(&Cli::command(), &mut flags);
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        library_sources(&root.join("src"), &mut files);
        library_sources(&root.join("acquisition/src"), &mut files);
        let mapped: BTreeSet<&str> = SETTING_FLAGS.iter().map(|(s, _)| *s).collect();
        let mut named = BTreeSet::new();
        for (_, text) in &files {
            let mut rest = text.as_str();
            while let Some(i) = rest.find("setting `") {
                rest = &rest[i + "setting `".len()..];
                if let Some(end) = rest.find('`') {
                    named.insert(rest[..end].to_owned());
                }
            }
            let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join("");
            // `alkit::limits`' checks take the setting's name as `Error::config` does.
            for call in [
                "Error::config(\"",
                "limits::count(\"",
                "limits::batch(\"",
                "limits::fits(\"",
            ] {
                let mut rest = squeezed.as_str();
                while let Some(i) = rest.find(call) {
                    rest = &rest[i + call.len()..];
                    if let Some(end) = rest.find('"') {
                        named.insert(rest[..end].to_owned());
                    }
                }
            }
        }
        assert!(
            named.contains("top") && named.contains("seeds"),
            "the scan found {named:?}"
        );
        let unmapped: Vec<_> = named
            .iter()
            .filter(|s| {
                !mapped.contains(s.as_str())
                    && flags.contains(&format!("--{}", s.replace('_', "-")))
            })
            .collect();
        assert!(
            unmapped.is_empty(),
            "library settings with a flag but no mapping: {unmapped:?}"
        );
        let unused: Vec<_> = mapped.iter().filter(|s| !named.contains(**s)).collect();
        assert!(
            unused.is_empty(),
            "mapped settings no library message names: {unused:?}"
        );
    }

    #[test]
    fn settings_read_as_flags() {
        assert_eq!(
            in_flags("invalid setting `select`: selection `batchbald` chooses a batch: give its size (setting `top`)"),
            "invalid `--select`: selection `batchbald` chooses a batch: give its size (`--top`)"
        );
        assert_eq!(
            in_flags("invalid setting `duq`: x"),
            "invalid setting `duq`: x"
        );
        assert_eq!(in_flags("setting `save_scores`"), "`--save-scores`");
    }
}
