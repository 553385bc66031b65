//! The identity provider's public keys: a JWKS (RFC 7517) read from a file
//! (`--jwks-file`) or fetched from a URL (`--jwks-url`), and which of them a
//! token may be verified with.
//!
//! The set is loaded at start: the server refuses to start without a usable
//! key, as it does without a usable database. It is loaded again
//! - when it is **stale**, after the `max-age` its answer's `Cache-Control`
//!   gave (default [`DEFAULT_FRESH`], kept within [`MIN_FRESH`]..[`MAX_FRESH`];
//!   a file: [`FILE_FRESH`]). One request loads it while the others go on
//!   with the keys they have; a failed load keeps them and is tried again
//!   [`RETRY_AFTER_FAILURE`] later, so a provider's outage never stops sign-ins
//!   with keys already known;
//! - when a token names a **`kid` the set does not hold**: a provider that
//!   rotates publishes the new key before it signs with it, so the key is
//!   taken without a restart. Those loads are rate-limited
//!   ([`REFETCH_BURST`] at once, then one per [`REFETCH_EVERY`]) and shared by
//!   the requests waiting on them: tokens with made-up `kid`s cannot make the
//!   server hammer the provider.
//!
//! A token may use the key its `kid` names, if that key is of the family its
//! `alg` needs (RSA for RS*/PS*, EC P-256 for ES256, P-384 for ES384, Ed25519
//! for EdDSA) and, when the key states an `alg`, that one. Symmetric (`oct`)
//! keys and encryption keys (`use: enc`) in a set are ignored: a published
//! HMAC key would let anyone who reads the set sign tokens.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

/// How long a set whose answer said nothing about caching is used.
pub const DEFAULT_FRESH: Duration = Duration::from_secs(300);
/// The shortest time a fetched set is used, whatever its answer says.
pub const MIN_FRESH: Duration = Duration::from_secs(1);
/// The longest time a fetched set is used, whatever its answer says.
pub const MAX_FRESH: Duration = Duration::from_secs(24 * 3600);
/// How long a set read from a file is used before the file is read again.
pub const FILE_FRESH: Duration = Duration::from_secs(60);
/// After a failed load of a stale set, how long its keys go on being used before the next try.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);
/// Loads for an unknown `kid` that may run back to back.
pub const REFETCH_BURST: f64 = 10.0;
/// Then one more every so long.
pub const REFETCH_EVERY: Duration = Duration::from_secs(6);
/// The longest a fetch of the set may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest set read (providers publish a few keys: a few KB).
pub const MAX_SET_BYTES: usize = 1 << 20;

/// Where the key set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--jwks-file`.
    File(PathBuf),
    /// `--jwks-url`.
    Url(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "--jwks-file {}", p.display()),
            Source::Url(u) => write!(f, "--jwks-url {u}"),
        }
    }
}

/// Why a key set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The file could not be read.
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    /// The URL could not be fetched (no answer, TLS, timeout).
    #[error("cannot fetch it: {0}")]
    Fetch(String),
    /// The URL answered, but not with a success.
    #[error("it answered HTTP {0}")]
    Status(u16),
    /// The set is larger than [`MAX_SET_BYTES`].
    #[error("it is larger than {MAX_SET_BYTES} bytes")]
    TooLarge,
    /// Not a JWKS: `{"keys": [...]}`.
    #[error("it is not a JWK set ({{\"keys\": [...]}}): {0}")]
    Parse(String),
    /// A set without one key a token could be verified with.
    #[error("it has no usable signing key (RSA, EC P-256/P-384 or Ed25519, each with a kid)")]
    NoUsableKey,
}

/// The key families a token's `alg` can need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rsa,
    P256,
    P384,
    Ed25519,
}

/// The family `alg` is verified with (none: not an asymmetric algorithm).
fn family_of(alg: Algorithm) -> Option<Family> {
    match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => Some(Family::Rsa),
        Algorithm::ES256 => Some(Family::P256),
        Algorithm::ES384 => Some(Family::P384),
        Algorithm::EdDSA => Some(Family::Ed25519),
        _ => None,
    }
}

/// Whether `alg` is verified with a published public key.
pub fn is_asymmetric(alg: Algorithm) -> bool {
    family_of(alg).is_some()
}

/// One usable key of the set.
pub struct Key {
    decoding: DecodingKey,
    family: Family,
    /// The `alg` the key states, if any.
    alg: Option<Algorithm>,
}

impl Key {
    /// The key of `jwk`, if a token may be verified with it.
    fn of(jwk: &Jwk) -> Option<Key> {
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            return None;
        }
        let family = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Family::Rsa,
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => Family::P256,
                EllipticCurve::P384 => Family::P384,
                _ => return None,
            },
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Family::Ed25519,
            _ => return None,
        };
        let alg = match jwk.common.key_algorithm {
            Some(a) => Some(Algorithm::try_from(a).ok().filter(|a| family_of(*a) == Some(family))?),
            None => None,
        };
        let decoding = DecodingKey::from_jwk(jwk).ok()?;
        Some(Key { decoding, family, alg })
    }

    /// The key to verify a token signed with `alg`, if this key may verify it.
    pub fn for_alg(&self, alg: Algorithm) -> Option<&DecodingKey> {
        (family_of(alg) == Some(self.family) && self.alg.is_none_or(|a| a == alg)).then_some(&self.decoding)
    }
}

/// The usable keys of a set's text, by `kid`. A key the set holds that no
/// token may use (no `kid`, symmetric, for encryption, an unknown curve or
/// `alg`) is left out, not an error: providers publish such keys too.
pub fn parse(text: &[u8]) -> Result<HashMap<String, Arc<Key>>, JwksError> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(text).map_err(|e| JwksError::Parse(e.to_string()))?;
    let mut keys = HashMap::new();
    for value in set.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else { continue };
        let Some(kid) = jwk.common.key_id.clone().filter(|k| !k.is_empty()) else { continue };
        if let Some(key) = Key::of(&jwk) {
            keys.insert(kid, Arc::new(key));
        }
    }
    if keys.is_empty() {
        return Err(JwksError::NoUsableKey);
    }
    Ok(keys)
}

/// How long an answer with `cache_control` may be used.
pub fn freshness(cache_control: Option<&str>) -> Duration {
    let Some(value) = cache_control else { return DEFAULT_FRESH };
    let mut fresh = None;
    for directive in value.split(',').map(str::trim) {
        let (name, arg) = directive.split_once('=').map_or((directive, None), |(n, a)| (n.trim(), Some(a.trim())));
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            return MIN_FRESH;
        }
        if name.eq_ignore_ascii_case("max-age") {
            fresh = arg.and_then(|a| a.trim_matches('"').parse::<u64>().ok()).map(Duration::from_secs);
        }
    }
    fresh.unwrap_or(DEFAULT_FRESH).clamp(MIN_FRESH, MAX_FRESH)
}

/// The keys in use, since when and until when.
struct Snapshot {
    keys: HashMap<String, Arc<Key>>,
    loaded_at: Instant,
    stale_at: Instant,
    generation: u64,
}

/// The rate limit of loads for unknown `kid`s: a token bucket.
struct Refetches {
    tokens: f64,
    at: Instant,
}

impl Refetches {
    fn take(&mut self, now: Instant) -> bool {
        let earned = now.duration_since(self.at).as_secs_f64() / REFETCH_EVERY.as_secs_f64();
        self.tokens = (self.tokens + earned).min(REFETCH_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Why a load is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Stale,
    UnknownKid,
}

/// Loads after the start, by why and how they went: `/metrics`.
#[derive(Default)]
struct Loads {
    /// [stale ok, stale failed, unknown kid ok, unknown kid failed].
    counts: [AtomicU64; 4],
    /// Loads for an unknown `kid` the rate limit said no to.
    limited: AtomicU64,
}

impl Loads {
    fn count(&self, why: Why, ok: bool) {
        let i = match why {
            Why::Stale => 0,
            Why::UnknownKid => 2,
        } + usize::from(!ok);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// The identity provider's key set, loaded again as the module doc says.
pub struct KeySet {
    source: Source,
    client: reqwest::Client,
    current: RwLock<Arc<Snapshot>>,
    /// Held by the one load in progress; it also keeps the rate limit.
    loading: tokio::sync::Mutex<Refetches>,
    loads: Loads,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet").field("source", &self.source).finish_non_exhaustive()
    }
}

impl KeySet {
    /// Loads the set from `source`, or says why it cannot be used.
    pub async fn load(source: Source) -> Result<KeySet, JwksError> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .user_agent(concat!("marksync-server/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| JwksError::Fetch(e.to_string()))?;
        let mut set = KeySet {
            source,
            client,
            current: RwLock::new(Arc::new(Snapshot {
                keys: HashMap::new(),
                loaded_at: Instant::now(),
                stale_at: Instant::now(),
                generation: 0,
            })),
            loading: tokio::sync::Mutex::new(Refetches { tokens: REFETCH_BURST, at: Instant::now() }),
            loads: Loads::default(),
        };
        let (keys, fresh) = set.fetch().await?;
        tracing::info!(source = %set.source, keys = keys.len(), "identity provider keys loaded");
        let now = Instant::now();
        set.current = RwLock::new(Arc::new(Snapshot { keys, loaded_at: now, stale_at: now + fresh, generation: 1 }));
        Ok(set)
    }

    /// Where the set comes from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        // A poisoned lock still holds a whole snapshot: it is only ever replaced.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn replace(&self, snapshot: Snapshot) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    /// The key `kid` names, loading the set again if it is stale or does not hold it.
    pub async fn key(&self, kid: &str) -> Option<Arc<Key>> {
        let snap = self.snapshot();
        if Instant::now() >= snap.stale_at {
            // One request loads; the others go on with the keys they have.
            if let Ok(guard) = self.loading.try_lock() {
                self.reload(guard, snap.generation, Why::Stale).await;
            }
        }
        let snap = self.snapshot();
        if let Some(key) = snap.keys.get(kid) {
            return Some(key.clone());
        }
        let guard = self.loading.lock().await;
        self.reload(guard, snap.generation, Why::UnknownKid).await;
        self.snapshot().keys.get(kid).cloned()
    }

    /// Loads the set again, unless another load replaced `seen` meanwhile or
    /// (for an unknown `kid`) the rate limit says no.
    async fn reload(&self, mut guard: tokio::sync::MutexGuard<'_, Refetches>, seen: u64, why: Why) {
        let snap = self.snapshot();
        if snap.generation != seen {
            return;
        }
        if why == Why::UnknownKid && !guard.take(Instant::now()) {
            self.loads.limited.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let result = self.fetch().await;
        self.loads.count(why, result.is_ok());
        match result {
            Ok((keys, fresh)) => {
                tracing::info!(source = %self.source, keys = keys.len(), reason = ?why, "identity provider keys loaded again");
                let now = Instant::now();
                self.replace(Snapshot { keys, loaded_at: now, stale_at: now + fresh, generation: seen + 1 });
            }
            Err(e) => {
                tracing::warn!(source = %self.source, error = %e, reason = ?why, "identity provider keys could not be loaded again; the keys known go on being used");
                let stale_at = if why == Why::Stale { Instant::now() + RETRY_AFTER_FAILURE } else { snap.stale_at };
                let keys = snap.keys.clone();
                self.replace(Snapshot { keys, loaded_at: snap.loaded_at, stale_at, generation: seen + 1 });
            }
        }
    }

    /// The key set's families of `/metrics`, in Prometheus text.
    pub fn render(&self, s: &mut String) {
        let snap = self.snapshot();
        let _ = writeln!(s, "# HELP marksync_jwks_keys Usable keys in the identity provider's key set in use.");
        let _ = writeln!(s, "# TYPE marksync_jwks_keys gauge");
        let _ = writeln!(s, "marksync_jwks_keys {}", snap.keys.len());
        let _ = writeln!(s, "# HELP marksync_jwks_age_seconds Time since the key set in use was loaded (grows while the provider cannot be reached).");
        let _ = writeln!(s, "# TYPE marksync_jwks_age_seconds gauge");
        let _ = writeln!(s, "marksync_jwks_age_seconds {:.3}", snap.loaded_at.elapsed().as_secs_f64());
        let _ = writeln!(
            s,
            "# HELP marksync_jwks_loads_total Loads of the key set after the start, by reason and outcome."
        );
        let _ = writeln!(s, "# TYPE marksync_jwks_loads_total counter");
        for (i, (reason, outcome)) in
            [("stale", "ok"), ("stale", "failed"), ("unknown_kid", "ok"), ("unknown_kid", "failed")].iter().enumerate()
        {
            let n = self.loads.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(s, "marksync_jwks_loads_total{{reason=\"{reason}\",outcome=\"{outcome}\"}} {n}");
        }
        let _ =
            writeln!(s, "# HELP marksync_jwks_loads_limited_total Loads for an unknown kid the rate limit refused.");
        let _ = writeln!(s, "# TYPE marksync_jwks_loads_limited_total counter");
        let _ = writeln!(s, "marksync_jwks_loads_limited_total {}", self.loads.limited.load(Ordering::Relaxed));
    }

    /// The usable keys at the source now, and how long they may be used.
    async fn fetch(&self) -> Result<(HashMap<String, Arc<Key>>, Duration), JwksError> {
        match &self.source {
            Source::File(path) => {
                let text = tokio::fs::read(path).await?;
                if text.len() > MAX_SET_BYTES {
                    return Err(JwksError::TooLarge);
                }
                Ok((parse(&text)?, FILE_FRESH))
            }
            Source::Url(url) => {
                let mut resp = self
                    .client
                    .get(url)
                    .header(reqwest::header::ACCEPT, "application/jwk-set+json, application/json")
                    .send()
                    .await
                    .map_err(|e| JwksError::Fetch(describe(&e)))?;
                if !resp.status().is_success() {
                    return Err(JwksError::Status(resp.status().as_u16()));
                }
                if resp.content_length().is_some_and(|n| n > MAX_SET_BYTES as u64) {
                    return Err(JwksError::TooLarge);
                }
                let fresh = freshness(resp.headers().get(reqwest::header::CACHE_CONTROL).and_then(|v| v.to_str().ok()));
                let mut text = Vec::new();
                while let Some(chunk) = resp.chunk().await.map_err(|e| JwksError::Fetch(describe(&e)))? {
                    if text.len() + chunk.len() > MAX_SET_BYTES {
                        return Err(JwksError::TooLarge);
                    }
                    text.extend_from_slice(&chunk);
                }
                Ok((parse(&text)?, fresh))
            }
        }
    }
}

/// A fetch error with its causes ("error sending request" alone says nothing).
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_sets_how_long_a_set_is_used() {
        assert_eq!(freshness(None), DEFAULT_FRESH);
        assert_eq!(freshness(Some("public, max-age=600")), Duration::from_secs(600));
        assert_eq!(freshness(Some("max-age=0")), MIN_FRESH);
        assert_eq!(freshness(Some("no-store")), MIN_FRESH);
        assert_eq!(freshness(Some("max-age=99999999")), MAX_FRESH);
        assert_eq!(freshness(Some("max-age=abc")), DEFAULT_FRESH);
    }

    #[test]
    fn unusable_keys_are_left_out() {
        let set = br#"{"keys": [
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-256", "use": "enc", "kid": "enc",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256", "kid": "ec",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256", "kid": "ec-as-rsa", "alg": "RS256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "EC", "crv": "P-256",
             "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty": "weird", "kid": "w"}
        ]}"#;
        let keys = parse(set).unwrap();
        assert_eq!(keys.keys().collect::<Vec<_>>(), vec!["ec"]);
        let ec = &keys["ec"];
        assert!(ec.for_alg(Algorithm::ES256).is_some());
        assert!(ec.for_alg(Algorithm::RS256).is_none(), "an EC key never verifies an RSA signature");
        assert!(ec.for_alg(Algorithm::HS256).is_none(), "a public key is never an HMAC secret");
        assert!(matches!(parse(br#"{"keys": []}"#), Err(JwksError::NoUsableKey)));
        assert!(matches!(parse(b"[]"), Err(JwksError::Parse(_))));
    }

    #[test]
    fn unknown_kids_load_the_set_at_a_bounded_rate() {
        let start = Instant::now();
        let mut bucket = Refetches { tokens: REFETCH_BURST, at: start };
        let burst = (0..100).filter(|_| bucket.take(start)).count();
        assert_eq!(burst as f64, REFETCH_BURST);
        assert!(!bucket.take(start + REFETCH_EVERY / 2));
        assert!(bucket.take(start + REFETCH_EVERY + REFETCH_EVERY / 2));
    }
}
