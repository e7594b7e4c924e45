//! What changed, as a set: a watch handler marks what changed (a namespace, everything) and never
//! waits; whoever acts on it takes everything marked since it last looked, each once. Its size is
//! bounded by the distinct changes (namespaces, plus "everything"), however many events arrive
//! meanwhile: a burst of ten thousand events on one namespace is one entry, not ten thousand
//! messages.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// A set of changes marked and not yet taken. Cloned handles share one set.
pub struct Dirty<T> {
    marked: Arc<Mutex<BTreeSet<T>>>,
    /// Told on every mark; holds one permit while nobody waits, so no mark is missed.
    told: Arc<Notify>,
}

impl<T> Clone for Dirty<T> {
    fn clone(&self) -> Self {
        Dirty { marked: Arc::clone(&self.marked), told: Arc::clone(&self.told) }
    }
}

impl<T> std::fmt::Debug for Dirty<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dirty").field("marked", &self.marked.lock().len()).finish()
    }
}

impl<T: Ord> Default for Dirty<T> {
    fn default() -> Self {
        Dirty { marked: Arc::default(), told: Arc::new(Notify::new()) }
    }
}

impl<T: Ord> Dirty<T> {
    /// `change` happened. Never waits.
    pub fn mark(&self, change: T) {
        self.marked.lock().insert(change);
        self.told.notify_one();
    }

    /// Everything marked since the last take, each once, in order; empty when nothing was.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.marked.lock()).into_iter().collect()
    }

    /// Everything marked since the last take, once something is.
    pub async fn next(&self) -> Vec<T> {
        loop {
            let taken = self.take();
            if !taken.is_empty() {
                return taken;
            }
            self.told.notified().await;
        }
    }

    /// How many distinct changes wait.
    pub fn len(&self) -> usize {
        self.marked.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_is_one_entry_per_distinct_change() {
        let dirty = Dirty::default();
        for n in 0..10_000 {
            dirty.mark(format!("ns-{}", n % 100));
        }
        assert_eq!(dirty.len(), 100, "bounded by the distinct changes");
        assert_eq!(dirty.next().await.len(), 100);
        assert!(dirty.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_mark_wakes_the_one_waiting() {
        let dirty = Dirty::default();
        let waiting = tokio::spawn({
            let dirty = dirty.clone();
            async move { dirty.next().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        dirty.mark("a");
        dirty.mark("a");
        assert_eq!(waiting.await.ok(), Some(vec!["a"]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_mark_before_anyone_waits_is_not_missed() {
        let dirty = Dirty::default();
        dirty.mark(1);
        assert_eq!(dirty.take(), vec![1]);
        dirty.mark(2);
        let next = tokio::time::timeout(std::time::Duration::from_secs(1), dirty.next()).await;
        assert_eq!(next.ok(), Some(vec![2]));
    }
}
