//! A subscription ring's batch record (`mcast_ipc::batch`), as the client
//! library reads it: the daemon writes it, but anyone sharing the ring's
//! memory can scribble on it.

use mcast_ipc::batch;

/// Reads every message of `data` as a batch record's payload. Never a
/// panic; each message read lies inside the payload right after its
/// length; and the record reads whole exactly when it is non-empty and its
/// messages, written out again, rebuild it byte for byte (anything else is
/// `Corrupt`).
pub fn batch_record(data: &[u8]) {
    let (mut at, mut got) = (0, Vec::new());
    let whole = loop {
        match batch::next(data, at) {
            Ok(Some((m, next))) => {
                assert!(next > at + 1 && next <= data.len(), "{at} -> {next}");
                assert_eq!(m.len(), next - at - 2);
                assert_eq!(m.as_ptr(), data[at + 2..].as_ptr(), "lent in place");
                got.push(m);
                at = next;
            }
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    let rebuilt = batch::encode(got.iter().copied());
    if whole {
        assert!(!data.is_empty(), "an empty record reads whole");
        assert_eq!(rebuilt, data, "read back and written again");
    } else {
        // What read before the error is a prefix of the record, and the
        // rest is not a message.
        assert_eq!(rebuilt, data[..rebuilt.len()]);
        assert!(data.is_empty() || rebuilt.len() < data.len());
    }
}
