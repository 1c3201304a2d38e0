//! What a long compile shows while it works, and what it took: progress bars on a terminal
//! (XLA compiles counted, weights written in bytes with their throughput; hidden with `-q` or
//! when stderr is not a terminal) and the time of each phase, for `-v` and `--format json`.
//! With `TORCHTPU_COMPILE_JOURNAL` set to a file, each plugin load and XLA compile is noted
//! there as it starts and ends ([`journal`]), so that whoever ran a compile that crashed inside
//! a plugin can say which target and bucket it was on (the Python package does); the binary
//! says it itself when such a crash kills it.

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::container::write::Sink;
use crate::container::MappedFile;

/// One phase of a compile and how long it took.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// `read`, `lower`, `compile`, `write`.
    pub phase: &'static str,
    pub ms: u64,
    /// Bytes it moved, for phases proportional to the weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Most of it ran alongside the phase before (the weights written while XLA compiled):
    /// `ms` is only what it added after that phase, so `bytes / ms` is no throughput.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub alongside: bool,
}

impl Phase {
    /// The phase that started at `since`.
    pub fn since(phase: &'static str, since: Instant, bytes: Option<u64>) -> Phase {
        Phase { phase, ms: since.elapsed().as_millis() as u64, bytes, alongside: false }
    }
}

/// The `-v` table: one line a phase, with throughput where bytes moved, then the total.
pub(crate) fn table(phases: &[Phase]) -> String {
    let mut out = String::from("phase        time   data\n");
    for p in phases {
        let data = p.bytes.map_or_else(String::new, |b| {
            if p.alongside {
                return format!("{} (written while XLA compiled)", size(b));
            }
            let per_second = b.saturating_mul(1000).checked_div(p.ms);
            let per_second = per_second.map_or_else(String::new, |r| format!(" ({}/s)", size(r)));
            format!("{}{per_second}", size(b))
        });
        let line = format!("{:<8} {:>8}   {data}", p.phase, seconds(p.ms));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let total: u64 = phases.iter().map(|p| p.ms).sum();
    out.push_str(&format!("{:<8} {:>8}\n", "total", seconds(total)));
    out
}

fn seconds(ms: u64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

fn size(bytes: u64) -> String {
    indicatif::BinaryBytes(bytes).to_string()
}

/// Notes in the file `TORCHTPU_COMPILE_JOURNAL` names, when set, that `what` (`compile cpu
/// [s53-2]`) starts, runs `work`, and notes that it ended; the notes are written at once, so a
/// crash inside `work` leaves its start without an end. The binary's crash handler prints
/// `what` too ([`crate::crash`]).
pub(crate) fn journal<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let _doing = crate::crash::doing(what);
    let Some(path) = std::env::var_os("TORCHTPU_COMPILE_JOURNAL").filter(|p| !p.is_empty()) else {
        return work();
    };
    let note = |line: String| {
        use std::io::Write;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        // A journal that cannot be written loses its notes, never the compile.
        let _ = file.and_then(|mut f| f.write_all(line.as_bytes()));
    };
    note(format!("start {what}\n"));
    let done = work();
    note(format!("end {what}\n"));
    done
}

/// A bar counting `steps` XLA compiles; hidden unless `show`.
pub(crate) fn steps_bar(show: bool, steps: usize) -> ProgressBar {
    bar(show, steps as u64, "{spinner} compiling {msg} [{pos}/{len}] {elapsed}")
}

/// A bar counting `total` bytes, saying `what` is done with them; hidden unless `show`.
pub(crate) fn bytes_bar(show: bool, total: u64, what: String) -> ProgressBar {
    let bar = bar(show, total, "{spinner} {msg} {bytes}/{total_bytes} ({binary_bytes_per_sec}) {elapsed}");
    bar.set_message(what);
    bar
}

fn bar(show: bool, len: u64, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    // Bars of work that overlaps (weights written while XLA compiles) share the terminal.
    static BARS: std::sync::OnceLock<indicatif::MultiProgress> = std::sync::OnceLock::new();
    let bar = BARS.get_or_init(indicatif::MultiProgress::new).add(ProgressBar::new(len));
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A sink that moves a bar by the bytes that pass through it.
pub(crate) struct Counted<'a> {
    pub inner: &'a mut dyn Sink,
    pub bar: &'a ProgressBar,
}

impl io::Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Sink for Counted<'_> {
    fn copy_range(&mut self, src: &MappedFile, range: Range<usize>, crc: Option<u32>) -> io::Result<()> {
        let n = range.len() as u64;
        self.inner.copy_range(src, range, crc)?;
        self.bar.inc(n);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_times_throughput_and_the_total() {
        let read = Phase { phase: "read", ms: 410, bytes: None, alongside: false };
        let write = Phase { phase: "write", ms: 2000, bytes: Some(4 << 30), alongside: false };
        let text = table(&[read.clone(), write.clone()]);
        assert!(text.contains("read       0.41 s\n"), "{text}");
        assert!(text.contains("write      2.00 s   4.00 GiB (2.00 GiB/s)"), "{text}");
        assert!(text.ends_with("total      2.41 s\n"), "{text}");
        let text = table(&[read, Phase { alongside: true, ..write }]);
        assert!(text.contains("write      2.00 s   4.00 GiB (written while XLA compiled)\n"), "{text}");
    }
}
