//! A completion's text as its tokens come: each token's text (through the tokenizer, or the
//! id in decimal without one), cut at the first of the request's stop strings. Text that could
//! be the beginning of a stop string is held back until the next tokens decide, so a stream
//! never sends part of a stop string; the whole text and the stream's chunks agree.

use super::text::Stream;

/// One completion's text so far.
pub(super) struct Output {
    text: Option<Stream>,
    stops: Vec<String>,
    /// Text not sent yet: it may begin a stop string.
    held: String,
    tokens: usize,
    /// Characters of the text so far, held ones included: where the next token's text starts.
    chars: usize,
    /// A stop string was found: nothing more is sent.
    stopped: bool,
}

impl Output {
    /// An output through `text` (the tokenizer's stream after the prompt), cut at `stops`.
    pub(super) fn new(text: Option<Stream>, stops: Vec<String>) -> Output {
        Output { text, stops, held: String::new(), tokens: 0, chars: 0, stopped: false }
    }

    /// Where the next token's text starts in the completion's, in characters.
    pub(super) fn offset(&self) -> usize {
        self.chars
    }

    /// Whether a stop string ended the text.
    pub(super) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The text `token` lets go: possibly none (a character or a stop string not decided yet).
    pub(super) fn push(&mut self, token: i64) -> String {
        let piece = match &mut self.text {
            Some(text) => text.push(token),
            None if self.tokens == 0 => token.to_string(),
            None => format!(" {token}"),
        };
        self.tokens += 1;
        self.release(&piece)
    }

    /// The text left once the request is done.
    pub(super) fn finish(&mut self) -> String {
        let rest = self.text.as_mut().map(Stream::finish).unwrap_or_default();
        let mut out = self.release(&rest);
        if !self.stopped {
            out.push_str(&std::mem::take(&mut self.held));
        }
        out
    }

    /// `piece` added to the held text: what comes before a stop string (and ends the text), or
    /// all but the longest end that begins one.
    fn release(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.chars += piece.chars().count();
        self.held.push_str(piece);
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self.stops.iter().map(|s| begins(&self.held, s)).max().unwrap_or(0);
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        out
    }
}

/// The length of the longest end of `text` that is a beginning of `stop` (shorter than it).
fn begins(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&k| stop.is_char_boundary(k) && text.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::Output;

    /// Ids as text, cut at a stop string that spans tokens; text that might begin one is held
    /// until it does not.
    #[test]
    fn text_is_cut_at_the_first_stop_string_and_never_sends_part_of_one() {
        let mut out = Output::new(None, vec!["3 4".into(), "9 9".into()]);
        let sent: Vec<String> = [1, 2, 3, 5, 3, 4, 6].iter().map(|&t| out.push(t)).collect();
        // "1 2 3 5 3 4": "3" is held after 2 (it may begin "3 4"), let go at 5, held again, then cut.
        assert_eq!(sent, ["1", " 2", " ", "3 5", " ", "", ""]);
        assert!(out.stopped());
        assert_eq!(out.finish(), "");
        let mut out = Output::new(None, vec!["7 8".into()]);
        let sent: String = [1, 7].iter().map(|&t| out.push(t)).collect();
        assert_eq!((sent.as_str(), out.finish().as_str(), out.stopped()), ("1 ", "7", false));
    }
}
