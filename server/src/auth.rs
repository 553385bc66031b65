//! Who is calling: `Authorization: Bearer <JWT>` (HS256, `sub` = user id,
//! `exp` required and checked, `nbf` checked when present, `aud` and `iss`
//! checked when configured), or `Bearer dev:<user>` when dev auth is on. The
//! scheme is case-insensitive (RFC 7235); a user id is trimmed.

use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::error::ApiError;

/// The longest user id accepted.
pub const MAX_USER_ID: usize = 256;

/// Token checking, built once from the configuration.
#[derive(Clone)]
pub struct Auth {
    key: Option<DecodingKey>,
    validation: Validation,
    dev: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("jwt", &self.key.is_some()).field("dev", &self.dev).finish()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
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
        let key = secret.filter(|s| !s.is_empty()).and_then(|s| DecodingKey::from_secret(s.as_bytes()).ok());
        Auth { key, validation, dev }
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

    /// The user id of a bearer token (the text after `Bearer `).
    pub fn user_of_token(&self, token: &str) -> Result<String, ApiError> {
        let token = token.trim();
        if let Some(user) = token.strip_prefix("dev:") {
            if !self.dev {
                return Err(ApiError::unauthorized("dev tokens are not accepted by this server"));
            }
            return check_user(user);
        }
        let Some(key) = &self.key else {
            return Err(ApiError::unauthorized("this server accepts no tokens (no JWT secret configured)"));
        };
        let data = decode::<Claims>(token, key, &self.validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {e}")))?;
        check_user(&data.claims.sub)
    }

    /// The user id from an `Authorization` header value, or from a `token` query parameter.
    pub fn user(&self, header: Option<&str>, query_token: Option<&str>) -> Result<String, ApiError> {
        if let Some(h) = header {
            let token = h
                .trim()
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .ok_or_else(|| ApiError::unauthorized("the Authorization header must be: Bearer <token>"))?
                .1;
            return self.user_of_token(token);
        }
        match query_token {
            Some(t) => self.user_of_token(t),
            None => Err(ApiError::unauthorized("missing Authorization: Bearer <token>")),
        }
    }
}

fn check_user(user: &str) -> Result<String, ApiError> {
    // `dev: alice` is alice: a space no one sees must not make another user.
    let user = user.trim();
    if user.is_empty() || user.len() > MAX_USER_ID || user.chars().any(char::is_control) {
        return Err(ApiError::unauthorized("the token's user id is empty, too long or has control characters"));
    }
    Ok(user.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    fn token(secret: &str, sub: &str, exp: u64) -> String {
        let claims = serde_json::json!({"sub": sub, "exp": exp});
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn jwt_dev_and_refusals() {
        let now = jsonwebtoken::get_current_timestamp();
        let a = Auth::new(Some("s3cret"), false);
        assert_eq!(a.user(Some(&format!("Bearer {}", token("s3cret", "alice", now + 60))), None).unwrap(), "alice");
        assert!(a.user(Some(&format!("Bearer {}", token("other", "alice", now + 60))), None).is_err());
        assert!(a.user(Some(&format!("Bearer {}", token("s3cret", "alice", now - 600))), None).is_err());
        assert!(a.user(Some("Bearer dev:alice"), None).is_err());
        assert!(a.user(None, None).is_err());
        let d = Auth::new(None, true);
        assert_eq!(d.user(Some("Bearer dev:bob"), None).unwrap(), "bob");
        assert_eq!(d.user(None, Some("dev:bob")).unwrap(), "bob");
        assert!(d.user(Some("Bearer dev:"), None).is_err());
        assert!(d.user(Some("Basic x"), None).is_err());
        assert_eq!(d.user(Some("BEARER dev: bob "), None).unwrap(), "bob");
        assert!(d.user(Some("Bearer dev:  "), None).is_err());
    }

    fn signed(claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"k").unwrap()).unwrap()
    }

    #[test]
    fn nbf_aud_and_iss() {
        let now = jsonwebtoken::get_current_timestamp();
        let plain = Auth::new(Some("k"), false);
        let user = |a: &Auth, claims| a.user(Some(&format!("Bearer {}", signed(claims))), None);
        assert!(user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "nbf": now + 60})).is_err());
        assert_eq!(user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "nbf": now - 1})).unwrap(), "a");
        assert_eq!(
            user(&plain, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "x", "iss": "y"})).unwrap(),
            "a"
        );
        let strict = Auth::new(Some("k"), false).expecting(&["x".into()], Some("y"));
        assert_eq!(
            user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": ["z", "x"], "iss": "y"})).unwrap(),
            "a"
        );
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "z", "iss": "y"})).is_err());
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "iss": "y"})).is_err());
        assert!(user(&strict, serde_json::json!({"sub": "a", "exp": now + 60, "aud": "x"})).is_err());
    }
}
