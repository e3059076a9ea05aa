//! Bounds on sizes a caller sets with one number, checked before anything is allocated.
//!
//! Two kinds of bound, so that an out-of-memory abort is never how alkit says no:
//!
//! - **Fixed bounds** where a size only trades speed or evidence quality for work: an
//!   inference batch holds at most [`MAX_BATCH_VALUES`] input values (16x what
//!   [`crate::predict::default_batch`] picks), REGrad*'s perturbed copies, sample counts and
//!   timed repeats have caps of their own. They are the same on every machine, so the same
//!   command is accepted or refused everywhere. Batches are refused, never capped: a batch
//!   runs at exactly its size (a partial one padded), which is what makes streamed and
//!   sharded runs agree to the bit.
//! - **The machine's memory** for buffers that grow with the data (a round's or a score
//!   chunk's evidence through [`evidence`]: sample draws `samples x items x classes`, gradient
//!   norms `items x rows x layers`; a benchmark's items): the bytes are computed first and
//!   compared with [`memory`], the smaller of the physical memory (`MemTotal` of
//!   `/proc/meminfo`) and the process's address-space limit (`ulimit -v`, from
//!   `/proc/self/limits`). Where neither can be read (not Linux) that check is skipped.
//!
//! Every refusal is an [`Error::config`] naming the setting, the size asked for and the limit.

use crate::error::{Error, Result};

/// Input values of one inference batch at most (`batch x values per item`): 2^26, 16x the
/// 2^22 of [`crate::predict::default_batch`]. 256 MiB of `f32` input; a ResNet's activations
/// are several times that.
pub const MAX_BATCH_VALUES: usize = 1 << 26;

/// REGrad*'s perturbed copies per candidate at most (published settings use 8 to 32).
pub const MAX_PERTURBATIONS: usize = 1024;

/// Draws of a sample scorer at most (MC-dropout passes, Perturb-x and Perturb-theta draws;
/// published settings use 10 to 100).
pub const MAX_SAMPLES: usize = 10_000;

/// Most dimensions of the regression batch rules' feature sketch (the paper uses 512; the
/// pool's features take `n x sketch` values).
pub const MAX_SKETCH: usize = 16_384;

/// Training steps at most: 10^8 steps are days of training of the largest built-in model
/// (legitimate runs use thousands to hundreds of thousands); more is a typo, not a request.
pub const MAX_STEPS: usize = 100_000_000;

/// Timed passes of a benchmark at most (the median of more says nothing new).
pub const MAX_REPEATS: usize = 1_000;

/// Training steps of the brief training before a benchmark times scoring at most: the
/// benchmark times scoring, not training (`alkit train` trains for longer).
pub const MAX_BENCH_TRAIN_STEPS: usize = 100_000;

/// `value` of `field` is at least 1 and at most `max`; `why` says what the bound protects.
pub fn count(field: &'static str, value: usize, max: usize, why: &str) -> Result<()> {
    if value == 0 {
        return Err(Error::config(field, "must be at least 1"));
    }
    if value > max {
        return Err(Error::config(
            field,
            format!("{value} is more than the limit of {max} ({why})"),
        ));
    }
    Ok(())
}

/// An inference batch of `batch` items of `item_values` values each holds at most
/// [`MAX_BATCH_VALUES`] values (and at least one item).
pub fn batch(field: &'static str, batch: usize, item_values: usize) -> Result<()> {
    if batch == 0 {
        return Err(Error::config(field, "must be at least 1"));
    }
    let per = item_values.max(1);
    let max = (MAX_BATCH_VALUES / per).max(1);
    if batch > max {
        return Err(Error::config(
            field,
            format!(
                "a batch of {batch} items of {per} values is more than the limit of \
                 {MAX_BATCH_VALUES} input values per batch: at most {max} items of this size \
                 (a batch runs at exactly its size; larger batches only trade memory for speed)"
            ),
        ));
    }
    Ok(())
}

/// The bytes this process can hold at most: the smaller of the physical memory and the
/// address-space limit, or `None` where neither is known.
pub fn memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_meminfo(&t));
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| parse_address_limit(&t));
    match (total, limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The soft `Max address space` of `/proc/self/limits`, bytes (`None` when unlimited).
fn parse_address_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A buffer of `bytes` (`None`: past `u64`) for `what` (the size asked for, in words) fits
/// in [`memory`]; otherwise a settings error naming `field`. Skipped where the memory is
/// unknown, but for a size past `u64`.
pub fn fits(field: &'static str, what: &str, bytes: Option<u64>) -> Result<()> {
    fits_in(field, what, bytes, memory())
}

fn fits_in(field: &'static str, what: &str, bytes: Option<u64>, memory: Option<u64>) -> Result<()> {
    let gb = |b: u64| b as f64 / 1e9;
    match (bytes, memory) {
        (None, _) => Err(Error::config(
            field,
            format!("{what} would need more than 2^64 bytes of memory"),
        )),
        (Some(b), Some(m)) if b > m => Err(Error::config(
            field,
            format!(
                "{what} would need {:.1} GB, more than this machine's memory ({:.1} GB)",
                gb(b),
                gb(m)
            ),
        )),
        _ => Ok(()),
    }
}

/// The evidence `needs` asks for about `items` candidates held at once, `classes` classes,
/// fits in [`memory`] (`who` names the scorer or strategy in words, `items_from` says in words what
/// set `items`, e.g. "setting `chunk`"). Every place that builds evidence checks through here
/// before the buffers grow, so the rule is one: sample draws hold `samples x items x classes`
/// `f32` (refused as setting `mc_samples`, `perturb_samples` or `mcaa_samples`); gradient norms hold
/// `items x rows x layers` `f32`, `rows` the classes (+1 for the expected gradient), checked
/// once `layers` is known, after a model's first batch (refused as setting `layers`: the last
/// layer alone is one). An ensemble's draws, one per member, count `members` (refused as
/// setting `ensemble`; unchecked where `None`). Probabilities, features and kernel values are
/// a few values per item, bounded by the items already held.
pub fn evidence(
    who: &str,
    needs: &alkit_acquisition::Needs,
    items: usize,
    classes: usize,
    members: Option<usize>,
    layers: Option<usize>,
    items_from: &str,
) -> Result<()> {
    use alkit_acquisition::SampleRequest as S;
    let draws = match needs.samples {
        Some(
            S::McDropout { samples }
            | S::Laplace { samples, .. }
            | S::InsertedDropout { samples, .. },
        ) => Some(("mc_samples", samples)),
        Some(S::Adversarial { samples, .. }) => Some(("mcaa_samples", samples)),
        Some(S::InputNoise { samples, .. } | S::WeightNoise { samples, .. }) => {
            Some(("perturb_samples", samples))
        }
        Some(S::Members) => members.map(|m| ("ensemble", m)),
        _ => None,
    };
    if let Some((setting, samples)) = draws {
        let what =
            format!("{samples} draws of {items} items x {classes} classes ({who}; {items_from})");
        fits(setting, &what, product(&[samples, items, classes, 4]))?;
    }
    if let (Some(g), Some(layers)) = (needs.grads, layers) {
        let rows = classes + usize::from(g.expected);
        let what = format!(
            "gradient norms of {items} items x {rows} rows x {layers} layers ({who}; \
             {items_from})"
        );
        fits("layers", &what, product(&[items, rows, layers, 4]))?;
    }
    Ok(())
}

/// The most worker threads `RAYON_NUM_THREADS` may ask for: four per core, and at least
/// 1,024. Past it, starting the pool alone takes minutes and then fails.
pub fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.saturating_mul(4).max(1024)
}

/// Checks `RAYON_NUM_THREADS` (and `RAYON_RS_NUM_CPUS`, which rayon reads when the first is
/// unset or not a number), which size the thread pool that alkit's and candle's parallel loops
/// run on, before anything starts that pool: each unset or empty, or a whole number, digits
/// only, from 0 (one thread per core) to [`max_threads`]. A value outside that is an
/// [`Error::Env`] saying what to set, never a pool started with it (rayon would spawn 100,000
/// threads for minutes and then panic) or a value ignored in silence (rayon ignores one that
/// is not a number, `" 8"` included).
pub fn check_thread_env() -> Result<()> {
    for name in ["RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS"] {
        thread_env(name, std::env::var_os(name).as_deref(), max_threads())?;
    }
    Ok(())
}

fn thread_env(name: &'static str, value: Option<&std::ffi::OsStr>, max: usize) -> Result<()> {
    let Some(value) = value else { return Ok(()) };
    let text = value.to_string_lossy();
    if text.is_empty() {
        return Ok(());
    }
    let fix =
        format!("set it to a number of threads from 1 to {max}, or unset it for one per core");
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u64>() {
        Ok(n) if digits && n <= max as u64 => Ok(()),
        _ if digits => Err(Error::env(
            name,
            text.as_ref(),
            format!("more threads than this machine can use; {fix}"),
        )),
        _ => Err(Error::env(
            name,
            text.as_ref(),
            format!("not a whole number (digits only); {fix}"),
        )),
    }
}

/// `a x b x ...` bytes, `None` on overflow.
pub fn product(factors: &[usize]) -> Option<u64> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(u64::try_from(f).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_bounded_by_their_values() {
        assert!(batch("batch", 512, 784).is_ok());
        assert!(batch("batch", MAX_BATCH_VALUES / 784, 784).is_ok());
        assert!(batch("batch", MAX_BATCH_VALUES / 784 + 1, 784).is_err());
        let e = batch("batch", 100_000_000, 784).unwrap_err().to_string();
        assert!(
            e.contains("setting `batch`") && e.contains("100000000"),
            "{e}"
        );
        assert!(batch("batch", 0, 784).is_err());
        // One item always fits, however large.
        assert!(batch("batch", 1, usize::MAX).is_ok());
    }

    #[test]
    fn the_thread_count_is_a_number_within_the_machine() {
        use std::ffi::OsStr;
        let name = "RAYON_NUM_THREADS";
        for ok in [
            None,
            Some(""),
            Some("0"),
            Some("1"),
            Some("64"),
            Some("1024"),
        ] {
            assert!(thread_env(name, ok.map(OsStr::new), 1024).is_ok(), "{ok:?}");
        }
        for (bad, says) in [
            ("100000", "more threads"),
            ("1025", "more threads"),
            ("99999999999999999999999", "more threads"),
            ("-1", "not a whole number"),
            ("four", "not a whole number"),
            (" 8", "not a whole number"),
        ] {
            let e = thread_env(name, Some(OsStr::new(bad)), 1024)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("RAYON_NUM_THREADS={bad}")) && e.contains(says),
                "{e}"
            );
        }
        assert!(max_threads() >= 1024);
    }

    #[test]
    fn memory_is_checked_before_allocating() {
        let e = fits_in("mc_samples", "x", Some(10), Some(5))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("setting `mc_samples`") && e.contains("memory"),
            "{e}"
        );
        assert!(fits_in("mc_samples", "x", Some(5), Some(5)).is_ok());
        assert!(fits_in("mc_samples", "x", Some(5), None).is_ok());
        assert!(fits_in("mc_samples", "x", None, None).is_err());
        assert_eq!(product(&[usize::MAX, 2]), None);
        assert_eq!(product(&[3, 4]), Some(12));
    }

    #[test]
    fn evidence_names_the_setting_that_sizes_it() {
        use alkit_acquisition::{GradLayers, GradRequest, Needs, SampleRequest as S};
        // Sizes past 2^64 bytes are refused on any machine, so each setting's name shows.
        let huge = usize::MAX / 2;
        let cases = [
            (Needs::samples(S::McDropout { samples: 10 }), "mc_samples"),
            (
                Needs::samples(S::InputNoise {
                    sigma: 0.1,
                    samples: 10,
                }),
                "perturb_samples",
            ),
            (
                Needs::samples(S::WeightNoise {
                    sigma: 0.1,
                    samples: 10,
                }),
                "perturb_samples",
            ),
            (Needs::samples(S::Members), "ensemble"),
            (
                Needs::grads(GradRequest {
                    perturbations: 0,
                    sigma: 0.0,
                    expected: true,
                    layers: GradLayers::All,
                }),
                "layers",
            ),
        ];
        for (needs, setting) in cases {
            let e = evidence("`x`", &needs, huge, 10, Some(5), Some(4), "setting `chunk`")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("setting `{setting}`")) && e.contains("setting `chunk`"),
                "{e}"
            );
            // One item's evidence fits anywhere.
            assert!(evidence("`x`", &needs, 1, 10, Some(5), Some(4), "").is_ok());
        }
        // Unknown members or layers: nothing to check yet; probabilities never are.
        let members = Needs::samples(S::Members);
        assert!(evidence("`x`", &members, huge, 10, None, None, "").is_ok());
        assert!(evidence("`x`", &Needs::PROBS, huge, 10, None, Some(4), "").is_ok());
    }

    #[test]
    fn proc_files_parse() {
        assert_eq!(
            parse_meminfo("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
            Some(16384 * 1024)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         6000000000           unlimited            bytes\n";
        assert_eq!(parse_address_limit(limits), Some(6_000_000_000));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_address_limit(unlimited), None);
    }
}
