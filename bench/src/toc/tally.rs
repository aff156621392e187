//! What one node's subscriber delivered in a `toc` run, checked as it
//! comes: each origin's messages in order and none twice, and a running
//! digest of the whole sequence (equal at every node when they delivered
//! one order).
//!
//! Owns: the per-node check. May not touch: the model.

use std::collections::BTreeMap;

/// One node's deliveries.
#[derive(Debug, Default)]
pub struct Tally {
    /// Per origin, the index of its next message.
    next_from: BTreeMap<u32, u64>,
    pub delivered: u64,
    pub digest: u64,
}

impl Tally {
    /// Message `k` of `origin`, delivered next: Err when it is not that
    /// origin's next one.
    pub fn take(&mut self, origin: u32, k: u64) -> Result<(), String> {
        let next = self.next_from.entry(origin).or_default();
        if *next != k {
            return Err(format!(
                "message {k} of node {origin} delivered where {next} was next"
            ));
        }
        *next += 1;
        self.delivered += 1;
        self.digest = self
            .digest
            .wrapping_mul(0x100_0000_01b3)
            .wrapping_add((u64::from(origin) << 40) ^ k);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_or_a_gap_is_refused_and_the_digest_follows_the_order() {
        let mut a = Tally::default();
        a.take(1, 0).unwrap();
        a.take(2, 0).unwrap();
        assert!(a.take(1, 0).unwrap_err().contains("where 1 was next"));
        assert!(a.take(2, 2).is_err());
        let mut b = Tally::default();
        b.take(2, 0).unwrap();
        b.take(1, 0).unwrap();
        assert_eq!((a.delivered, b.delivered), (2, 2));
        assert_ne!(a.digest, b.digest, "another order, another digest");
        let mut c = Tally::default();
        c.take(1, 0).unwrap();
        c.take(2, 0).unwrap();
        assert_eq!(a.digest, c.digest);
    }
}
