//! A small seeded mutator for the smoke test: bit flips, interesting
//! values, truncations, insertions, deletions and splices of corpus
//! entries. No entropy: one seed gives one sequence of inputs.

pub use mcast_proto::Rng;

/// A number in `0..n` (0 when `n` is 0).
fn below(rng: &mut Rng, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        rng.range(0, n as u64 - 1) as usize
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
        .get(below(rng, corpus.len()))
        .cloned()
        .unwrap_or_default();
    for _ in 0..=below(rng, 4) {
        mutate_once(&mut v, corpus, rng);
    }
    v
}

fn mutate_once(v: &mut Vec<u8>, corpus: &[Vec<u8>], rng: &mut Rng) {
    let at = below(rng, v.len() + 1);
    match below(rng, 8) {
        0 if !v.is_empty() => {
            let i = below(rng, v.len());
            v[i] ^= 1 << below(rng, 8);
        }
        1 if !v.is_empty() => {
            let i = below(rng, v.len());
            v[i] = rng.next_u64() as u8;
        }
        2 => {
            // An interesting value, big- or little-endian, 1 to 4 bytes.
            let value = INTERESTING[below(rng, INTERESTING.len())];
            let width = 1 + below(rng, 4);
            let bytes = if below(rng, 2) == 0 {
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
            let n = 1 + below(rng, 16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            v.splice(at..at, bytes);
        }
        5 if !v.is_empty() => {
            let end = (at + 1 + below(rng, 16)).min(v.len());
            v.drain(at.min(end)..end);
        }
        6 if !v.is_empty() => {
            // Repeat a chunk of the input after itself.
            let start = below(rng, v.len());
            let end = (start + 1 + below(rng, 32)).min(v.len());
            let chunk = v[start..end].to_vec();
            v.splice(end..end, chunk);
        }
        _ => {
            // Splice: this input's head, another entry's tail.
            if let Some(other) = corpus.get(below(rng, corpus.len())) {
                let from = below(rng, other.len() + 1);
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
        }
    }
}
