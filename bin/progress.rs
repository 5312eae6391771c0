//! Live progress for `sluice run` and `sluice demo`: one bar per running
//! operation when stdout is a terminal (rows done of the estimate, rate, ETA,
//! and a visible "throttled: …" / "stopped: …" state), plain periodic lines
//! otherwise (logs, CI, pipes).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sluice_runtime::Progress;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

/// A running progress display; [`ProgressDisplay::stop`] prints the last state.
pub struct ProgressDisplay {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// How often plain lines are printed.
const LINE_EVERY: Duration = Duration::from_secs(2);

impl ProgressDisplay {
    /// Starts displaying the reports of `progress`.
    pub fn start(progress: broadcast::Receiver<Progress>) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = if std::io::stdout().is_terminal() {
            tokio::spawn(bars(progress, stopped))
        } else {
            tokio::spawn(lines(progress, stopped))
        };
        ProgressDisplay { stop, task }
    }

    /// Stops the display after showing the final state.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn bars(mut progress: broadcast::Receiver<Progress>, mut stopped: oneshot::Receiver<()>) {
    let multi = MultiProgress::new();
    let style = ProgressStyle::with_template(
        "{prefix:.bold} [{bar:30.cyan/blue}] {human_pos}/{human_len} rows  {rate}  ETA {eta}  {msg}",
    )
    .expect("a valid template")
    // Whole rows per second (indicatif's own `{per_sec}` prints four decimals).
    .with_key("rate", |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = write!(w, "{:.0} rows/s", state.per_sec());
    })
    .progress_chars("=> ");
    let mut shown: BTreeMap<i64, ProgressBar> = BTreeMap::new();
    loop {
        let report = tokio::select! {
            _ = &mut stopped => break,
            report = progress.recv() => report,
        };
        let report = match report {
            Ok(report) => report,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        let bar = shown.entry(report.operation_id).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(0));
            bar.set_style(style.clone());
            bar.set_prefix(format!("#{} {}", report.operation_id, report.kind));
            bar
        });
        let total = report.estimated_rows.unwrap_or(0).max(report.rows_done);
        bar.set_length(u64::try_from(total).unwrap_or(0));
        bar.set_position(u64::try_from(report.rows_done).unwrap_or(0));
        bar.set_message(state_text(&report));
        if report.status.is_terminal() {
            bar.finish();
        }
    }
    for bar in shown.values() {
        if !bar.is_finished() {
            bar.abandon();
        }
    }
}

async fn lines(mut progress: broadcast::Receiver<Progress>, mut stopped: oneshot::Receiver<()>) {
    struct Seen {
        latest: Progress,
        first: (Instant, i64),
        printed: Option<(Instant, String, i64)>,
    }
    let mut seen: BTreeMap<i64, Seen> = BTreeMap::new();
    let mut ticker = tokio::time::interval(LINE_EVERY);
    loop {
        let mut flush_all = false;
        tokio::select! {
            _ = &mut stopped => flush_all = true,
            _ = ticker.tick() => {}
            report = progress.recv() => match report {
                Ok(report) => {
                    let entry = seen.entry(report.operation_id).or_insert_with(|| Seen {
                        first: (Instant::now(), report.rows_done),
                        latest: report.clone(),
                        printed: None,
                    });
                    entry.latest = report;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => flush_all = true,
            },
        }
        for entry in seen.values_mut() {
            let state = state_text(&entry.latest);
            let rows = entry.latest.rows_done;
            let due = match &entry.printed {
                None => true,
                // A changed state (throttled, stopped, finished) prints at once.
                Some((at, last_state, last_rows)) => {
                    *last_state != state
                        || (*last_rows != rows && (at.elapsed() >= LINE_EVERY || flush_all))
                }
            };
            if due {
                let p = &entry.latest;
                if p.rows_done < entry.first.1 {
                    // A report that counted less than an earlier one (a
                    // batch's uncommitted rows dropped): measure from here,
                    // never a negative rate.
                    entry.first = (Instant::now(), p.rows_done);
                }
                let elapsed = entry.first.0.elapsed().as_secs_f64().max(0.001);
                let rate = (p.rows_done - entry.first.1).max(0) as f64 / elapsed;
                println!("{}", line(p, rate, &state));
                entry.printed = Some((Instant::now(), state, rows));
            }
        }
        if flush_all {
            return;
        }
    }
}

fn line(p: &Progress, rate: f64, state: &str) -> String {
    let total = p
        .estimated_rows
        .map_or(String::new(), |t| format!(" / {t}"));
    let percent = p
        .estimated_rows
        .filter(|t| *t > 0)
        .map_or(String::new(), |t| {
            format!(
                " ({:.1}%)",
                (p.rows_done as f64 / t as f64 * 100.0).min(100.0)
            )
        });
    let eta = match p.estimated_rows {
        Some(t) if rate > 0.0 && t > p.rows_done && !p.status.is_terminal() => {
            format!(", ETA {}s", ((t - p.rows_done) as f64 / rate).ceil())
        }
        _ => String::new(),
    };
    format!(
        "operation {} {}: {}{total} rows{percent}, {rate:.0} rows/s{eta}, batch size {} — {state}",
        p.operation_id, p.kind, p.rows_done, p.batch_size
    )
}

fn state_text(p: &Progress) -> String {
    match &p.held_back {
        Some(reason) if !p.status.is_terminal() => reason.clone(),
        _ => p.status.as_str().to_owned(),
    }
}
