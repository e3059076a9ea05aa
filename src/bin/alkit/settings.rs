//! The library's settings spoken as this command line's flags. The library names a setting in
//! its messages as ``setting `NAME` `` after the field of its options (a program using it
//! never had our flags); before printing an error, the binary replaces each such name with the
//! flag that sets it: the long flag `--NAME` (underscores as dashes) that some subcommand
//! takes, read from the flags' own declarations. Settings with no flag of their own (DUQ's
//! internals, a checkpoint's normaliser) keep the library's words.

use crate::flags::Cli;
use clap::CommandFactory;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Every long flag of every subcommand, without its dashes.
fn long_flags() -> &'static BTreeSet<String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        out.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_long())
                .map(String::from),
        );
        cmd.get_subcommands().for_each(|s| walk(s, out));
    }
    static FLAGS: OnceLock<BTreeSet<String>> = OnceLock::new();
    FLAGS.get_or_init(|| {
        let mut out = BTreeSet::new();
        walk(&Cli::command(), &mut out);
        out
    })
}

/// The flag that gives the library's setting `name` here, if one does.
fn flag_of(name: &str) -> Option<String> {
    let long = name.replace('_', "-");
    long_flags().contains(&long).then(|| format!("--{long}"))
}

/// `message` (a library error, printed whole) with every setting it names spoken as this
/// command line's flag: "invalid setting `top`: ..." reads "invalid `--top`: ...".
pub(crate) fn in_flags(message: &str) -> String {
    const OPEN: &str = "setting `";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len()..];
        match after
            .find('`')
            .and_then(|end| Some((end, flag_of(&after[..end])?)))
        {
            Some((end, flag)) => {
                out.push_str(&format!("`{flag}`"));
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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

    /// Every setting a library message names (``setting `x` `` in its text, or the field of an
    /// `Error::config`) that has a flag of its name reads as that flag, and the scan finds
    /// the settings it should (a library message that stops naming settings is caught).
    #[test]
    fn every_setting_the_library_names_is_spoken_as_its_flag() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        library_sources(&root.join("src"), &mut files);
        library_sources(&root.join("acquisition/src"), &mut files);
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
        let with_flags: Vec<_> = named.iter().filter(|s| flag_of(s).is_some()).collect();
        assert!(
            with_flags.len() > 50,
            "only {} named settings have flags: {with_flags:?}",
            with_flags.len()
        );
        for s in with_flags {
            let said = in_flags(&format!("invalid setting `{s}`: x (setting `{s}`)"));
            assert_eq!(
                said,
                format!("invalid `--{0}`: x (`--{0}`)", s.replace('_', "-"))
            );
        }
    }

    /// The scorers' settings are declared once, in the library: each is a flag, with the
    /// library's default, of every command that takes scorer settings.
    #[test]
    fn every_scorer_setting_is_a_flag_with_the_library_default() {
        use alkit::strategies::ScorerSettings;
        let cli = Cli::command();
        let defaults = ScorerSettings::defaults();
        for cmd in [
            "score",
            "ood",
            "calibrate",
            "curve",
            "bench",
            "query",
            "label",
        ] {
            let sub = cli.find_subcommand(cmd).unwrap();
            for name in ScorerSettings::names() {
                let long = name.replace('_', "-");
                let arg = sub
                    .get_arguments()
                    .find(|a| a.get_long() == Some(long.as_str()))
                    .unwrap_or_else(|| panic!("`alkit {cmd}` has no --{long}"));
                let shown: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                match &defaults[name] {
                    serde_json::Value::Null => assert!(shown.is_empty(), "{cmd} --{long}"),
                    serde_json::Value::String(v) => assert_eq!(shown, std::slice::from_ref(v)),
                    // A switch, off unless given.
                    serde_json::Value::Bool(false) => {
                        assert!(shown.is_empty() || shown == ["false"], "{cmd} --{long}")
                    }
                    v => assert_eq!(
                        shown[0].parse::<f32>().unwrap(),
                        v.as_f64().unwrap() as f32,
                        "{cmd} --{long}"
                    ),
                }
            }
        }
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
