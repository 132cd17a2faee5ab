//! The hardened trace reader.
//!
//! Traces arrive attached to bug tickets, cut off by crashes, or damaged on disk, so the reader
//! treats every byte as untrusted:
//! - it works on a byte slice (so it runs in WASM) and never reads past a bound it checked;
//! - every length or count is checked against the bytes that remain before anything is allocated
//!   for it, and the total of decoded sample cells is capped ([`DecodeOptions::max_cells`]), so
//!   memory stays proportional to the input;
//! - every loop advances through the input, so it always terminates, and resynchronising after a
//!   damaged chunk has a budget of checksum work;
//! - damage inside the body never fails the decode: the reader keeps what it could read and says
//!   what it could not in [`Warning`]s. Only a file that is not a trace, or one from a newer major
//!   version, is an error.

use std::collections::BTreeMap;
use std::fmt;

use super::records::{self, Names, opt_u32};
use super::samples;
use super::{
    CHUNK_HEADER_LEN, CHUNK_SYNC, CRC32C, FORMAT_MAJOR, HEADER_LEN, MAGIC, MAX_CHUNK_PAYLOAD,
    MAX_COUNTERS, tag,
};
use crate::error::DecodeError;
use crate::model::{Counter, CounterKind, Trace};
use crate::varint::{Cursor, ReadError};

/// Most warnings kept; further ones are counted in a last summary warning.
const MAX_WARNINGS: usize = 64;
/// How far past the strings seen so far a string id may jump (ids lost with a damaged chunk).
const MAX_STRING_GAP: usize = 1 << 16;

/// Limits for decoding untrusted input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeOptions {
    /// Most sample cells (rows × counters) to materialise. `None` picks
    /// `max(4 Mi, 64 × input length)`: a genuine trace never needs more (a constant counter costs
    /// ~0 bytes per row, a timestamp at least 1), while a hostile one cannot make the reader
    /// allocate more than ~512 bytes per input byte.
    pub max_cells: Option<usize>,
}

/// Something the reader could not read, next to everything it could.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Where in the file the problem starts.
    pub byte_offset: u64,
    /// What happened and what it cost, in one sentence.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.byte_offset)
    }
}

/// A decoded trace and what could not be decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Everything that could be read.
    pub trace: Trace,
    /// Problems, in file order; empty for a complete, undamaged trace.
    pub warnings: Vec<Warning>,
}

/// Decodes a trace with default limits.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    decode_with(bytes, &DecodeOptions::default())
}

/// Decodes a trace.
///
/// Errors only when `bytes` is not a trace at all or comes from a newer major format version;
/// anything else yields the decodable prefix (and any later undamaged chunks) plus warnings.
pub fn decode_with(bytes: &[u8], options: &DecodeOptions) -> Result<Decoded, DecodeError> {
    let mut state = State::new(read_header(bytes)?, options, bytes.len());
    // Allocating every column once at its final size, instead of doubling, halves decode time on
    // long traces. The hint is bounded like everything else by the cell budget.
    state.rows_hint = count_sample_rows(bytes).min(state.max_cells);
    state.trace.samples.reserve_rows(state.rows_hint);
    let walked = read_chunks(bytes, HEADER_LEN, 0, &mut state, false);
    Ok(state.finish(walked.truncated_at))
}

/// The format version of a file that starts with `bytes` (at least [`HEADER_LEN`] of them), or
/// why it is not a trace this reader reads.
pub(super) fn read_header(bytes: &[u8]) -> Result<(u16, u16), DecodeError> {
    if bytes.len() < HEADER_LEN {
        if bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        return Err(DecodeError::TooShort { len: bytes.len() });
    }
    if bytes[..MAGIC.len()] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let major = u16::from_le_bytes([bytes[8], bytes[9]]);
    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
    if major > FORMAT_MAJOR {
        return Err(DecodeError::NewerVersion {
            found_major: major,
            found_minor: minor,
            supported_major: FORMAT_MAJOR,
        });
    }
    Ok((major, minor))
}

/// The cell budget for an input of `len` bytes (see [`DecodeOptions::max_cells`]).
pub(super) fn max_cells(options: &DecodeOptions, len: usize) -> usize {
    options
        .max_cells
        .unwrap_or_else(|| (len.saturating_mul(64)).max(4 << 20))
}

/// Where a chunk walk stopped, and why.
pub(super) struct Walked {
    /// The offset in `bytes` after the last chunk read (or skipped past).
    pub(super) at: usize,
    /// Complete chunks read.
    pub(super) chunks: u64,
    /// `Some((offset, have, need))` when a whole file ends inside a chunk.
    pub(super) truncated_at: Option<(usize, usize, usize)>,
}

/// Walks the chunks of `bytes` from `from`, `bytes[0]` being the file's byte `base`. A whole file
/// (`growing` false) is read to its end: a chunk it ends inside is a truncation (unless a valid
/// chunk follows: then its length field was damaged), and damage with no valid chunk after it
/// is skipped to the end. A file still being written (`growing`) stops before either: the
/// chunk may be one the writer has not finished, and what follows damage may not be written
/// yet; the next read starts there again.
// Never inlined: its two callers (a whole read, a follower) would each carry a copy of the
// record decoding in the viewer's WASM.
#[inline(never)]
pub(super) fn read_chunks(
    bytes: &[u8],
    from: usize,
    base: usize,
    state: &mut State,
    growing: bool,
) -> Walked {
    // Checksum work allowed while hunting for the next chunk after damage.
    let mut resync_budget = bytes.len().saturating_mul(4).max(1 << 20);
    let mut walked = Walked {
        at: from,
        chunks: 0,
        truncated_at: None,
    };
    while walked.at < bytes.len() {
        let pos = walked.at;
        match check_chunk(bytes, pos) {
            ChunkCheck::Ok(payload) => {
                state.read_payload(payload, base + pos + CHUNK_HEADER_LEN);
                walked.at += CHUNK_HEADER_LEN + payload.len();
                walked.chunks += 1;
            }
            ChunkCheck::Incomplete { .. } if growing => break,
            ChunkCheck::Incomplete { have, need } => {
                match find_next_chunk(bytes, pos + 1, &mut resync_budget) {
                    Some(next) => {
                        state.warn(
                            base + pos,
                            "damaged chunk header: skipped to the next chunk".into(),
                        );
                        walked.at = next;
                    }
                    None => {
                        walked.truncated_at = Some((base + pos, have, need));
                        break;
                    }
                }
            }
            ChunkCheck::Damaged(what) => {
                let next = find_next_chunk(bytes, pos + 1, &mut resync_budget);
                if growing && next.is_none() {
                    break;
                }
                let lost = next.unwrap_or(bytes.len()) - pos;
                state.warn(
                    base + pos,
                    format!("{what}: {lost} bytes skipped, reading resumed at the next chunk"),
                );
                walked.at = next.unwrap_or(bytes.len());
            }
        }
    }
    walked
}

/// Sum of the row counts of all sample blocks, found by walking chunk and record headers only (no
/// checksums, no decoding): a few microseconds per chunk. Stops at the first thing that does not
/// parse; the result is only a capacity hint.
fn count_sample_rows(bytes: &[u8]) -> usize {
    let mut rows = 0usize;
    let mut pos = HEADER_LEN;
    while let Some(header) = bytes.get(pos..pos + CHUNK_HEADER_LEN) {
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let Some(payload) = bytes.get(pos + CHUNK_HEADER_LEN..pos + CHUNK_HEADER_LEN + len) else {
            break;
        };
        let mut c = Cursor::new(payload);
        while let (Ok(record_tag), Ok(len)) = (c.u8(), c.u64()) {
            let Ok(body) = usize::try_from(len)
                .map_err(|_| ReadError::Short)
                .and_then(|l| c.bytes(l))
            else {
                break;
            };
            if record_tag == tag::SAMPLES {
                let block_rows = Cursor::new(body).u64().unwrap_or(0);
                rows =
                    rows.saturating_add(usize::try_from(block_rows).unwrap_or(0).min(body.len()));
            }
        }
        pos += CHUNK_HEADER_LEN + len;
    }
    rows
}

enum ChunkCheck<'a> {
    Ok(&'a [u8]),
    Incomplete { have: usize, need: usize },
    Damaged(&'static str),
}

fn check_chunk(bytes: &[u8], pos: usize) -> ChunkCheck<'_> {
    let rest = &bytes[pos..];
    if rest.len() < CHUNK_HEADER_LEN {
        if !CHUNK_SYNC.starts_with(&rest[..rest.len().min(CHUNK_SYNC.len())]) {
            return ChunkCheck::Damaged("damaged chunk header");
        }
        return ChunkCheck::Incomplete {
            have: rest.len(),
            need: CHUNK_HEADER_LEN,
        };
    }
    if rest[..4] != CHUNK_SYNC {
        return ChunkCheck::Damaged("damaged chunk header (no sync word)");
    }
    let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
    let crc = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
    if len > MAX_CHUNK_PAYLOAD {
        return ChunkCheck::Damaged("damaged chunk header (impossible length)");
    }
    let Some(payload) = rest.get(CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len) else {
        return ChunkCheck::Incomplete {
            have: rest.len(),
            need: CHUNK_HEADER_LEN + len,
        };
    };
    if CRC32C.checksum(payload) != crc {
        return ChunkCheck::Damaged("chunk failed its checksum");
    }
    ChunkCheck::Ok(payload)
}

/// The offset of the next complete, valid chunk at or after `from`, spending at most `budget`
/// bytes of checksum work in total.
fn find_next_chunk(bytes: &[u8], from: usize, budget: &mut usize) -> Option<usize> {
    let mut pos = from;
    while pos + CHUNK_HEADER_LEN <= bytes.len() {
        let offset = bytes[pos..]
            .windows(CHUNK_SYNC.len())
            .position(|w| w == CHUNK_SYNC)?;
        pos += offset;
        let len = bytes.get(pos + 4..pos + 8).map_or(usize::MAX, |b| {
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
        });
        if len <= MAX_CHUNK_PAYLOAD && pos + CHUNK_HEADER_LEN + len <= bytes.len() {
            if *budget < len {
                return None;
            }
            *budget -= len;
            if let ChunkCheck::Ok(_) = check_chunk(bytes, pos) {
                return Some(pos);
            }
        }
        pos += 1;
    }
    None
}

pub(super) struct State {
    pub(super) trace: Trace,
    names: Names,
    warnings: Vec<Warning>,
    extra_warnings: usize,
    unknown_tags: BTreeMap<u8, (usize, usize)>,
    pub(super) max_cells: usize,
    samples_capped: bool,
    saw_metadata: bool,
    block_times_us: Vec<u64>,
    /// Sample rows the whole file claims to hold (see [`count_sample_rows`]).
    rows_hint: usize,
}

impl State {
    /// A reader of a file of format `version`, `len` bytes long so far.
    pub(super) fn new(version: (u16, u16), options: &DecodeOptions, len: usize) -> State {
        State {
            names: Names::default(),
            trace: Trace {
                format_version: version,
                ..Trace::default()
            },
            warnings: Vec::new(),
            extra_warnings: 0,
            unknown_tags: BTreeMap::new(),
            max_cells: max_cells(options, len),
            samples_capped: false,
            saw_metadata: false,
            block_times_us: Vec::new(),
            rows_hint: 0,
        }
    }

    pub(super) fn warn(&mut self, byte_offset: usize, message: String) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(Warning {
                byte_offset: byte_offset as u64,
                message,
            });
        } else {
            self.extra_warnings += 1;
        }
    }

    pub(super) fn read_payload(&mut self, payload: &[u8], base: usize) {
        let mut cursor = Cursor::new(payload);
        while !cursor.is_empty() {
            let offset = base + payload.len() - cursor.remaining();
            let header = cursor.u8().and_then(|t| Ok((t, cursor.u64()?)));
            let Ok((record_tag, len)) = header else {
                self.warn(
                    offset,
                    "damaged record header: rest of the chunk skipped".into(),
                );
                return;
            };
            let body = usize::try_from(len)
                .map_err(|_| ReadError::Short)
                .and_then(|len| cursor.bytes(len));
            let Ok(body) = body else {
                self.warn(
                    offset,
                    format!(
                        "{} record overruns its chunk: rest of the chunk skipped",
                        tag::name(record_tag)
                    ),
                );
                return;
            };
            if let Err(e) = self.read_record(record_tag, body) {
                let why = match e {
                    ReadError::Short => "is cut short",
                    ReadError::Overlong => "holds an invalid number",
                };
                self.warn(
                    offset,
                    format!("{} record {why}: skipped", tag::name(record_tag)),
                );
            }
        }
    }

    fn read_record(&mut self, record_tag: u8, body: &[u8]) -> Result<(), ReadError> {
        let mut c = Cursor::new(body);
        match record_tag {
            tag::METADATA => {
                self.trace.metadata = records::decode_metadata(&mut c)?;
                self.saw_metadata = true;
            }
            tag::STRING => self.read_string(&mut c)?,
            tag::COUNTER => self.read_counter(&mut c)?,
            tag::SAMPLES => self.read_samples(&mut c, body.len())?,
            tag::END => self.trace.end_us = Some(c.u64()?),
            other => match records::decode(other, &mut c, &self.names)? {
                Some(record) => self.trace.push(record),
                None => {
                    let entry = self.unknown_tags.entry(other).or_default();
                    entry.0 += 1;
                    entry.1 += body.len();
                }
            },
        }
        Ok(())
    }

    fn read_string(&mut self, c: &mut Cursor<'_>) -> Result<(), ReadError> {
        let id = c.u32()? as usize;
        let text = c.string()?;
        if id > self.names.len() + MAX_STRING_GAP {
            return Err(ReadError::Overlong);
        }
        self.names.define(id, text);
        Ok(())
    }

    fn read_counter(&mut self, c: &mut Cursor<'_>) -> Result<(), ReadError> {
        let id = c.u32()? as usize;
        if id >= MAX_COUNTERS {
            return Err(ReadError::Overlong);
        }
        let kind =
            CounterKind::from_code(u16::try_from(c.u64()?).map_err(|_| ReadError::Overlong)?);
        let device = opt_u32(c)?;
        let name = c.string()?;
        let _unit = if c.is_empty() { 0 } else { c.u8()? };
        let pid = if c.is_empty() { None } else { opt_u32(c)? };
        let counters = &mut self.trace.counters;
        if id >= counters.len() {
            counters.resize(
                id + 1,
                Counter {
                    kind: CounterKind::Other(0),
                    device: None,
                    name: "?".to_owned(),
                    pid: None,
                },
            );
        }
        counters[id] = Counter {
            kind,
            device,
            name,
            pid,
        };
        Ok(())
    }

    /// Decodes one column-encoded sample block (layout in FORMAT.md) into the sample table.
    fn read_samples(&mut self, c: &mut Cursor<'_>, body_len: usize) -> Result<(), ReadError> {
        if self.samples_capped {
            return Ok(());
        }
        let (rows, ids) = samples::read_header(c)?;
        let cols = ids.len();
        let max_id = ids.iter().map(|id| id.0 as usize).max().unwrap_or(0);
        let samples = &self.trace.samples;
        let new_cols = samples.columns().max(if cols > 0 { max_id + 1 } else { 0 });
        let new_rows = samples.len() + rows;
        if new_cols.saturating_mul(new_rows) > self.max_cells {
            self.samples_capped = true;
            let at = self.trace.samples.times_us().last().unwrap_or(0);
            self.warn(
                0,
                format!(
                    "stopped reading samples at {:.1} s: more than {} sample values for a {body_len}-byte block is not a genuine trace",
                    at as f64 / 1e6,
                    self.max_cells
                ),
            );
            return Ok(());
        }

        // Timestamps go to a scratch buffer first (the row count must be known before columns
        // are filled); values are decoded straight into their columns. A block that fails
        // half-way is rolled back, so the table never holds a partial block.
        samples::read_times(c, rows, &mut self.block_times_us)?;
        let times = &self.block_times_us;
        let samples = &mut self.trace.samples;
        // A column seen for the first time gets the whole trace's rows at once, while the
        // columns reserved so far stay within the cell budget.
        for id in &ids {
            if samples.column(*id).is_none()
                && (samples.columns() + 1).saturating_mul(self.rows_hint) <= self.max_cells
            {
                samples.reserve_column(*id, self.rows_hint);
            }
        }
        let start = samples.begin_block(times);
        let filled = ids
            .iter()
            .try_for_each(|id| samples::read_column(c, samples.column_for_block(*id, start), rows));
        match filled {
            Ok(()) => samples.end_block(),
            Err(e) => {
                samples.truncate(start);
                return Err(e);
            }
        }
        Ok(())
    }

    pub(super) fn finish(mut self, truncated_at: Option<(usize, usize, usize)>) -> Decoded {
        super::legacy::upgrade(&mut self.trace);
        // The analysis relies on marks in time order. A recorder writes them so; a file that
        // does not (marks sent from several threads, or a hand-made file) is put in order here.
        self.trace.marks.sort_by_time();
        if !self.saw_metadata {
            self.warn(
                HEADER_LEN,
                "no metadata record: the run's command, host and GPUs are unknown".into(),
            );
        }
        let unknown = std::mem::take(&mut self.unknown_tags);
        for (record_tag, (count, bytes)) in unknown {
            self.warn(
                0,
                format!(
                    "skipped {count} record(s) of unknown kind 0x{record_tag:02x} ({bytes} bytes), written by a newer oomscope"
                ),
            );
        }
        let covered_secs = self.trace.duration_us() as f64 / 1e6;
        if let Some((offset, have, need)) = truncated_at {
            self.warn(
                offset,
                format!(
                    "truncated after {covered_secs:.1} s: last chunk incomplete ({have} of {need} bytes)"
                ),
            );
        } else if self.trace.end_us.is_none() {
            self.warn(
                0,
                format!(
                    "the recording did not finish cleanly (no end record): it covers 0–{covered_secs:.1} s"
                ),
            );
        }
        if self.extra_warnings > 0 {
            let extra = self.extra_warnings;
            self.warnings.push(Warning {
                byte_offset: 0,
                message: format!("… and {extra} more warnings"),
            });
        }
        Decoded {
            trace: self.trace,
            warnings: self.warnings,
        }
    }
}
