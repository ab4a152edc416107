//! The [`Backend`] over the `object_store` crate: one interface for a local
//! directory (`file://`), an in-memory store (`memory://`, tests) and, with
//! the `remote-cloud` feature, S3 and compatible stores, GCS, Azure and
//! HTTP/WebDAV. Builders read credentials from their usual environment;
//! cascade stores none. Create-only puts use `PutMode::Create` (S3 sends
//! `If-None-Match: *`); a store that cannot do conditional puts falls back
//! to look-then-put, where a lost race only rewrites an equivalent entry.

use std::sync::Arc;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions};

use super::{Backend, BoxFut, PutOutcome, RemoteError, RemoteSettings};

#[derive(Debug)]
struct Store {
    store: Arc<dyn ObjectStore>,
}

/// What [`open`] made of the URL.
pub(super) enum Opened {
    /// The store and the key prefix.
    Store(Arc<dyn Backend>, String),
    /// The URL is fine but the store cannot be used (a `file://` root that
    /// is a file, a FIFO, or cannot be created): why.
    Unusable(String),
}

/// Builds the store for `settings.url`. A URL this build cannot use, or a
/// cloud store whose configuration is incomplete, is an error.
pub(super) fn open(settings: &RemoteSettings) -> Result<Opened, RemoteError> {
    let raw = settings.url.as_str();
    let invalid = |message: String| RemoteError::InvalidUrl {
        url: raw.to_string(),
        message,
    };
    let url = url::Url::parse(raw).map_err(|e| {
        invalid(format!(
            "{e} (expected e.g. s3://bucket/prefix, gs://bucket/prefix or file:///shared/cache)"
        ))
    })?;
    let (scheme, path) = ObjectStoreScheme::parse(&url).map_err(|e| invalid(e.to_string()))?;
    let (store, prefix): (Arc<dyn ObjectStore>, String) = match scheme {
        ObjectStoreScheme::Local => {
            let dir = url
                .to_file_path()
                .map_err(|_| invalid("not a local path".into()))?;
            // A missing cache directory is made, like the local cache's; one
            // that cannot be is a store that is down, not a bad setting.
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return Ok(Opened::Unusable(format!(
                    "cannot create the directory '{}': {e}",
                    dir.display()
                )));
            }
            match object_store::local::LocalFileSystem::new_with_prefix(&dir) {
                Ok(fs) => (Arc::new(fs), String::new()),
                Err(e) => return Ok(Opened::Unusable(chain(&e))),
            }
        }
        ObjectStoreScheme::Memory => (
            Arc::new(object_store::memory::InMemory::new()),
            String::new(),
        ),
        #[cfg(feature = "remote-cloud")]
        other => {
            // An HTTP store's base URL already holds its path.
            let prefix = if other == ObjectStoreScheme::Http {
                String::new()
            } else {
                prefix_of(&path)
            };
            let store = cloud::build(other, &url, settings).map_err(|e| RemoteError::Backend {
                url: raw.to_string(),
                message: e.to_string(),
            })?;
            (store, prefix)
        }
        #[cfg(not(feature = "remote-cloud"))]
        other => {
            let _ = path;
            return Err(RemoteError::Unsupported {
                url: raw.to_string(),
                message: format!(
                    "{other:?} needs the `remote-cache-cloud` feature, which this build left out \
                     (the default build has it: cargo install cascade); file:// works without it"
                ),
            });
        }
    };
    Ok(Opened::Store(Arc::new(Store { store }), prefix))
}

/// `a/b` -> `a/b/`; empty stays empty.
#[cfg_attr(not(feature = "remote-cloud"), allow(dead_code))]
fn prefix_of(path: &ObjPath) -> String {
    let p = path.as_ref().trim_matches('/');
    if p.is_empty() {
        String::new()
    } else {
        format!("{p}/")
    }
}

/// An error with its causes (`builder error: ...: no root certificates`).
fn chain(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        source = cause.source();
    }
    text
}

impl Backend for Store {
    fn get(&self, path: String) -> BoxFut<Result<Option<Vec<u8>>, String>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let location = ObjPath::from(path);
            match store.get(&location).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .map(|b| Some(b.to_vec()))
                    .map_err(|e| chain(&e)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(chain(&e)),
            }
        })
    }

    fn put_create(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<PutOutcome, String>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let location = ObjPath::from(path);
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match store.put_opts(&location, bytes.clone().into(), opts).await {
                Ok(_) => Ok(PutOutcome::Created),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(PutOutcome::AlreadyExists),
                Err(object_store::Error::NotImplemented { .. }) => {
                    // No conditional puts here: look, then write.
                    match store.head(&location).await {
                        Ok(_) => Ok(PutOutcome::AlreadyExists),
                        Err(object_store::Error::NotFound { .. }) => store
                            .put(&location, bytes.into())
                            .await
                            .map(|_| PutOutcome::Created)
                            .map_err(|e| chain(&e)),
                        Err(e) => Err(chain(&e)),
                    }
                }
                Err(e) => Err(chain(&e)),
            }
        })
    }

    fn put_replace(&self, path: String, bytes: Vec<u8>) -> BoxFut<Result<(), String>> {
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            store
                .put(&ObjPath::from(path), bytes.into())
                .await
                .map(drop)
                .map_err(|e| chain(&e))
        })
    }
}

#[cfg(feature = "remote-cloud")]
mod cloud {
    //! The cloud builders, each from its environment (so `AWS_ENDPOINT`,
    //! `AWS_ALLOW_HTTP`... apply as users expect), plus the cache's timeout
    //! and few retries (the cache gives up quickly by design).
    use std::sync::Arc;
    use std::time::Duration;

    use object_store::aws::AmazonS3ConfigKey;
    use object_store::azure::AzureConfigKey;
    use object_store::gcp::GoogleConfigKey;
    use object_store::{ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};

    use super::RemoteSettings;

    pub(super) fn build(
        scheme: ObjectStoreScheme,
        url: &url::Url,
        settings: &RemoteSettings,
    ) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
        // reqwest is built without a TLS provider of its own: the process
        // uses rustls' `ring` one (an error here only means one is set).
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Set through config keys: replacing the client options would drop
        // what the environment set (allow_http, proxies...). The cache's own
        // deadline (`settings.timeout`) is the one that decides; the client's
        // sits a little beyond it, only so no socket outlives the cache.
        let timeout = format!(
            "{}ms",
            (settings.timeout + Duration::from_secs(1)).as_millis()
        );
        let connect = format!(
            "{}ms",
            (settings.timeout + Duration::from_secs(1))
                .min(Duration::from_secs(5))
                .as_millis()
        );
        let client = [
            (ClientConfigKey::Timeout, timeout),
            (ClientConfigKey::ConnectTimeout, connect),
        ];
        let retry = RetryConfig {
            max_retries: 1,
            retry_timeout: settings.timeout,
            ..RetryConfig::default()
        };
        Ok(match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str());
                for (k, v) in client {
                    b = b.with_config(AmazonS3ConfigKey::Client(k), v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let mut b =
                    object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
                for (k, v) in client {
                    b = b.with_config(GoogleConfigKey::Client(k), v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut b =
                    object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str());
                for (k, v) in client {
                    b = b.with_config(AzureConfigKey::Client(k), v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            ObjectStoreScheme::Http => {
                let mut b = object_store::http::HttpBuilder::new().with_url(url.as_str());
                for (k, v) in client {
                    b = b.with_config(k, v);
                }
                Arc::new(b.with_retry(retry).build()?)
            }
            other => {
                return Err(object_store::Error::NotSupported {
                    source: format!("unsupported remote cache scheme {other:?}").into(),
                })
            }
        })
    }
}
