//! Who is calling: `Authorization: Bearer <JWT>` (HS256, `sub` = user id,
//! `exp` checked), or `Bearer dev:<user>` when dev auth is on.

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
    pub fn new(secret: Option<&str>, dev: bool) -> Auth {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "sub"]);
        // An HMAC key accepts any bytes; should the crate ever refuse one, no JWT is accepted.
        let key = secret.filter(|s| !s.is_empty()).and_then(|s| DecodingKey::from_secret(s.as_bytes()).ok());
        Auth { key, validation, dev }
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
                .strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
                .ok_or_else(|| ApiError::unauthorized("the Authorization header must be: Bearer <token>"))?;
            return self.user_of_token(token);
        }
        match query_token {
            Some(t) => self.user_of_token(t),
            None => Err(ApiError::unauthorized("missing Authorization: Bearer <token>")),
        }
    }
}

fn check_user(user: &str) -> Result<String, ApiError> {
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
    }
}
