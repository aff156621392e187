//! A small seeded mutator for the smoke test: bit flips, interesting
//! values, truncations, insertions, deletions and splices of corpus
//! entries. No entropy: one seed gives one sequence of inputs.

/// SplitMix64: a tiny generator, good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Values at the edges of what length and count fields hold.
const INTERESTING: [u32; 10] = [
    0,
    1,
    7,
    8,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 30,
];

/// One input: a corpus entry changed by one to four mutations.
pub fn mutate(corpus: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut v = corpus
        .get(rng.below(corpus.len()))
        .cloned()
        .unwrap_or_default();
    for _ in 0..=rng.below(4) {
        mutate_once(&mut v, corpus, rng);
    }
    v
}

fn mutate_once(v: &mut Vec<u8>, corpus: &[Vec<u8>], rng: &mut Rng) {
    let at = rng.below(v.len() + 1);
    match rng.below(8) {
        0 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] ^= 1 << rng.below(8);
        }
        1 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] = rng.next_u64() as u8;
        }
        2 => {
            // An interesting value, big- or little-endian, 1 to 4 bytes.
            let value = INTERESTING[rng.below(INTERESTING.len())];
            let width = 1 + rng.below(4);
            let bytes = if rng.below(2) == 0 {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            };
            let bytes = &bytes[4 - width..];
            let end = (at + width).min(v.len());
            v.splice(at..end, bytes.iter().copied());
        }
        3 => v.truncate(at),
        4 => {
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            v.splice(at..at, bytes);
        }
        5 if !v.is_empty() => {
            let end = (at + 1 + rng.below(16)).min(v.len());
            v.drain(at.min(end)..end);
        }
        6 if !v.is_empty() => {
            // Repeat a chunk of the input after itself.
            let start = rng.below(v.len());
            let end = (start + 1 + rng.below(32)).min(v.len());
            let chunk = v[start..end].to_vec();
            v.splice(end..end, chunk);
        }
        _ => {
            // Splice: this input's head, another entry's tail.
            if let Some(other) = corpus.get(rng.below(corpus.len())) {
                let from = rng.below(other.len() + 1);
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
        }
    }
}
