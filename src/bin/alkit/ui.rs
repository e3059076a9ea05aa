//! What a person sees while the library works: indicatif progress bars fed by the library's
//! observer events. The library itself never prints.

use alkit::observe::{Control, Event, Observer};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

#[derive(Default)]
pub(crate) struct DownloadBar {
    pub(crate) bar: Option<ProgressBar>,
}

impl Observer for DownloadBar {
    fn on(&mut self, event: &Event<'_>) -> Control {
        if let Event::Download { file, done, total } = event {
            let bar = self.bar.get_or_insert_with(|| {
                let b = ProgressBar::new(*total);
                b.set_style(
                    ProgressStyle::with_template(
                        "{msg:>30} [{bar:30.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} (eta {eta})",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                b
            });
            bar.set_message(file.to_string());
            bar.set_length(*total);
            bar.set_position(*done);
            if *done >= *total && *total > 0 {
                bar.finish_and_clear();
                self.bar = None;
            }
        }
        Control::Continue
    }
}

/// indicatif progress bars fed by library events.
pub(crate) struct Bars {
    pub(crate) multi: MultiProgress,
    pub(crate) overall: ProgressBar,
    pub(crate) step: ProgressBar,
    pub(crate) label: String,
}

impl Bars {
    pub(crate) fn new(quiet: bool, total_cycles: usize) -> Self {
        let multi = MultiProgress::new();
        if quiet {
            multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let overall = multi.add(ProgressBar::new(total_cycles as u64));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>24} [{bar:30.cyan/blue}] {pos}/{len} cycles  {elapsed_precise} (eta {eta})")
                .expect("valid template")
                .progress_chars("=> "),
        );
        overall.set_prefix("total");
        let step = multi.add(ProgressBar::new(1));
        step.set_style(
            ProgressStyle::with_template("{prefix:>24} [{bar:30.green/white}] {pos}/{len} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Self {
            multi,
            overall,
            step,
            label: String::new(),
        }
    }

    pub(crate) fn finish(&self) {
        self.step.finish_and_clear();
        self.overall.finish_and_clear();
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
                self.overall.inc(*from_cycle as u64);
            }
            Event::CycleStarted { cycle, labeled } => {
                self.step
                    .set_prefix(format!("{} c{cycle} ({labeled} lab.)", self.label));
                self.step.set_position(0);
                self.step.set_message("training");
            }
            Event::TrainStep { step, steps, loss } => {
                self.step.set_length(*steps as u64);
                self.step.set_position(*step as u64);
                if let Some(l) = loss {
                    self.step.set_message(format!("training, loss {l:.3}"));
                }
            }
            Event::Scoring { done, total } => {
                self.step.set_length(*total as u64);
                self.step.set_position(*done as u64);
                self.step.set_message("scoring");
            }
            Event::CycleFinished { record } => {
                self.overall.inc(1);
                self.overall.set_message(format!("acc {:.3}", record.acc));
            }
            _ => {}
        }
        Control::Continue
    }
}
