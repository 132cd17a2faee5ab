//! Errors of the trace codec. Decoding problems inside the body are not errors but
//! [`crate::Warning`]s next to the prefix that did decode: a user's recording is never thrown away
//! because its tail is damaged. Only a file that is not a trace at all, or one from a newer major
//! version, is refused.

/// Why a byte slice could not be read as a trace at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the fixed header.
    #[error("not an oomscope trace: {len} bytes is shorter than the 16-byte header")]
    TooShort {
        /// Length of the input.
        len: usize,
    },
    /// The first bytes are not the trace magic.
    #[error("not an oomscope trace: the file does not start with the trace magic bytes")]
    BadMagic,
    /// Written by a newer major version of the format.
    #[error(
        "trace format v{found_major}.{found_minor} is newer than this reader, which reads v{supported_major}.x: upgrade oomscope"
    )]
    NewerVersion {
        /// Major version in the file.
        found_major: u16,
        /// Minor version in the file.
        found_minor: u16,
        /// Major version this reader supports.
        supported_major: u16,
    },
}

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The underlying writer failed.
    #[error("writing the trace failed: {0}")]
    Io(#[from] std::io::Error),
    /// More counters than the format allows.
    #[error("too many counters: the format allows {max}")]
    TooManyCounters {
        /// The limit.
        max: usize,
    },
}

const _: () = assert!(
    size_of::<DecodeError>() <= 16,
    "DecodeError should stay small: box large variants"
);
