//! What a person sees while the library works: indicatif progress bars fed by the library's
//! observer events on a terminal, and plain progress lines where stderr is not one (a log
//! file, `nohup`, Slurm, CI, a notebook's subprocess, `| tee`), at most every ten seconds and
//! at each cycle's end. The library itself never prints. Ctrl-C asks the job to stop at its
//! next event (every finished cycle of a run is saved by then) and says what was saved and
//! how to continue; a second Ctrl-C, or one while nothing polls (a server), ends the process.

use alkit::observe::{Control, Event, Observer};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Set by Ctrl-C: the next library event asks the job to stop.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// A job is feeding events (so it can stop at the next one).
static POLLING: AtomicBool = AtomicBool::new(false);
/// What the running job has saved and how to continue it, said when Ctrl-C stops it.
static ON_INTERRUPT: Mutex<Option<String>> = Mutex::new(None);

/// Installs the Ctrl-C handler (see the module docs).
pub(crate) fn catch_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        if POLLING.load(Ordering::SeqCst) && !INTERRUPTED.swap(true, Ordering::SeqCst) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "\nstopping at the next safe point (Ctrl-C again to stop at once)"
            );
        } else {
            std::process::exit(130);
        }
    });
}

/// Says, if Ctrl-C stops the job, what it has saved and the command that continues it.
pub(crate) fn on_interrupt(said: impl Into<String>) {
    *ON_INTERRUPT.lock().unwrap_or_else(|e| e.into_inner()) = Some(said.into());
}

/// `path` as one word a POSIX shell reads back, quoted only where it needs to be.
pub(crate) fn shell_word(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:@%,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// What to tell a person whose Ctrl-C stopped the job.
pub(crate) fn interrupted_note() -> String {
    ON_INTERRUPT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_else(|| "nothing was written".to_string())
}

/// Plain progress lines for a stderr that is not a terminal.
struct Plain {
    started: Instant,
    last: Option<Instant>,
    cycle: String,
    phase: String,
    /// Cycles done and in all, counted once a run of cycles starts (a curve's); a job of
    /// one step (a training, an embedding) leaves it at 0 in all.
    cycles: (u64, u64),
    /// The current phase's progress, for a job without cycles' estimate.
    step: (u64, u64),
}

/// `1h02m`, `3m05s`, `42s`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

impl Plain {
    fn new() -> Plain {
        Plain {
            started: Instant::now(),
            last: None,
            cycle: String::new(),
            phase: String::new(),
            cycles: (0, 0),
            step: (0, 0),
        }
    }

    /// Prints the line, led by the run's `label`, when `now` is due (ten seconds after the
    /// last) or `force`d.
    fn maybe_print(&mut self, label: &str, force: bool) {
        let now = Instant::now();
        if !force && self.last.is_some_and(|t| now - t < Duration::from_secs(10)) {
            return;
        }
        self.last = Some(now);
        let elapsed = now - self.started;
        let (done, total) = self.cycles;
        let (at, of) = self.step;
        let left = if total > 0 && done > 0 {
            let each = elapsed.as_secs_f64() / done as f64;
            format!(
                "  [{done}/{total} cycles, about {} left]",
                span(Duration::from_secs_f64(
                    each * (total - done.min(total)) as f64
                ))
            )
        } else if total == 0 && of > 0 && at > 0 {
            let each = elapsed.as_secs_f64() / at as f64;
            format!(
                "  [about {} left]",
                span(Duration::from_secs_f64(each * (of - at.min(of)) as f64))
            )
        } else if total > 0 {
            format!("  [{done}/{total} cycles]")
        } else {
            String::new()
        };
        let what: Vec<&str> = [label, &self.cycle, &self.phase]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        let _ = writeln!(
            std::io::stderr().lock(),
            "alkit: {:>7}  {}{left}",
            span(elapsed),
            what.join(", ")
        );
    }
}

/// indicatif progress bars fed by library events: each bar appears with the first event
/// that needs it (cycles of a run, the steps of a training or a scoring, a Hub download),
/// none with `quiet`.
pub(crate) struct Bars {
    multi: MultiProgress,
    plain: Option<Plain>,
    total_cycles: usize,
    overall: Option<ProgressBar>,
    step: Option<ProgressBar>,
    download: Option<ProgressBar>,
    label: String,
    /// Notes printed already (a source read twice is noted once).
    noted: std::collections::HashSet<String>,
}

fn bar(template: &str) -> ProgressBar {
    let b = ProgressBar::new(1);
    b.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    b
}

impl Bars {
    /// Bars for a job of `total_cycles` acquisition cycles (0 when it runs none): drawn on a
    /// terminal, plain lines elsewhere, nothing with `quiet`.
    pub(crate) fn new(quiet: bool, total_cycles: usize) -> Self {
        let multi = MultiProgress::new();
        let terminal = std::io::stderr().is_terminal();
        if quiet || !terminal {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        POLLING.store(true, Ordering::SeqCst);
        Self {
            multi,
            plain: (!quiet && !terminal).then(Plain::new),
            total_cycles,
            overall: None,
            step: None,
            download: None,
            label: String::new(),
            noted: std::collections::HashSet::new(),
        }
    }

    fn overall(&mut self) -> &ProgressBar {
        let (multi, total) = (&self.multi, self.total_cycles as u64);
        self.overall.get_or_insert_with(|| {
            let b = multi.insert(0, bar("{prefix:>24} [{bar:30.cyan/blue}] {pos}/{len} cycles  {elapsed_precise} (eta {eta})"));
            b.set_length(total);
            b.set_prefix("total");
            b
        })
    }

    fn step(&mut self) -> &ProgressBar {
        let multi = &self.multi;
        self.step.get_or_insert_with(|| {
            multi.add(bar("{prefix:>24} [{bar:30.green/white}] {pos}/{len} {msg}"))
        })
    }

    /// Clears every bar.
    pub(crate) fn finish(&self) {
        POLLING.store(false, Ordering::SeqCst);
        for b in [&self.download, &self.step, &self.overall]
            .into_iter()
            .flatten()
        {
            b.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

impl Bars {
    /// Follows `event` in the plain lines, printing one when it is due; the run's label is
    /// the bars' own, set before.
    fn plain(&mut self, event: &Event<'_>) {
        let Some(p) = self.plain.as_mut() else { return };
        let mut force = false;
        match event {
            Event::RunStarted { from_cycle, .. } => {
                p.cycles.1 = self.total_cycles as u64;
                p.cycles.0 += *from_cycle as u64;
            }
            Event::CycleStarted { cycle, labeled } => {
                p.cycle = format!("cycle {cycle} ({labeled} labeled)");
                p.phase = "training".into();
            }
            Event::TrainStep { step, steps, loss } => {
                p.step = (*step as u64, *steps as u64);
                p.phase = match loss {
                    Some(l) => format!("training step {step}/{steps}, loss {l:.3}"),
                    None => format!("training step {step}/{steps}"),
                };
            }
            Event::Scoring { done, total } => {
                p.step = (*done as u64, *total as u64);
                p.phase = format!("scoring {done}/{total}");
            }
            Event::CycleFinished { record } => {
                p.cycles.0 += 1;
                p.phase = format!("done: accuracy {:.2}%", 100.0 * record.acc);
                force = true;
            }
            Event::CycleMeasured { metric, value, .. } => {
                p.cycles.0 += 1;
                p.phase = format!("done: {metric} {value:.4}");
                force = true;
            }
            Event::Download { file, done, total } => {
                p.step = (*done, *total);
                p.phase = format!("downloading {file}: {done}/{total} bytes");
            }
            _ => return,
        }
        p.maybe_print(&self.label, force);
    }
}

impl Observer for Bars {
    fn on(&mut self, event: &Event<'_>) -> Control {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Control::Stop;
        }
        if let Event::RunStarted { strategy, seed, .. } = event {
            self.label = format!("{strategy} seed {seed}");
        }
        self.plain(event);
        match event {
            Event::RunStarted { from_cycle, .. } => {
                self.overall().inc(*from_cycle as u64);
            }
            Event::CycleStarted { cycle, labeled } => {
                let prefix = format!("{} c{cycle} ({labeled} lab.)", self.label);
                let step = self.step();
                step.set_prefix(prefix);
                step.set_position(0);
                step.set_message("training");
            }
            Event::TrainStep { step, steps, loss } => {
                let bar = self.step();
                bar.set_length(*steps as u64);
                bar.set_position(*step as u64);
                if let Some(l) = loss {
                    bar.set_message(format!("training, loss {l:.3}"));
                }
            }
            Event::Scoring { done, total } => {
                let bar = self.step();
                bar.set_length(*total as u64);
                bar.set_position(*done as u64);
                bar.set_message("scoring");
            }
            Event::CycleFinished { record } => {
                let overall = self.overall();
                overall.inc(1);
                overall.set_message(format!("acc {:.3}", record.acc));
            }
            Event::CycleMeasured { metric, value, .. } => {
                let overall = self.overall();
                overall.inc(1);
                overall.set_message(format!("{metric} {value:.4}"));
            }
            Event::Download { file, done, total } => {
                let multi = &self.multi;
                let bar = self.download.get_or_insert_with(|| {
                    multi.add(bar("{msg:>30} [{bar:30.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} (eta {eta})"))
                });
                bar.set_message(file.to_string());
                bar.set_length(*total);
                bar.set_position(*done);
                if *done >= *total && *total > 0 {
                    bar.finish_and_clear();
                    self.download = None;
                }
            }
            Event::LeftOut { source, files } => {
                const SHOWN: usize = 5;
                let mut names = files
                    .iter()
                    .take(SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if files.len() > SHOWN {
                    names.push_str(&format!(" and {} more", files.len() - SHOWN));
                }
                let line = format!(
                    "note: {source}: {} file(s) left out, not images: {names}",
                    files.len()
                );
                if self.noted.insert(line.clone()) {
                    // Printed even with --quiet: it says what the results leave out.
                    self.multi.suspend(|| {
                        use std::io::Write;
                        let _ = writeln!(std::io::stderr().lock(), "{line}");
                    });
                }
            }
            Event::Chose { source, what } => {
                let line = format!("note: {source}: {what}");
                if self.noted.insert(line.clone()) {
                    self.multi.suspend(|| {
                        use std::io::Write;
                        let _ = writeln!(std::io::stderr().lock(), "{line}");
                    });
                }
            }
            _ => {}
        }
        Control::Continue
    }
}
