//! What a person sees while the library works: indicatif progress bars fed by the library's
//! observer events. The library itself never prints.

use alkit::observe::{Control, Event, Observer};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// indicatif progress bars fed by library events: each bar appears with the first event
/// that needs it (cycles of a run, the steps of a training or a scoring, a Hub download),
/// none with `quiet`.
pub(crate) struct Bars {
    multi: MultiProgress,
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
    /// Bars for a job of `total_cycles` acquisition cycles (0 when it runs none).
    pub(crate) fn new(quiet: bool, total_cycles: usize) -> Self {
        let multi = MultiProgress::new();
        if quiet {
            multi.set_draw_target(ProgressDrawTarget::hidden());
        }
        Self {
            multi,
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
        for b in [&self.download, &self.step, &self.overall]
            .into_iter()
            .flatten()
        {
            b.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

impl Observer for Bars {
    fn on(&mut self, event: &Event<'_>) -> Control {
        match event {
            Event::RunStarted {
                strategy,
                seed,
                from_cycle,
                ..
            } => {
                self.label = format!("{strategy} seed {seed}");
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
