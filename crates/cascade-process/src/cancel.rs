//! A cloneable cancellation signal shared by everything one run started.
//!
//! Built on a `tokio::sync::watch` channel so that a waiter that subscribes
//! after `cancel()` was called still sees it (no lost wake-ups).

use std::sync::Arc;
use tokio::sync::watch;

/// Cancels supervised children (and anything else that awaits it) when fired.
#[derive(Clone, Debug)]
pub struct CancelToken {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(false);
        CancelToken { tx: Arc::new(tx) }
    }

    /// Fires the token; every current and future waiter wakes.
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    /// Whether the token has fired.
    pub fn is_cancelled(&self) -> bool {
        *self.tx.borrow()
    }

    /// Completes once the token has fired.
    pub async fn cancelled(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|fired| *fired).await;
    }
}
