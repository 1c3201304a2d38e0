//! Last words for a crash inside a plugin. XLA runs in this process, and a bug in it (a
//! segfault in libtpu's fusion, an abort on a failed check) kills the process with a bare
//! signal. The work that enters a plugin notes what it is doing ([`doing`]); the binary's
//! handler for fatal signals ([`install_handler`]) prints those notes, then lets the signal
//! take its course: the process still dies of it, and says which target and bucket it was on.
//!
//! The notes live in fixed slots that the handler reads without locking or allocating (all a
//! signal handler may do); a note longer than a slot is cut.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const SLOTS: usize = 16;
const SLOT_BYTES: usize = 200;
const FREE: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

struct Slot {
    state: AtomicU8,
    len: AtomicUsize,
    text: UnsafeCell<[u8; SLOT_BYTES]>,
}

// A slot's text is written only by the thread that moved it from FREE to WRITING, and read
// only in the READY state.
unsafe impl Sync for Slot {}

static NOTES: [Slot; SLOTS] =
    [const { Slot { state: AtomicU8::new(FREE), len: AtomicUsize::new(0), text: UnsafeCell::new([0; SLOT_BYTES]) } };
        SLOTS];

/// A note that work is under way; the note goes when this is dropped.
pub(crate) struct Doing(Option<&'static Slot>);

impl Drop for Doing {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            slot.state.store(FREE, Ordering::Release);
        }
    }
}

/// Notes that `what` (`compile tpu:v6e:1x1 [s27-32]`) is under way until the result is dropped.
/// With every slot taken (more than 16 compiles at once) the note is skipped.
pub(crate) fn doing(what: &str) -> Doing {
    for slot in &NOTES {
        if slot.state.compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            let bytes = cut(what, SLOT_BYTES).as_bytes();
            // SAFETY: this thread owns the slot (WRITING) until it publishes it as READY.
            unsafe { (&mut *slot.text.get())[..bytes.len()].copy_from_slice(bytes) };
            slot.len.store(bytes.len(), Ordering::Relaxed);
            slot.state.store(READY, Ordering::Release);
            return Doing(Some(slot));
        }
    }
    Doing(None)
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len())).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[..end]
}

const FATAL: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// The handlers that were there before ours, per entry of `FATAL`: written once by
/// [`install_handler`] before any signal can reach ours.
struct Previous(UnsafeCell<[libc::sigaction; FATAL.len()]>);
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// Installs the handler for fatal signals; for a binary's `main`, before any plugin is loaded
/// (a library must not take a process's signals). Each signal, after the notes are printed,
/// goes to the handler that was there before (Rust's own, which reports stack overflows) or
/// to the default action.
pub fn install_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (i, &sig) in FATAL.iter().enumerate() {
            // SAFETY: plain sigaction calls; PREVIOUS is written here, before the handler that
            // reads it is in place.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fatal_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, &mut (&mut *PREVIOUS.0.get())[i]);
            }
        }
    });
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let ready = || NOTES.iter().filter(|s| s.state.load(Ordering::Acquire) == READY);
    if ready().next().is_some() {
        write_err(b"\nerror: an XLA plugin crashed this process (");
        write_err(signal_name(sig));
        write_err(b"): a bug in XLA, not in the model; the artifact was not written. It was on:\n");
        for slot in ready() {
            let len = slot.len.load(Ordering::Relaxed).min(SLOT_BYTES);
            write_err(b"  ");
            // SAFETY: a READY slot's text is not written until its owner frees it; at worst a
            // note that ends this instant is printed as it was.
            write_err(unsafe { &(&*slot.text.get())[..len] });
            write_err(b"\n");
        }
        write_err(b"To report it: rerun with --dump-dir DIR and attach the bucket's main.mlir.\n");
    }
    // Hand the signal on: raised again, it waits until this handler returns, then goes to the
    // previous handler or the default action.
    if let Some(i) = FATAL.iter().position(|&s| s == sig) {
        // SAFETY: PREVIOUS was filled in before this handler was installed; raise is
        // async-signal-safe.
        unsafe {
            libc::sigaction(sig, &(&*PREVIOUS.0.get())[i], std::ptr::null_mut());
            libc::raise(sig);
        }
    }
}

fn write_err(bytes: &[u8]) {
    // SAFETY: write(2) is async-signal-safe; a short or failed write only loses words.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
}

fn signal_name(sig: libc::c_int) -> &'static [u8] {
    match sig {
        libc::SIGSEGV => b"SIGSEGV",
        libc::SIGBUS => b"SIGBUS",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        libc::SIGABRT => b"SIGABRT",
        _ => b"a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary_and_skipped_when_slots_run_out() {
        assert_eq!(cut("compile tpu", 7), "compile");
        assert_eq!(cut("ééé", 3), "é");
        let long = "x".repeat(500);
        let first = doing(&long);
        let slot = first.0.expect("a free slot");
        assert_eq!(slot.len.load(Ordering::Relaxed), SLOT_BYTES);
        let taken: Vec<Doing> = (0..SLOTS).map(|_| doing("more")).collect();
        assert!(taken.iter().any(|d| d.0.is_none()), "the slots run out and the note is skipped");
    }
}
