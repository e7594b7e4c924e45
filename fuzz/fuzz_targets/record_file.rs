#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgegate::fuzzing::record_file(data));
