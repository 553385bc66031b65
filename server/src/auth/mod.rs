//! Who is calling: `Authorization: Bearer <JWT>` — HS256 with the shared
//! `--jwt-secret`, or RS256/ES256 (and the other asymmetric algorithms) with
//! the identity provider's published keys (`--jwks-file`, `--jwks-url`,
//! [`jwks`]), chosen by the token's `alg` and `kid`; `sub` = user id, `exp`
//! required and checked, `nbf` checked when present, `aud` and `iss` checked
//! when configured — or `Bearer dev:<user>` when dev auth is on. The scheme
//! is case-insensitive (RFC 7235); a user id is trimmed. And the admin
//! credential of the app's own backend, which the `/v1/admin/…` routes need
//! instead of a user's token.
//!
//! A token's `alg` picks its kind of key, never the other way round: an
//! HS256 token is checked against the shared secret only (so one signed with
//! a provider's public key as its "secret" fails), an asymmetric one against
//! the provider's key its `kid` names only, and `none` is no algorithm.

pub mod jwks;

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::error::ApiError;
use jwks::KeySet;

/// The app's own authentication, for marksync inside the app's server
/// ([`crate::embed`]): from a request's headers (its session cookie, its own
/// bearer token…), the user, or why not — the words a `401` answers with.
/// When one is given it alone decides: the built-in tokens are not consulted.
/// On `/v1/events`, which a browser's `EventSource` opens without headers
/// (the npm package sends its token as `?token=`), that token is handed over
/// as `Authorization: Bearer <token>`.
///
/// ```
/// use std::future::Future;
/// use std::pin::Pin;
/// use axum::http::HeaderMap;
///
/// struct Sessions;
/// impl marksync_server::auth::Authenticate for Sessions {
///     fn user<'a>(&'a self, headers: &'a HeaderMap) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
///         Box::pin(async move {
///             let session = headers.get("x-session").and_then(|v| v.to_str().ok());
///             session.and_then(|s| s.strip_prefix("s-")).map(str::to_owned).ok_or_else(|| "no session".to_owned())
///         })
///     }
/// }
/// ```
pub trait Authenticate: Send + Sync + 'static {
    /// The user the request with `headers` is made by.
    fn user<'a>(
        &'a self,
        headers: &'a axum::http::HeaderMap,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>;
}

/// Token checking, built once from the configuration.
#[derive(Clone)]
pub struct Auth {
    /// The app's own authentication, when marksync is embedded with one.
    custom: Option<Arc<dyn Authenticate>>,
    /// The HS256 secret (`--jwt-secret`).
    hmac: Option<DecodingKey>,
    /// The identity provider's keys (`--jwks-file`, `--jwks-url`).
    jwks: Option<Arc<KeySet>>,
    /// The claims every token must meet; its algorithm is set per token.
    validation: Validation,
    dev: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("jwt", &self.hmac.is_some())
            .field("jwks", &self.jwks.as_ref().map(|k| k.source().to_string()))
            .field("dev", &self.dev)
            .field("custom", &self.custom.is_some())
            .finish()
    }
}

/// Where a request comes from, as far as dev tokens care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A loopback peer, and no header that a proxy adds: a request made on this machine.
    Local,
    /// Anything else — another host, or a proxy (which may itself sit on
    /// loopback, as a sidecar or a reverse proxy does) relaying someone's request.
    Remote,
}

/// Headers a proxy adds to the requests it relays.
const PROXY_HEADERS: [&str; 5] = ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip", "via"];

impl Caller {
    /// Where a request from `peer` with `headers` comes from (`None`: the peer is unknown).
    pub fn of(peer: Option<std::net::SocketAddr>, headers: &axum::http::HeaderMap) -> Caller {
        let local = peer.is_some_and(|p| p.ip().is_loopback() || p.ip().to_canonical().is_loopback());
        if local && !PROXY_HEADERS.iter().any(|h| headers.contains_key(*h)) {
            Caller::Local
        } else {
            Caller::Remote
        }
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// Checked by the validation (required); kept for what outlives the
    /// request that showed the token (an event stream ends at it). A number,
    /// whole or not, as RFC 7519's NumericDate allows.
    exp: Option<f64>,
}

/// Who a request's token names, and until when it does.
#[derive(Debug, Clone, PartialEq)]
pub struct Bearer {
    /// The user id.
    pub user: String,
    /// The token's `exp` (seconds since the Unix epoch); `None`: a dev token
    /// or the app's own session, which say nothing of it.
    pub expires: Option<f64>,
}

impl Bearer {
    /// A user whose credential states no end.
    fn unbounded(user: String) -> Bearer {
        Bearer { user, expires: None }
    }
}

impl Auth {
    /// JWTs signed with `secret` (none: no JWT is accepted); `dev` also accepts `dev:<user>`.
    /// Neither `aud` nor `iss` is checked; see [`Auth::expecting`].
    pub fn new(secret: Option<&str>, dev: bool) -> Auth {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.validate_nbf = true;
        // Identity providers put an `aud` in every token; it is checked only when configured.
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        // An HMAC key accepts any bytes; should the crate ever refuse one, no JWT is accepted.
        let hmac = secret.filter(|s| !s.is_empty()).and_then(|s| DecodingKey::from_secret(s.as_bytes()).ok());
        Auth { custom: None, hmac, jwks: None, validation, dev }
    }

    /// Asks `custom` alone who calls (see [`Authenticate`]).
    pub fn with_custom(mut self, custom: Option<Arc<dyn Authenticate>>) -> Auth {
        self.custom = custom;
        self
    }

    /// The identity provider's key set, when configured.
    pub fn jwks(&self) -> Option<&KeySet> {
        self.jwks.as_deref()
    }

    /// The user of a request with `headers`, by the app's own authentication
    /// (`None`: there is none; the built-in tokens decide). A `query_token`
    /// (`/v1/events?token=`, which a browser's `EventSource` sends for want of
    /// headers) is shown to it as the `Authorization: Bearer` it stands for.
    pub fn custom_user<'a>(
        &'a self,
        headers: &axum::http::HeaderMap,
        query_token: Option<&str>,
    ) -> impl std::future::Future<Output = Option<Result<Bearer, ApiError>>> + Send + 'a {
        // Owned before the wait: no borrow of the request crosses it.
        let custom = self.custom.clone();
        let mut headers = custom.as_ref().map(|_| headers.clone());
        if let (Some(h), Some(token)) = (headers.as_mut(), query_token) {
            if !h.contains_key(header::AUTHORIZATION) {
                if let Ok(v) = axum::http::HeaderValue::from_str(&format!("Bearer {token}")) {
                    h.insert(header::AUTHORIZATION, v);
                }
            }
        }
        async move {
            let (custom, headers) = (custom?, headers?);
            Some(match custom.user(&headers).await {
                Ok(user) => check_user(&user).map(Bearer::unbounded),
                Err(why) => Err(ApiError::unauthorized(why)),
            })
        }
    }

    /// Also accepts tokens signed with the identity provider's keys in `keys`.
    pub fn with_jwks(mut self, keys: Option<Arc<KeySet>>) -> Auth {
        self.jwks = keys;
        self
    }

    /// Also requires a token's `aud` to name one of `audiences` (when not empty)
    /// and its `iss` to be `issuer` (when given).
    pub fn expecting(mut self, audiences: &[String], issuer: Option<&str>) -> Auth {
        let mut required = vec!["exp", "sub"];
        if !audiences.is_empty() {
            self.validation.set_audience(audiences);
            self.validation.validate_aud = true;
            required.push("aud");
        }
        if let Some(iss) = issuer {
            self.validation.set_issuer(&[iss]);
            required.push("iss");
        }
        self.validation.set_required_spec_claims(&required);
        self
    }

    /// The user id of a bearer token (the text after `Bearer `), sent from `from`.
    pub async fn user_of_token(&self, token: &str, from: Caller) -> Result<Bearer, ApiError> {
        let token = token.trim();
        if let Some(user) = token.strip_prefix("dev:") {
            if !self.dev {
                return Err(ApiError::unauthorized("dev tokens are not accepted by this server"));
            }
            if from != Caller::Local {
                return Err(ApiError::unauthorized(
                    "dev tokens are accepted only from this machine: a loopback peer, with no proxy header (Forwarded, X-Forwarded-For, X-Real-IP, Via)",
                ));
            }
            return check_user(user).map(Bearer::unbounded);
        }
        if self.hmac.is_none() && self.jwks.is_none() {
            return Err(ApiError::unauthorized("this server accepts no tokens (no JWT secret or key set configured)"));
        }
        let head = decode_header(token).map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?;
        let alg = head.alg;
        let key: &DecodingKey;
        let provider_key;
        if jwks::is_asymmetric(alg) {
            let Some(set) = &self.jwks else {
                return Err(ApiError::unauthorized(format!(
                    "this server accepts no {alg:?} tokens (no --jwks-file or --jwks-url configured)"
                )));
            };
            let kid = head
                .kid
                .filter(|k| !k.is_empty())
                .ok_or_else(|| ApiError::unauthorized("invalid token: it names no key (kid)"))?;
            provider_key = set.key(&kid).await.ok_or_else(|| {
                ApiError::unauthorized(format!(
                    "invalid token: its key {kid:?} is not in the identity provider's key set"
                ))
            })?;
            key = provider_key.for_alg(alg).ok_or_else(|| {
                ApiError::unauthorized(format!("invalid token: its key {kid:?} does not verify {alg:?}"))
            })?;
        } else {
            // Only HS256 is taken with the shared secret; HS384/HS512 are refused below.
            key = self.hmac.as_ref().ok_or_else(|| {
                ApiError::unauthorized(format!("this server accepts no {alg:?} tokens (no --jwt-secret configured)"))
            })?;
            if alg != Algorithm::HS256 {
                return Err(ApiError::unauthorized(format!("invalid token: {alg:?} is not accepted (HS256 is)")));
            }
        }
        let mut validation = self.validation.clone();
        validation.algorithms = vec![alg];
        let data = decode::<Claims>(token, key, &validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?;
        Ok(Bearer { user: check_user(&data.claims.sub)?, expires: data.claims.exp })
    }

    /// The user id from an `Authorization` header value, or from a `token` query parameter.
    pub async fn user(
        &self,
        header: Option<&str>,
        query_token: Option<&str>,
        from: Caller,
    ) -> Result<Bearer, ApiError> {
        if let Some(h) = header {
            let token = h
                .trim()
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .ok_or_else(|| ApiError::unauthorized("the Authorization header must be: Bearer <token>"))?
                .1;
            return self.user_of_token(token, from).await;
        }
        match query_token {
            Some(t) => self.user_of_token(t, from).await,
            None => Err(ApiError::unauthorized("missing Authorization: Bearer <token>")),
        }
    }
}

fn check_user(user: &str) -> Result<String, ApiError> {
    // `dev: alice` is alice: a space no one sees must not make another user.
    let user = user.trim();
    marksync::space::check_user(user)
        .map_err(|_| ApiError::unauthorized("the token's user id is empty, too long or has control characters"))?;
    Ok(user.to_owned())
}

/// A shared secret a caller shows as `Authorization: Bearer <it>`: the admin
/// credential (`--admin-token`) and the metrics token (`--metrics-token`).
/// Its `Debug` never shows it: the state it is part of may be logged.
#[derive(Clone, Default)]
pub struct BearerSecret(Option<Arc<str>>);

/// The admin credential (`--admin-token`), when configured.
pub type AdminCredential = BearerSecret;

impl std::fmt::Debug for BearerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BearerSecret").field(&self.0.as_ref().map(|_| "…")).finish()
    }
}

impl BearerSecret {
    /// `token`, unless absent or empty (then nothing is configured: the admin
    /// routes answer 404, `/metrics` is open).
    pub fn new(token: Option<&str>) -> BearerSecret {
        BearerSecret(token.filter(|t| !t.is_empty()).map(Arc::from))
    }

    /// Whether a secret is configured.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Whether an `Authorization` header value is `Bearer <the secret>`,
    /// compared in time that does not tell where a wrong guess first differs.
    pub fn admits(&self, header: Option<&str>) -> bool {
        let Some(expected) = self.0.as_deref() else { return false };
        let given = header
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        given.is_some_and(|g| same_secret(g.as_bytes(), expected.as_bytes()))
    }

    /// Whether a request to `/v1/admin/…` may go on: `404` unless an admin
    /// credential is configured, then `401` unless the request carries it.
    /// (Refused by [`crate::guard::admin_body`], as a user route's early
    /// refusal is: the body drained first, or the connection closed.)
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if !self.is_set() {
            return Err(ApiError::new(marksync::protocol::ErrorCode::NotFound, "no such route"));
        }
        let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !self.admits(header) {
            return Err(ApiError::unauthorized("the admin routes need the admin token"));
        }
        Ok(())
    }
}

/// Compares two secrets in time that depends on their lengths only, not on
/// where they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    fn token(secret: &str, sub: &str, exp: u64) -> String {
        let claims = serde_json::json!({"sub": sub, "exp": exp});
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes()).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn jwt_dev_and_refusals() {
        let now = jsonwebtoken::get_current_timestamp();
        let a = Auth::new(Some("s3cret"), false);
        assert_eq!(
            a.user(Some(&format!("Bearer {}", token("s3cret", "alice", now + 60))), None, Caller::Local).await.unwrap(),
            Bearer { user: "alice".into(), expires: Some((now + 60) as f64) },
            "the token's user, and until when"
        );
        assert!(a
            .user(Some(&format!("Bearer {}", token("other", "alice", now + 60))), None, Caller::Local)
            .await
            .is_err());
        assert!(a
            .user(Some(&format!("Bearer {}", token("s3cret", "alice", now - 600))), None, Caller::Local)
            .await
            .is_err());
        assert!(a.user(Some("Bearer dev:alice"), None, Caller::Local).await.is_err());
        assert!(a.user(None, None, Caller::Local).await.is_err());
        let d = Auth::new(None, true);
        assert_eq!(d.user(Some("Bearer dev:bob"), None, Caller::Local).await.unwrap(), Bearer::unbounded("bob".into()));
        assert_eq!(d.user(None, Some("dev:bob"), Caller::Local).await.unwrap(), Bearer::unbounded("bob".into()));
        assert!(d.user(Some("Bearer dev:"), None, Caller::Local).await.is_err());
        assert!(d.user(Some("Basic x"), None, Caller::Local).await.is_err());
        assert_eq!(
            d.user(Some("BEARER dev: bob "), None, Caller::Local).await.unwrap(),
            Bearer::unbounded("bob".into())
        );
        assert!(d.user(Some("Bearer dev:  "), None, Caller::Local).await.is_err());
        assert!(
            d.user(Some("Bearer dev:bob"), None, Caller::Remote).await.is_err(),
            "dev tokens only from this machine"
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }

    fn signed(claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"k").unwrap()).unwrap()
    }

    #[tokio::test]
    async fn nbf_aud_and_iss() {
        let now = jsonwebtoken::get_current_timestamp();
        let plain = Auth::new(Some("k"), false);
        async fn user(a: &Auth, claims: serde_json::Value) -> Result<String, ApiError> {
            a.user(Some(&format!("Bearer {}", signed(claims))), None, Caller::Local).await.map(|b| b.user)
        }
        assert!(user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "nbf": now + 60})).await.is_err());
        assert_eq!(user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "nbf": now - 1})).await.unwrap(), "a");
        assert_eq!(
            user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "x", "iss": "y"})).await.unwrap(),
            "a"
        );
        let strict = Auth::new(Some("k"), false).expecting(&["x".into()], Some("y"));
        assert_eq!(
            user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": ["z", "x"], "iss": "y"}))
                .await
                .unwrap(),
            "a"
        );
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "z", "iss": "y"})).await.is_err());
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "iss": "y"})).await.is_err());
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "x"})).await.is_err());
    }

    #[test]
    fn a_dev_caller_is_a_loopback_peer_through_no_proxy() {
        use axum::http::{HeaderMap, HeaderValue};
        let none = HeaderMap::new();
        let peer = |s: &str| Some(s.parse::<std::net::SocketAddr>().unwrap());
        assert_eq!(Caller::of(peer("127.0.0.1:5000"), &none), Caller::Local);
        assert_eq!(Caller::of(peer("[::1]:5000"), &none), Caller::Local);
        assert_eq!(Caller::of(peer("[::ffff:127.0.0.1]:5000"), &none), Caller::Local);
        assert_eq!(Caller::of(peer("10.1.2.3:5000"), &none), Caller::Remote);
        assert_eq!(Caller::of(None, &none), Caller::Remote);
        for h in PROXY_HEADERS {
            let mut proxied = HeaderMap::new();
            proxied.insert(h, HeaderValue::from_static("203.0.113.9"));
            assert_eq!(Caller::of(peer("127.0.0.1:5000"), &proxied), Caller::Remote, "{h}");
        }
    }
}
