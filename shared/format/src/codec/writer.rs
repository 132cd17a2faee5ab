//! The streaming trace writer.
//!
//! Memory is bounded: one chunk payload (flushed at [`WriterOptions::chunk_target_bytes`]), one
//! sample block of at most [`WriterOptions::block_rows`] rows, and the string-intern table (capped
//! at [`MAX_INTERNED`] entries; past it strings are still written, just not deduplicated). Time
//! bounds loss: a chunk is written out at least every [`WriterOptions::flush_interval_us`] of
//! trace time, so a killed recorder loses at most that much.

use std::collections::HashMap;
use std::io::Write;

use super::records::{RecordSink, put_opt_u32, put_str};
use super::samples::PendingBlock;
use super::{
    CHUNK_SYNC, CRC32C, FORMAT_MAJOR, FORMAT_MINOR, MAGIC, MAX_BLOCK_ROWS, MAX_COUNTERS, tag,
};
use crate::error::EncodeError;
use crate::model::{CounterId, CounterKind, Metadata, Record};
use crate::varint::put_u64;

/// Most distinct strings the writer remembers for deduplication.
pub const MAX_INTERNED: usize = 1 << 16;

/// Tuning of a [`TraceWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Write the current chunk out when a record is this much later than the last flush.
    pub flush_interval_us: u64,
    /// Write the current chunk out when its payload reaches this size.
    pub chunk_target_bytes: usize,
    /// Rows per sample block (at most [`MAX_BLOCK_ROWS`]). Larger blocks compress timestamps a
    /// little better; smaller ones lose less on a crash between flushes.
    pub block_rows: usize,
}

impl Default for WriterOptions {
    fn default() -> WriterOptions {
        WriterOptions {
            flush_interval_us: 500_000,
            chunk_target_bytes: 64 << 10,
            block_rows: 4096,
        }
    }
}

/// Writes a trace to any [`Write`], chunk by chunk.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    options: WriterOptions,
    chunk: Vec<u8>,
    body: Vec<u8>,
    block_body: Vec<u8>,
    strings: HashMap<String, u32>,
    next_string: u32,
    counters: u32,
    block: PendingBlock,
    last_t_us: u64,
    last_flush_us: u64,
    bytes_written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace: writes the header and the metadata record, and flushes them.
    pub fn new(out: W, metadata: &Metadata) -> Result<TraceWriter<W>, EncodeError> {
        TraceWriter::with_options(out, metadata, WriterOptions::default())
    }

    /// Like [`TraceWriter::new`] with explicit options.
    pub fn with_options(
        mut out: W,
        metadata: &Metadata,
        options: WriterOptions,
    ) -> Result<TraceWriter<W>, EncodeError> {
        let mut header = Vec::with_capacity(super::HEADER_LEN);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
        header.extend_from_slice(&FORMAT_MINOR.to_le_bytes());
        header.extend_from_slice(&[0; 4]);
        out.write_all(&header)?;
        let options = WriterOptions {
            block_rows: options.block_rows.clamp(1, MAX_BLOCK_ROWS),
            ..options
        };
        let mut writer = TraceWriter {
            out,
            options,
            chunk: Vec::with_capacity(options.chunk_target_bytes + 1024),
            body: Vec::with_capacity(256),
            block_body: Vec::new(),
            strings: HashMap::new(),
            next_string: 0,
            counters: 0,
            block: PendingBlock::default(),
            last_t_us: 0,
            last_flush_us: 0,
            bytes_written: header.len() as u64,
        };
        super::records::encode_metadata(&mut writer.body, metadata);
        writer.push_record(tag::METADATA);
        writer.flush()?;
        Ok(writer)
    }

    /// Bytes handed to the underlying writer so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The underlying writer (e.g. to inspect a `Vec<u8>` mid-stream).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The string-table id of a name, writing its definition the first time it is seen (past
    /// [`MAX_INTERNED`] distinct names every further one is defined at each use).
    pub(super) fn name(&mut self, text: &str) -> Result<u32, EncodeError> {
        if let Some(id) = self.strings.get(text) {
            return Ok(*id);
        }
        let id = self.next_string;
        self.next_string += 1;
        if self.strings.len() < MAX_INTERNED {
            self.strings.insert(text.to_owned(), id);
        }
        self.body.clear();
        put_u64(&mut self.body, u64::from(id));
        put_str(&mut self.body, text);
        self.push_record(tag::STRING);
        self.after_record()?;
        Ok(id)
    }

    /// Declares a counter under its standard name ([`CounterKind::counter_name`]); samples then
    /// refer to it by the returned id.
    pub fn declare_counter(
        &mut self,
        kind: CounterKind,
        device: Option<u32>,
    ) -> Result<CounterId, EncodeError> {
        self.declare_counter_named(kind, device, None, &kind.counter_name(device))
    }

    /// Declares a counter of one process (`pid_rss`, `pid_gpu`) under its standard name
    /// ([`CounterKind::process_counter_name`]). Counters may be declared at any time, before the
    /// first sample that uses them.
    pub fn declare_process_counter(
        &mut self,
        kind: CounterKind,
        device: Option<u32>,
        pid: u32,
    ) -> Result<CounterId, EncodeError> {
        let name = kind.process_counter_name(device, Some(pid));
        self.declare_counter_named(kind, device, Some(pid), &name)
    }

    /// Declares a counter under the name a decoded trace stored (re-encoding keeps it).
    pub fn declare_counter_named(
        &mut self,
        kind: CounterKind,
        device: Option<u32>,
        pid: Option<u32>,
        name: &str,
    ) -> Result<CounterId, EncodeError> {
        if self.counters as usize >= MAX_COUNTERS {
            return Err(EncodeError::TooManyCounters { max: MAX_COUNTERS });
        }
        let id = CounterId(self.counters);
        self.counters += 1;
        self.body.clear();
        put_u64(&mut self.body, u64::from(id.0));
        put_u64(&mut self.body, u64::from(kind.code()));
        put_opt_u32(&mut self.body, device);
        put_str(&mut self.body, name);
        self.body.push(0); // unit: bytes
        if pid.is_some() {
            put_opt_u32(&mut self.body, pid);
        }
        self.push_record(tag::COUNTER);
        self.after_record()?;
        Ok(id)
    }

    /// Records one sampling instant. Rows are batched into column-encoded blocks; a row whose
    /// counter set differs from the pending block's starts a new block. A value of `u64::MAX`
    /// (the in-memory "missing" marker) is stored as `u64::MAX - 1`.
    pub fn sample(&mut self, t_us: u64, values: &[(CounterId, u64)]) -> Result<(), EncodeError> {
        let t_us = t_us.max(self.last_t_us);
        if !self.block.takes(values) {
            self.encode_block();
            self.block.start(values);
        }
        self.block.push_row(t_us, values);
        self.last_t_us = t_us;
        if self.block.rows() >= self.options.block_rows {
            self.encode_block();
        }
        self.maybe_flush()
    }

    /// Writes one record (a mark, an OOM, …; see [`Record`]): its names go into the string
    /// table on first use, its body is laid out by [`super::records`].
    pub fn write(&mut self, record: &Record) -> Result<(), EncodeError> {
        super::records::encode(self, record)
    }

    /// Writes everything pending (the sample block and the chunk) to the underlying writer and
    /// flushes it.
    pub fn flush(&mut self) -> Result<(), EncodeError> {
        self.encode_block();
        if !self.chunk.is_empty() {
            let mut header = [0u8; super::CHUNK_HEADER_LEN];
            header[..4].copy_from_slice(&CHUNK_SYNC);
            header[4..8].copy_from_slice(&(self.chunk.len() as u32).to_le_bytes());
            header[8..].copy_from_slice(&CRC32C.checksum(&self.chunk).to_le_bytes());
            self.out.write_all(&header)?;
            self.out.write_all(&self.chunk)?;
            self.bytes_written += (header.len() + self.chunk.len()) as u64;
            self.chunk.clear();
        }
        self.out.flush()?;
        self.last_flush_us = self.last_t_us;
        Ok(())
    }

    /// Ends the trace: writes the end record, flushes, and returns the underlying writer.
    pub fn finish(mut self, t_us: u64) -> Result<W, EncodeError> {
        self.begin(t_us);
        self.push_record(tag::END);
        self.flush()?;
        Ok(self.out)
    }

    /// Starts a record body that begins with a timestamp; returns the body buffer.
    pub(super) fn begin(&mut self, t_us: u64) -> &mut Vec<u8> {
        self.last_t_us = self.last_t_us.max(t_us);
        self.body.clear();
        put_u64(&mut self.body, t_us);
        &mut self.body
    }

    /// Ends the record begun with [`TraceWriter::begin`].
    pub(super) fn end(&mut self, record_tag: u8) -> Result<(), EncodeError> {
        self.push_record(record_tag);
        self.after_record()
    }

    fn after_record(&mut self) -> Result<(), EncodeError> {
        self.maybe_flush()
    }

    fn maybe_flush(&mut self) -> Result<(), EncodeError> {
        let due =
            self.last_t_us.saturating_sub(self.last_flush_us) >= self.options.flush_interval_us;
        if due || self.chunk.len() >= self.options.chunk_target_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Moves the body buffer into the chunk as a tagged, length-prefixed record. Pending samples
    /// stay in their block: every record carries its own time, so the order between kinds in the
    /// file does not matter, and long blocks compress better.
    fn push_record(&mut self, record_tag: u8) {
        self.chunk.push(record_tag);
        put_u64(&mut self.chunk, self.body.len() as u64);
        self.chunk.extend_from_slice(&self.body);
    }

    /// Column-encodes the pending sample rows into a SAMPLES record.
    fn encode_block(&mut self) {
        if self.block.encode(&mut self.block_body) {
            self.chunk.push(tag::SAMPLES);
            put_u64(&mut self.chunk, self.block_body.len() as u64);
            self.chunk.extend_from_slice(&self.block_body);
        }
    }
}

impl<W: Write> RecordSink for TraceWriter<W> {
    fn name(&mut self, text: &str) -> Result<u32, EncodeError> {
        TraceWriter::name(self, text)
    }

    fn begin(&mut self, t_us: u64) -> &mut Vec<u8> {
        TraceWriter::begin(self, t_us)
    }

    fn end(&mut self, record_tag: u8) -> Result<(), EncodeError> {
        TraceWriter::end(self, record_tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_sixteen_bytes_with_version() {
        let w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
        let bytes = w.finish(0).unwrap();
        assert_eq!(&bytes[..8], &MAGIC);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), FORMAT_MAJOR);
        assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), FORMAT_MINOR);
        assert_eq!(&bytes[12..16], &[0; 4]);
        assert_eq!(&bytes[16..20], &CHUNK_SYNC);
    }

    #[test]
    fn constant_column_costs_no_bytes_per_row() {
        let mut w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
        let id = w.declare_counter(CounterKind::GpuTotal, Some(0)).unwrap();
        let before = w.bytes_written();
        for i in 0..1000u64 {
            w.sample(i * 1000, &[(id, 80 << 30)]).unwrap();
        }
        w.flush().unwrap();
        // ~1 byte per row for the timestamp residual, nothing for the value.
        let per_row = (w.bytes_written() - before) as f64 / 1000.0;
        assert!(per_row < 1.1, "{per_row}");
    }

    #[test]
    fn chunks_are_flushed_on_time() {
        let options = WriterOptions {
            flush_interval_us: 100_000,
            ..WriterOptions::default()
        };
        let mut w = TraceWriter::with_options(Vec::new(), &Metadata::default(), options).unwrap();
        let id = w.declare_counter(CounterKind::HostRss, None).unwrap();
        w.sample(0, &[(id, 1)]).unwrap();
        let after_first = w.get_ref().len();
        w.sample(150_000, &[(id, 2)]).unwrap();
        assert!(
            w.get_ref().len() > after_first,
            "a chunk should have been written"
        );
    }
}
