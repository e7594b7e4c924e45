#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgegate_webhook::admission::fuzz_review(data));
