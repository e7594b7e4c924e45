//! What the producer's writes remember about each hub namespace, beyond its record: read by the
//! writes themselves and by the evidence its in-process pruner asks (one memory, one name).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use edgegate::core::unwritten::Unwritten;
use parking_lot::Mutex;

/// Cloned handles share one memory.
#[derive(Clone)]
pub struct Memory {
    /// What the answer named while nothing could be written: the next write names it too.
    pub unwritten: Arc<Mutex<Unwritten>>,
    /// Every answer seen (leading or not), each address kept for `--withdraw-after` + `--grace`
    /// after it was last in one: the pruning keeps a copy whose address served that recently,
    /// whatever its record says (a record that never named it: a hand edit, a write that failed,
    /// a replica that did not lead).
    pub served: Arc<Mutex<Unwritten>>,
    /// Hub namespaces whose last write failed, with how many times in a row: their records may
    /// lack what serves, so no copy there is deleted until a write succeeds; each is tried again
    /// after its backoff in the work queue.
    pub failing: Arc<Mutex<HashMap<String, u32>>>,
}

impl Memory {
    /// What is unwritten is named for `withdraw_after`, what served for that plus `grace`.
    pub fn new(withdraw_after: Duration, grace: Duration) -> Self {
        Memory {
            unwritten: Arc::new(Mutex::new(Unwritten::new(withdraw_after))),
            served: Arc::new(Mutex::new(Unwritten::new(withdraw_after + grace))),
            failing: Arc::default(),
        }
    }

    /// Everything remembered of hub namespaces `live` does not name is forgotten.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.unwritten.lock().retain(|ns| live(ns));
        self.served.lock().retain(|ns| live(ns));
        self.failing.lock().retain(|ns, _| live(ns));
    }
}
