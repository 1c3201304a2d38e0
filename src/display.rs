//! How values are shown to people: strings from untrusted input and byte sizes. A leaf: it
//! imports nothing of the crate.

/// A string from the archive as a message shows it: control characters escaped, and cut to
/// 80 characters with a count of the rest, so that no name can garble or flood a terminal.
pub(crate) fn shown(s: &str) -> String {
    const MAX: usize = 80;
    let mut out = String::new();
    for (i, (at, c)) in s.char_indices().enumerate() {
        if i == MAX {
            out.push_str(&format!("… (+{} more bytes)", s.len() - at));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `1.5 KiB`, `44.6 MiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
