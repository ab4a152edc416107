//! Background tasks tied to a scope: [`AbortOnDrop`] stops a spawned tokio
//! task when its owner goes away, however that owner returns (an early
//! `?`, a panic, the end of a run), so helpers such as signal links,
//! watchers and readers never outlive what they serve.

/// Aborts the task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
