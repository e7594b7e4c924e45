//! Replays the fuzz corpus (fuzz/corpus/<target>/) through the same entry points the fuzz targets
//! call, so every input a fuzzer ever found — crashes become files here — stays a regression test.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("read");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} panics", path.display());
        count += 1;
    }
    count
}

#[test]
fn fuzz_corpus_replays_cleanly() {
    assert!(replay("review", edgegate_webhook::admission::fuzz_review) > 0);
    assert!(replay("record_file", edgegate::fuzzing::record_file) > 0);
    assert!(replay("address", edgegate::fuzzing::address) > 0);
}
