//! The CI smoke run of every fuzz target (issue 23): each over its whole
//! committed corpus, then over seeded mutations of it. A failure names the
//! target and prints the input, ready to become a regression test.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use mcast_fuzz::mutate::{mutate, Rng};
use mcast_fuzz::{seeds, TARGETS};

/// Mutated inputs per target.
const MUTATIONS: usize = 20_000;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

/// Every file of the target's corpus, sorted by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned();
            (name, fs::read(&p).expect("a corpus file"))
        })
        .collect()
}

/// Runs `f` on `input`; on a panic, says which target and input, then
/// fails with the panic.
fn run(target: &str, what: &str, f: fn(&[u8]), input: &[u8]) {
    if let Err(e) = panic::catch_unwind(AssertUnwindSafe(|| f(input))) {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        eprintln!(
            "fuzz target {target} failed on {what} ({} bytes): {hex}",
            input.len()
        );
        panic::resume_unwind(e);
    }
}

#[test]
fn corpus_holds_the_seeds_the_encoders_make() {
    let bless = std::env::var_os("MCAST_FUZZ_BLESS").is_some();
    for (target, _) in TARGETS {
        let dir = corpus_dir(target);
        let seeds = seeds::seeds(target);
        assert!(!seeds.is_empty(), "{target} has no seeds");
        for (i, seed) in seeds.iter().enumerate() {
            let path = dir.join(format!("seed-{i:02}"));
            if bless {
                fs::create_dir_all(&dir).expect("corpus directory");
                fs::write(&path, seed).expect("seed written");
            }
            let on_disk = fs::read(&path).unwrap_or_default();
            assert!(
                on_disk == *seed,
                "{} is not what the encoders make now: run MCAST_FUZZ_BLESS=1 cargo test -p mcast-fuzz --test smoke",
                path.display()
            );
        }
    }
}

#[test]
fn every_target_over_its_corpus_and_mutations() {
    for (i, (target, f)) in TARGETS.iter().enumerate() {
        let files = corpus(target);
        assert!(!files.is_empty(), "{target} has an empty corpus");
        for (name, bytes) in &files {
            run(target, name, *f, bytes);
        }
        let inputs: Vec<Vec<u8>> = files.into_iter().map(|(_, b)| b).collect();
        let mut rng = Rng::new(0x2300 + i as u64);
        for n in 0..MUTATIONS {
            let input = mutate(&inputs, &mut rng);
            run(target, &format!("mutation {n}"), *f, &input);
        }
        // The degenerate inputs.
        for input in [&[][..], &[0], &[0xff; 64]] {
            run(target, "a degenerate input", *f, input);
        }
    }
}
