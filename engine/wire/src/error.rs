use core::fmt;

/// Why a byte buffer is not a valid frame. Each variant says what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The buffer ended before a field: `needed` bytes were required, `got` were there.
    Truncated { needed: usize, got: usize },
    /// The EtherType is not the one this engine was configured with.
    WrongEtherType { expected: u16, got: u16 },
    /// The header's version is one this build does not speak.
    UnsupportedVersion { got: u8 },
    /// The kind octet names no known frame kind.
    UnknownKind { got: u8 },
    /// The header's payload length promises more bytes than the frame holds.
    PayloadLength { declared: usize, available: usize },
    /// The CRC32C over header and payload does not match: the frame counts as lost.
    BadChecksum { expected: u32, computed: u32 },
    /// A NAK payload is not a whole number of ranges, has too many, or has an empty one.
    BadNak { reason: &'static str },
    /// A batched payload (flag BATCH) is not a whole number of records, or
    /// the frame is not a whole message.
    BadBatch { reason: &'static str },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated { needed, got } => {
                write!(f, "truncated frame: needed {needed} bytes, got {got}")
            }
            WireError::WrongEtherType { expected, got } => {
                write!(
                    f,
                    "wrong EtherType: expected {expected:#06x}, got {got:#06x}"
                )
            }
            WireError::UnsupportedVersion { got } => {
                write!(f, "unsupported protocol version {got}")
            }
            WireError::UnknownKind { got } => write!(f, "unknown frame kind {got}"),
            WireError::PayloadLength {
                declared,
                available,
            } => {
                write!(
                    f,
                    "payload length {declared} exceeds the {available} bytes after the header"
                )
            }
            WireError::BadChecksum { expected, computed } => {
                write!(
                    f,
                    "bad checksum: header says {expected:#010x}, computed {computed:#010x}"
                )
            }
            WireError::BadNak { reason } => write!(f, "malformed NAK payload: {reason}"),
            WireError::BadBatch { reason } => write!(f, "malformed batched payload: {reason}"),
        }
    }
}

impl core::error::Error for WireError {}
