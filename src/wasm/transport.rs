//! Transport adapters: how a push or pull reaches a server.
//!
//! [`FetchTransport`] speaks HTTP with the global `fetch` (works in pages and
//! in Service Workers), with a timeout through `AbortController`. Tests use
//! the core's [`MemoryTransport`], the in-memory judge in the same module.

use std::cell::RefCell;

use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::attempt::Failure;
use crate::protocol::space::{InvitationsList, MemberChange, SpaceName};
use crate::protocol::{
    CreateSpace, ErrorBody, MembersList, OpId, PushRequest, PushResponse, SetMember, SpacesPullRequest, SpacesPullResponse,
    VerdictsRequest, VerdictsResponse,
};
use crate::space::Membership;

pub use crate::driver::transport::{CallError, MemoryTransport, Page, Transport};

/// A URL's component, encoded.
fn encode(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

/// Where the token comes from: a fixed string or an (async) function.
#[derive(Clone)]
pub enum TokenSource {
    /// A fixed token.
    Fixed(String),
    /// A function returning a token or a promise of one; called again after a 401.
    Function(Function),
    /// No token.
    None,
}

#[wasm_bindgen::prelude::wasm_bindgen(inline_js = r#"
export function gzip_text(text) {
  if (typeof CompressionStream !== 'function') return Promise.resolve(null);
  try {
    const stream = new Blob([text]).stream().pipeThrough(new CompressionStream('gzip'));
    return new Response(stream).arrayBuffer().then((b) => new Uint8Array(b), () => null);
  } catch (_) {
    return Promise.resolve(null);
  }
}
"#)]
extern "C" {
    /// `text` gzipped by the browser's `CompressionStream`; `null` where there is none.
    fn gzip_text(text: &str) -> Promise;
}

/// Bodies smaller than this go as they are: gzip's header and the work
/// would cost more than they save.
const GZIP_FROM_BYTES: usize = 1024;

/// HTTP over the global `fetch`.
pub struct FetchTransport {
    endpoint: String,
    token_source: RefCell<TokenSource>,
    token: RefCell<Option<String>>,
    user: RefCell<Option<String>>,
    timeout_ms: u32,
    /// The server said (RFC 7694, `Accept-Encoding` on an answer) that it
    /// decodes gzip request bodies: until then bodies go plain, so a server
    /// that does not would never see one it cannot read.
    takes_gzip: std::cell::Cell<bool>,
    /// A gzipped body was answered `415` (a proxy before the server, a
    /// server rolled back): bodies go plain from then on in this context.
    gzip_refused: std::cell::Cell<bool>,
}

fn set(obj: &Object, k: &str, v: &JsValue) {
    let _ = Reflect::set(obj, &JsValue::from_str(k), v);
}

impl FetchTransport {
    /// A transport to `endpoint` (e.g. `https://example.com`, no trailing slash needed).
    pub fn new(endpoint: &str, token: TokenSource, timeout_ms: u32) -> Self {
        FetchTransport {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            token_source: RefCell::new(token),
            token: RefCell::new(None),
            user: RefCell::new(None),
            timeout_ms,
            takes_gzip: std::cell::Cell::new(false),
            gzip_refused: std::cell::Cell::new(false),
        }
    }

    /// Replaces the token source (e.g. after the user signed in again).
    pub fn set_token(&self, token: TokenSource) {
        *self.token_source.borrow_mut() = token;
        *self.token.borrow_mut() = None;
    }

    /// The current token, asking the source if none is cached. A token
    /// function that throws, rejects or returns no string fails in its own
    /// words ([`Failure::Token`]), and is asked again next time.
    pub async fn token(&self) -> Result<Option<String>, Failure> {
        if let Some(t) = self.token.borrow().clone() {
            return Ok(Some(t));
        }
        let src = self.token_source.borrow().clone();
        let t = match src {
            TokenSource::Fixed(s) => Some(s),
            TokenSource::None => None,
            TokenSource::Function(f) => {
                let v = f.call0(&JsValue::NULL).map_err(|e| Failure::Token(js_text(&e)))?;
                let v = match v.dyn_into::<Promise>() {
                    Ok(p) => JsFuture::from(p).await.map_err(|e| Failure::Token(js_text(&e)))?,
                    Err(v) => v,
                };
                // No token (null, undefined, ''): the request goes without one.
                match v.as_string() {
                    Some(t) => Some(t).filter(|t| !t.is_empty()),
                    None if v.is_null() || v.is_undefined() => None,
                    None => return Err(Failure::Token(format!("it returned {}, not a string", super::js_type(&v)))),
                }
            }
        };
        *self.token.borrow_mut() = t.clone();
        Ok(t)
    }

    /// The database's user, as the request parameter (`&user=…` or `?user=…`).
    fn user_param(&self, path: &str) -> String {
        match &*self.user.borrow() {
            Some(u) => {
                let sep = if path.contains('?') { '&' } else { '?' };
                format!("{sep}{}={}", crate::protocol::USER_PARAM, encode(u))
            }
            None => String::new(),
        }
    }

    async fn request(&self, method: &str, path: &str, body: Option<String>) -> Result<String, Failure> {
        Ok(self.exchange(method, path, body, None).await?.text)
    }

    /// A 200 whose body is not marksync's answer (a captive portal's page,
    /// a proxy's) says where it came from.
    fn not_ours(&self, path: &str, e: serde_json::Error) -> Failure {
        Failure::BadResponse(format!("POST {}{path} answered 200 with a body that is not the marksync server's ({e})", self.endpoint))
    }

    /// One request; a 200 (or a 304 when `if_none_match` is given) is an
    /// answer, anything else a [`Failure`].
    async fn exchange(&self, method: &str, path: &str, body: Option<String>, if_none_match: Option<&str>) -> Result<Answer, Failure> {
        let (a, retry_after) = self.fetch(method, path, body, if_none_match).await?;
        if a.status == 200 || (a.status == 304 && if_none_match.is_some()) {
            return Ok(a);
        }
        let body: Option<ErrorBody> = crate::json::from_str(&a.text).ok();
        match (Failure::from_http(a.status, body.as_ref(), retry_after.map(|s| s.saturating_mul(1000))), &body) {
            // Not the marksync server's answer: say where the request went.
            (Failure::Refused(m), None) => Err(Failure::Refused(format!(
                "{m}{method} {}{path} answered {} with no marksync error: is the endpoint the marksync server's base URL?",
                self.endpoint, a.status
            ))),
            // A gateway's 5xx (502, 504…) has no words of the server's: say where it came from.
            (Failure::Server { status, retry_after_ms, .. }, None) => Err(Failure::Server {
                status,
                retry_after_ms,
                message: format!(
                    "{method} {}{path} answered {status} with no marksync error (a proxy or gateway's answer?)",
                    self.endpoint
                ),
            }),
            (f, _) => Err(f),
        }
    }

    /// A membership call: the 200's text (read by [`answer`], so that the
    /// request is one copy in the wasm, not one per answer's type), or the
    /// server's error.
    async fn call(&self, method: &str, path: &str, body: Option<String>) -> Result<String, CallError> {
        let (a, _) = self.fetch(method, path, body, None).await.map_err(CallError::network)?;
        if a.status == 200 {
            return Ok(a.text);
        }
        match crate::json::from_str::<ErrorBody>(&a.text) {
            Ok(e) => Err(CallError::of(e)),
            Err(_) => Err(CallError {
                code: crate::protocol::Code::Network.as_str().into(),
                message: format!("the server answered {}", a.status),
            }),
        }
    }

    /// `body` gzipped, when it is worth it and the server takes it.
    async fn gzipped(&self, body: &str) -> Option<JsValue> {
        if body.len() < GZIP_FROM_BYTES || !self.takes_gzip.get() || self.gzip_refused.get() {
            return None;
        }
        let bytes = JsFuture::from(gzip_text(body)).await.ok()?;
        bytes.is_instance_of::<js_sys::Uint8Array>().then_some(bytes)
    }

    /// One request, whatever its status; with `Retry-After` (s). Fails only
    /// when no answer came. A gzipped body answered `415` goes again plain,
    /// at once: nothing of it was read.
    async fn fetch(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        if_none_match: Option<&str>,
    ) -> Result<(Answer, Option<u64>), Failure> {
        let mut zipped = match &body {
            Some(b) => self.gzipped(b).await,
            None => None,
        };
        loop {
            let went_zipped = zipped.is_some();
            let answer = self.fetch_once(method, path, body.as_deref(), zipped.take(), if_none_match).await?;
            if went_zipped && answer.0.status == crate::protocol::Code::UnsupportedEncoding.http_status() {
                self.gzip_refused.set(true);
                continue;
            }
            return Ok(answer);
        }
    }

    /// One request: `zipped` (`body` gzipped) if given, else `body`.
    async fn fetch_once(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        zipped: Option<JsValue>,
        if_none_match: Option<&str>,
    ) -> Result<(Answer, Option<u64>), Failure> {
        let global = js_sys::global();
        let fetch: Function = Reflect::get(&global, &"fetch".into())
            .ok()
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| Failure::Network("fetch is not available here".into()))?;
        let init = Object::new();
        set(&init, "method", &method.into());
        let headers = Object::new();
        set(&headers, "Content-Type", &"application/json".into());
        set(&headers, crate::protocol::ACCEPT_HEADER, &crate::protocol::ACCEPT_NOTES.into());
        if let Some(tag) = if_none_match {
            set(&headers, "If-None-Match", &tag.into());
        }
        if let Some(t) = self.token().await? {
            set(&headers, "Authorization", &format!("Bearer {t}").into());
        }
        set(&init, "headers", &headers);
        if let Some(bytes) = zipped {
            set(&headers, "Content-Encoding", &"gzip".into());
            set(&init, "body", &bytes);
        } else if let Some(b) = body {
            set(&init, "body", &b.into());
        }
        set(&init, "cache", &"no-store".into());
        let controller = web_sys::AbortController::new().map_err(|e| Failure::Network(js_text(&e)))?;
        set(&init, "signal", &controller.signal());
        let abort = controller.clone();
        let timer = gloo_timers::callback::Timeout::new(self.timeout_ms, move || abort.abort());
        let url = format!("{}{}{}", self.endpoint, path, self.user_param(path));
        let result = async {
            let p: Promise = fetch
                .call2(&global, &url.into(), &init)
                .map_err(|e| Failure::Network(js_text(&e)))?
                .dyn_into()
                .map_err(|_| Failure::Network("fetch returned no promise".into()))?;
            let resp: web_sys::Response = JsFuture::from(p)
                .await
                .map_err(|e| {
                    if controller.signal().aborted() {
                        Failure::Timeout
                    } else {
                        // The browser tells no more (a refused port and CORS look alike to a page): say where.
                        Failure::Network(format!("{method} {}{path}: {}", self.endpoint, js_text(&e)))
                    }
                })?
                .dyn_into()
                .map_err(|_| Failure::Network("not a Response".into()))?;
            let status = resp.status();
            let retry_after = resp.headers().get("Retry-After").ok().flatten().and_then(|s| s.trim().parse::<u64>().ok());
            let text_promise = resp.text().map_err(|e| Failure::Network(js_text(&e)))?;
            let text = JsFuture::from(text_promise)
                .await
                .map_err(|e| if controller.signal().aborted() { Failure::Timeout } else { Failure::Network(js_text(&e)) })?
                .as_string()
                .unwrap_or_default();
            let etag = resp.headers().get("ETag").ok().flatten();
            if let Some(codings) = resp.headers().get("Accept-Encoding").ok().flatten() {
                self.takes_gzip.set(codings.split(',').any(|c| c.trim().eq_ignore_ascii_case("gzip")));
            }
            Ok((Answer { status, text, etag }, retry_after))
        }
        .await;
        drop(timer);
        result
    }
}

/// A request's answer: status (200, or 304 for a conditional request), body, `ETag`.
struct Answer {
    status: u16,
    text: String,
    etag: Option<String>,
}

/// The text of a JS error value.
pub fn js_text(v: &JsValue) -> String {
    if let Some(s) = v.as_string() {
        return s;
    }
    if v.is_undefined() || v.is_null() {
        return "no error given".to_owned();
    }
    // `String(v)` as JS would say it (`toString`), not a Debug dump: the
    // glue of a dump is a kilobyte of JS for a case that names no message.
    Reflect::get(v, &"message".into()).ok().and_then(|m| m.as_string()).unwrap_or_else(|| super::args::shown(v))
}

impl Transport for FetchTransport {
    async fn push(&self, req: &PushRequest) -> Result<PushResponse, Failure> {
        let body = serde_json::to_string(req).map_err(|e| Failure::Refused(e.to_string()))?;
        let text = self.request("POST", "/v1/push", Some(body)).await?;
        crate::json::from_str(&text).map_err(|e| self.not_ours("/v1/push", e))
    }

    async fn pull(&self, req: &SpacesPullRequest) -> Result<SpacesPullResponse, Failure> {
        let body = serde_json::to_string(req).map_err(|e| Failure::Refused(e.to_string()))?;
        let text = self.request("POST", "/v1/pull", Some(body)).await?;
        crate::json::from_str(&text).map_err(|e| self.not_ours("/v1/pull", e))
    }

    async fn verdicts(&self, op_ids: &[OpId]) -> Result<VerdictsResponse, Failure> {
        let req = VerdictsRequest { op_ids: op_ids.to_vec() };
        let body = serde_json::to_string(&req).map_err(|e| Failure::Refused(e.to_string()))?;
        let text = self.request("POST", "/v1/verdicts", Some(body)).await?;
        crate::json::from_str(&text).map_err(|e| self.not_ours("/v1/verdicts", e))
    }

    async fn schema(&self, etag: Option<&str>) -> Result<Option<(String, Option<String>)>, Failure> {
        let a = self.exchange("GET", "/v1/schema", None, etag).await?;
        Ok((a.status == 200).then_some((a.text, a.etag)))
    }

    async fn refresh_auth(&self) -> Result<bool, Failure> {
        let is_fn = matches!(&*self.token_source.borrow(), TokenSource::Function(_));
        *self.token.borrow_mut() = None;
        Ok(is_fn && self.token().await?.is_some())
    }

    async fn prepare(&self) -> Result<(), Failure> {
        self.token().await.map(|_| ())
    }

    fn set_user(&self, user: Option<&str>) {
        *self.user.borrow_mut() = user.map(str::to_owned);
    }

    async fn create_space(&self, req: &CreateSpace) -> Result<Membership, CallError> {
        answer(&self.call("POST", "/v1/spaces", serde_json::to_string(req).ok()).await?)
    }

    async fn set_member(&self, req: &SetMember) -> Result<MemberChange, CallError> {
        answer(&self.call("POST", "/v1/spaces/members", serde_json::to_string(req).ok()).await?)
    }

    async fn members(&self, space: &str, page: Page) -> Result<MembersList, CallError> {
        answer(&self.call("GET", &format!("/v1/spaces/members?space={}&{}", encode(space), page.query(encode)), None).await?)
    }

    async fn invitations(&self, page: Page) -> Result<InvitationsList, CallError> {
        answer(&self.call("GET", &format!("/v1/invitations?{}", page.query(encode)), None).await?)
    }

    async fn invited(&self, space: &str, page: Page) -> Result<InvitationsList, CallError> {
        answer(&self.call("GET", &format!("/v1/spaces/invitations?space={}&{}", encode(space), page.query(encode)), None).await?)
    }

    async fn accept(&self, space: &str) -> Result<Membership, CallError> {
        let body = serde_json::to_string(&SpaceName { space: space.to_owned() }).ok();
        answer(&self.call("POST", "/v1/invitations/accept", body).await?)
    }

    async fn decline(&self, space: &str) -> Result<(), CallError> {
        let body = serde_json::to_string(&SpaceName { space: space.to_owned() }).ok();
        let _: serde::de::IgnoredAny = answer(&self.call("POST", "/v1/invitations/decline", body).await?)?;
        Ok(())
    }

    async fn leave(&self, space: &str) -> Result<(), CallError> {
        let body = serde_json::to_string(&SpaceName { space: space.to_owned() }).ok();
        let _: serde::de::IgnoredAny = answer(&self.call("POST", "/v1/spaces/leave", body).await?)?;
        Ok(())
    }
}

/// A membership call's 200, read as `T`.
fn answer<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, CallError> {
    crate::json::from_str(text).map_err(|e| CallError::network(Failure::BadResponse(e.to_string())))
}
