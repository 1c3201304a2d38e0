//! What plugins print on their own: libtpu writes log lines straight to file descriptor 2 while
//! it is opened and initialized (`Failed to find host bounds for accelerator type …`,
//! `E… hugepage_text.cc … File offset incorrectly aligned …`), which are harmless when
//! compiling without a TPU but read as failures. [`captured`] runs such a step with the
//! descriptor pointed at an anonymous file and hands back what was written, which the caller
//! keeps for an error message; [`set_shown`] (the command line's `-v`) lets it through instead.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Whether plugin output goes to the terminal as it is written.
static SHOWN: AtomicBool = AtomicBool::new(false);

/// One capture at a time: descriptor 2 is the process's.
static CAPTURING: Mutex<()> = Mutex::new(());

/// Lets plugin output through (`true`) or captures it (`false`, the default).
pub(crate) fn set_shown(shown: bool) {
    SHOWN.store(shown, Ordering::Relaxed);
}

/// Runs `f` with descriptor 2 captured; returns its result and what was written (empty when
/// output is shown, or when the descriptor could not be redirected, in which case it is shown).
pub(super) fn captured<T>(f: impl FnOnce() -> T) -> (T, String) {
    if SHOWN.load(Ordering::Relaxed) {
        return (f(), String::new());
    }
    let _one = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    let Some(redirect) = Redirect::start() else { return (f(), String::new()) };
    let out = f();
    (out, redirect.finish())
}

/// Descriptor 2 pointed at an anonymous file, and the descriptor it replaced.
struct Redirect {
    file: File,
    saved: i32,
}

impl Redirect {
    fn start() -> Option<Redirect> {
        let _ = std::io::stderr().flush();
        // SAFETY: plain system calls on descriptors this function owns; each result is checked.
        unsafe {
            let fd = libc::memfd_create(c"torchtpu-plugin-stderr".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let file = File::from_raw_fd(fd);
            let saved = libc::dup(2);
            if saved < 0 {
                return None;
            }
            if libc::dup2(file.as_raw_fd(), 2) < 0 {
                libc::close(saved);
                return None;
            }
            Some(Redirect { file, saved })
        }
    }

    /// Puts descriptor 2 back and reads what was written.
    fn finish(mut self) -> String {
        let _ = std::io::stderr().flush();
        // SAFETY: `saved` is the descriptor `start` duplicated; it is restored, then closed once.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
        let mut text = String::new();
        let mut bytes = Vec::new();
        if self.file.seek(SeekFrom::Start(0)).is_ok() && self.file.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inode behind descriptor 2.
    fn stderr_identity() -> (u64, u64) {
        // SAFETY: `fstat` fills the zeroed struct for a descriptor that is open in every process.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(2, &mut st), 0);
            (st.st_dev, st.st_ino)
        }
    }

    #[test]
    fn writes_to_descriptor_2_are_captured_and_it_is_put_back() {
        let before = stderr_identity();
        let (value, text) = captured(|| {
            let line = b"from a plugin\n";
            // SAFETY: writes a buffer of its own length to descriptor 2.
            unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
            assert_ne!(stderr_identity(), before, "redirected");
            7
        });
        // Other tests' plugins may write meanwhile: the line is there, among whatever else.
        assert!(value == 7 && text.contains("from a plugin\n"), "{text:?}");
        assert_eq!(stderr_identity(), before, "descriptor 2 is the process's again");
    }
}
