//! The byte layout of a trace: a fixed header, then self-delimiting, checksummed chunks of
//! tagged, length-prefixed records. `FORMAT.md` beside this crate documents it byte by byte;
//! the constants here are the single source of truth for the numbers it quotes.
//!
//! Why chunks: the recorder flushes a chunk at least every [`writer::WriterOptions::flush_interval_us`],
//! so a process killed at any moment leaves a file readable up to its last flush, and a damaged
//! chunk costs only itself (the reader resynchronises on the next chunk's sync word).
//!
//! Why tags and lengths on every record: a reader skips kinds it does not know, so the format
//! grows by adding record kinds, never by editing old ones.

pub mod follow;
mod legacy;
pub mod reader;
pub mod records;
mod samples;
pub mod writer;

/// First 8 bytes of every trace. Like PNG's, it catches text-mode mangling (CR/LF, high bit).
pub const MAGIC: [u8; 8] = *b"\x89OOM\r\n\x1a\n";
/// Format major version written by this crate; readers refuse a larger major.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version written by this crate; a larger minor only adds record kinds, values of
/// existing enumerations (which older readers keep as "other") or fields at the end of a body.
/// `FORMAT.md` keeps the history (a test holds its title to this number).
pub const FORMAT_MINOR: u16 = 14;
/// Header: magic (8), major (u16 LE), minor (u16 LE), reserved zero bytes (4).
pub const HEADER_LEN: usize = 16;
/// Every chunk starts with this sync word (`CHNK` in ASCII), so a reader can find the next chunk
/// after a damaged one.
pub const CHUNK_SYNC: [u8; 4] = *b"CHNK";
/// Chunk header: sync (4), payload length (u32 LE), CRC-32C of the payload (u32 LE).
pub const CHUNK_HEADER_LEN: usize = 12;
/// Largest payload a reader accepts; a larger length field is treated as damage.
pub const MAX_CHUNK_PAYLOAD: usize = 4 << 20;
/// Most rows in one sample block.
pub const MAX_BLOCK_ROWS: usize = 8192;
/// Most counters one trace may declare.
pub const MAX_COUNTERS: usize = 4096;

/// CRC-32C (Castagnoli), table-driven with 16 tables: ~GB/s, so checksums cost little next to
/// varint decoding.
pub(crate) const CRC32C: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

/// Record tags. Append new kinds with new numbers; never reuse or renumber one.
pub mod tag {
    /// Run metadata; the first record of a trace.
    pub const METADATA: u8 = 0x01;
    /// An interned string definition.
    pub const STRING: u8 = 0x02;
    /// A counter declaration.
    pub const COUNTER: u8 = 0x03;
    /// A block of counter samples, column-encoded.
    pub const SAMPLES: u8 = 0x04;
    /// A stage mark, optionally with an allocator snapshot.
    pub const MARK: u8 = 0x05;
    /// A component breakdown.
    pub const COMPONENTS: u8 = 0x06;
    /// A gradient summary.
    pub const GRADIENTS: u8 = 0x07;
    /// Tensor statistics.
    pub const TENSOR: u8 = 0x08;
    /// An out-of-memory event.
    pub const OOM: u8 = 0x09;
    /// A batch-size trial.
    pub const BATCH_TRIAL: u8 = 0x0A;
    /// The watched process's exit.
    pub const EXIT: u8 = 0x0B;
    /// A free-text note.
    pub const NOTE: u8 = 0x0C;
    /// Count of records the recorder dropped.
    pub const DROPPED: u8 = 0x0D;
    /// The recorder finished cleanly.
    pub const END: u8 = 0x0E;
    /// What was alive at an OOM, one source line (format v1.3).
    pub const ALIVE: u8 = 0x0F;
    /// A process killed by the kernel's OOM killer (format v1.4).
    pub const OOM_KILL: u8 = 0x10;
    /// The memory of one process of the tree other than the program (format v1.4).
    pub const PROCESS_MEMORY: u8 = 0x11;
    /// Who one process of the tree is: role and rank (format v1.5).
    pub const PROCESS: u8 = 0x12;
    /// The end of one process of the tree other than the program (format v1.5).
    pub const PROCESS_END: u8 = 0x13;
    /// A group of live tensors that grew across steps (format v1.9).
    pub const HELD: u8 = 0x14;
    /// A garbage collection that freed memory (format v1.9).
    pub const GC: u8 = 0x15;
    /// The size of a training step's input (format v1.10).
    pub const INPUT: u8 = 0x16;
    /// Whether a process's eval forwards run with autograd on (format v1.11).
    pub const EVAL_AUTOGRAD: u8 = 0x17;
    /// A memory snapshot saved next to the trace at an OOM (format v1.11).
    pub const SAVED_SNAPSHOT: u8 = 0x18;
    /// The hooks mark one training iteration in several from a step on (format v1.11).
    pub const MARK_SAMPLING: u8 = 0x19;
    /// A process's own code ended; its interpreter's shutdown follows (format v1.12).
    pub const PROGRAM_END: u8 = 0x1A;
    /// A recorder attached to a running process, or its watch of one ended (format v1.14).
    pub const ATTACH: u8 = 0x1B;

    /// A human name for a tag (used in warnings and drop accounting).
    pub fn name(tag: u8) -> &'static str {
        match tag {
            METADATA => "metadata",
            STRING => "string",
            COUNTER => "counter",
            SAMPLES => "samples",
            MARK => "mark",
            COMPONENTS => "components",
            GRADIENTS => "gradients",
            TENSOR => "tensor",
            OOM => "oom",
            BATCH_TRIAL => "batch_trial",
            EXIT => "exit",
            NOTE => "note",
            DROPPED => "dropped",
            END => "end",
            ALIVE => "alive",
            OOM_KILL => "oom_kill",
            PROCESS_MEMORY => "process_memory",
            PROCESS => "process",
            PROCESS_END => "process_end",
            HELD => "held",
            GC => "gc",
            INPUT => "input",
            EVAL_AUTOGRAD => "eval_autograd",
            SAVED_SNAPSHOT => "saved_snapshot",
            MARK_SAMPLING => "mark_sampling",
            PROGRAM_END => "program_end",
            ATTACH => "attach",
            _ => "unknown",
        }
    }
}
