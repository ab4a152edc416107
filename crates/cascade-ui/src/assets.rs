//! The page, embedded at build time (no Node toolchain, no files to ship).
//!
//! The files under `assets/` belong to the page; the server only hands
//! them out with the right content type.

/// `assets/index.html`.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// `assets/app.js`.
pub const APP_JS: &str = include_str!("../assets/app.js");
/// `assets/app.css`.
pub const APP_CSS: &str = include_str!("../assets/app.css");
