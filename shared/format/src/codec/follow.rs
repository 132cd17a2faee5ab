//! Reading a trace while it is being written: what a live view (`collector watch`, `collector
//! serve`) reads each refresh. The bytes appended since the last read are decoded onto what was
//! decoded before, so a refresh costs what was appended, not the whole file.
//!
//! The recorder writes whole chunks and flushes at least once a second, so a growing file ends
//! in a complete chunk or inside one still being written. That tail is kept and read again with
//! the next bytes: never a warning while the file may still grow. What [`Follower::finish`]
//! returns for the bytes pushed is what [`super::reader::decode_with`] returns for the same bytes
//! read at once, warnings included.

use super::reader::{DecodeOptions, Decoded, State, max_cells, read_chunks, read_header};
use super::{HEADER_LEN, MAGIC};
use crate::error::DecodeError;
use crate::model::Trace;

/// A trace decoded as its file grows.
pub struct Follower {
    options: DecodeOptions,
    /// The reader's state, once the header is read.
    state: Option<State>,
    /// The bytes after the last complete chunk (the header's, before it is whole).
    pending: Vec<u8>,
    /// The file offset of `pending[0]`.
    offset: usize,
    /// Complete chunks read.
    chunks: u64,
}

impl Follower {
    /// A follower of a file not read yet.
    pub fn new(options: DecodeOptions) -> Follower {
        Follower {
            options,
            state: None,
            pending: Vec::new(),
            offset: 0,
            chunks: 0,
        }
    }

    /// Adds `bytes`, the next ones of the file, and decodes every chunk they complete. Returns
    /// how many chunks that was; an error only when the file is not a trace (its first bytes
    /// say so) or comes from a newer major version, as [`super::reader::decode`] would.
    pub fn push(&mut self, bytes: &[u8]) -> Result<u64, DecodeError> {
        // Bytes that follow whole chunks are read where they are, and only the unfinished tail
        // is kept: a first read of a long trace is not copied (nor its copy's capacity kept).
        let bytes = if self.state.is_none() || !self.pending.is_empty() {
            self.pending.extend_from_slice(bytes);
            None
        } else {
            Some(bytes)
        };
        let state = match &mut self.state {
            Some(state) => state,
            None => {
                let version = match read_header(&self.pending) {
                    // Not a trace as soon as its first bytes differ from the magic's.
                    Err(DecodeError::TooShort { .. })
                        if !MAGIC
                            .starts_with(&self.pending[..self.pending.len().min(MAGIC.len())]) =>
                    {
                        return Err(DecodeError::BadMagic);
                    }
                    Err(DecodeError::TooShort { .. }) => return Ok(0),
                    other => other?,
                };
                self.pending.drain(..HEADER_LEN);
                self.offset = HEADER_LEN;
                self.state
                    .insert(State::new(version, &self.options, HEADER_LEN))
            }
        };
        let unread = bytes.unwrap_or(&self.pending);
        let len = self.offset + unread.len();
        state.max_cells = max_cells(&self.options, len);
        let walked = read_chunks(unread, 0, self.offset, state, true);
        match bytes {
            Some(bytes) => self.pending.extend_from_slice(&bytes[walked.at..]),
            None => {
                self.pending.drain(..walked.at);
                // A tail that was long once (a big first read) gives its room back.
                if self.pending.capacity() > 4 * self.pending.len().max(1 << 16) {
                    self.pending.shrink_to(self.pending.len().max(1 << 16));
                }
            }
        }
        self.offset += walked.at;
        self.chunks += walked.chunks;
        Ok(walked.chunks)
    }

    /// What was decoded so far (`None` before the header is whole). Marks are in the order the
    /// recorder wrote them (time order), and a file of an older format version is read as it
    /// is: [`Follower::finish`] does what a whole read does to both.
    pub fn trace(&self) -> Option<&Trace> {
        self.state.as_ref().map(|s| &s.trace)
    }

    /// The file's bytes decoded so far (up to the last complete chunk).
    pub fn bytes_decoded(&self) -> u64 {
        self.offset as u64
    }

    /// Complete chunks read so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Whether the recorder wrote its end: the file will not grow.
    pub fn ended(&self) -> bool {
        self.trace().is_some_and(|t| t.end_us.is_some())
    }

    /// Everything pushed, decoded as [`super::reader::decode_with`] decodes the same bytes: the
    /// tail that never completed is read as a whole read reads it (a truncated last chunk, or
    /// damage to resynchronise past).
    pub fn finish(self) -> Result<Decoded, DecodeError> {
        let Some(mut state) = self.state else {
            return Err(read_header(&self.pending)
                .err()
                .unwrap_or(DecodeError::TooShort {
                    len: self.pending.len(),
                }));
        };
        // The tail, read as a whole read reads a file's.
        state.max_cells = max_cells(&self.options, self.offset + self.pending.len());
        let walked = read_chunks(&self.pending, 0, self.offset, &mut state, false);
        Ok(state.finish(walked.truncated_at))
    }
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("bytes_decoded", &self.offset)
            .field("pending_bytes", &self.pending.len())
            .field("chunks", &self.chunks)
            .finish()
    }
}

impl Default for Follower {
    fn default() -> Follower {
        Follower::new(DecodeOptions::default())
    }
}
