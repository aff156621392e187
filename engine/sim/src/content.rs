//! The sender application's messages: sizes and bytes derived from
//! `(seed, index)` alone, so the checkers can recompute any byte instead of
//! keeping a copy of the stream.

use mcast_proto::Rng;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn block(seed: u64, message: u64, block: u64) -> [u8; 8] {
    mix(seed
        ^ message.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ block.wrapping_mul(0xd6e8_feb8_6659_fd93)
        ^ 0xa076_1d64_78bd_642f)
    .to_le_bytes()
}

/// The size of message `i`, uniform in `[min, max]`.
pub fn message_len(seed: u64, i: u64, min: usize, max: usize) -> usize {
    if min >= max {
        return min;
    }
    Rng::new(mix(seed ^ 0x51ce_0000_0000_0000) ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d))
        .range(min as u64, max as u64) as usize
}

/// Writes bytes `offset..offset + out.len()` of message `i` into `out`.
pub fn fill_message(seed: u64, i: u64, offset: usize, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        let pos = offset + k;
        *b = block(seed, i, (pos / 8) as u64)[pos % 8];
    }
}

/// True when `data` equals bytes `offset..offset + data.len()` of message `i`.
pub fn matches_message(seed: u64, i: u64, offset: usize, data: &[u8]) -> bool {
    let mut pos = offset;
    let mut rest = data;
    // Whole aligned blocks compare as words; the ragged ends byte by byte.
    if pos % 8 == 0 {
        while rest.len() >= 8 {
            let (word, tail) = rest.split_at(8);
            if word != block(seed, i, (pos / 8) as u64) {
                return false;
            }
            rest = tail;
            pos += 8;
        }
    }
    while !rest.is_empty() {
        let b = block(seed, i, (pos / 8) as u64);
        let from = pos % 8;
        let n = (8 - from).min(rest.len());
        if rest[..n] != b[from..from + n] {
            return false;
        }
        rest = &rest[n..];
        pos += n;
    }
    true
}

/// The whole of message `i` of a run with `seed` and sizes in `[min, max]`.
pub fn message(seed: u64, i: u64, min: usize, max: usize) -> Vec<u8> {
    let mut m = vec![0; message_len(seed, i, min, max)];
    fill_message(seed, i, 0, &mut m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_match_agree_at_any_offset() {
        let m = message(3, 9, 100, 100);
        for off in 0..m.len() {
            for len in 0..(m.len() - off).min(20) {
                assert!(matches_message(3, 9, off, &m[off..off + len]));
                let mut part = vec![0; len];
                fill_message(3, 9, off, &mut part);
                assert_eq!(part, &m[off..off + len]);
            }
        }
        let mut wrong = m.clone();
        wrong[57] ^= 1;
        assert!(!matches_message(3, 9, 0, &wrong));
        assert_ne!(message(3, 10, 100, 100), m, "messages differ");
        assert_ne!(message(4, 9, 100, 100), m, "seeds differ");
    }

    #[test]
    fn sizes_stay_in_range() {
        for i in 0..1000 {
            assert!((5..=9).contains(&message_len(1, i, 5, 9)));
        }
        assert_eq!(message_len(1, 0, 7, 7), 7);
    }
}
