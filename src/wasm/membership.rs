//! The JavaScript face of shared spaces' membership: creating a space,
//! giving and taking roles (another user is invited), listing members,
//! answering invitations, leaving. Needs the server; nothing here is
//! recorded on the device.

use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::{args, client_error, js_error, to_js, Marksync};
use crate::driver::Page;
use crate::protocol::space::MAX_LIST_LIMIT;
use crate::protocol::Code;

/// A list's `{ after, limit }`: `None` when neither is given (the whole list).
fn page(options: &JsValue) -> Result<Option<Page>, JsValue> {
    args::options(options, "options")?;
    let after = args::opt_text(&args::get(options, "after")?, "options.after")?;
    let limit = args::opt_int(options, "limit", "options", 1.0, MAX_LIST_LIMIT as f64)?;
    if after.is_none() && limit.is_none() {
        return Ok(None);
    }
    Ok(Some(Page { after: after.unwrap_or_default(), limit: limit.map_or(MAX_LIST_LIMIT, |n| n as usize) }))
}

#[wasm_bindgen]
impl Marksync {
    /// Creates a shared space owned by this user (needs the server).
    /// Resolves with `{ space, role }`; rejects with code `refused` and
    /// `refusal` (the server's code, e.g. `conflict` for a taken name) or
    /// `network`.
    #[wasm_bindgen(js_name = "createSpace")]
    pub fn create_space(&self, space: JsValue) -> Promise {
        let inner = self.inner.clone();
        let space = args::text(&space, "space");
        super::promise(async move { Ok(to_js(&inner.create_space(&space?).await.map_err(client_error)?)) })
    }

    /// Gives `user` `role` (`"owner"`, `"editor"`, `"viewer"`) in `space`, or
    /// removes them with `null`. Only owners may (else `refused` with
    /// `refusal: "forbidden"`); a space keeps an owner (`conflict`).
    #[wasm_bindgen(js_name = "setMember")]
    pub fn set_member(&self, space: JsValue, user: JsValue, role: JsValue) -> Promise {
        let inner = self.inner.clone();
        let read = (|| {
            let (space, user) = (args::text(&space, "space")?, args::text(&user, "user")?);
            let role = match args::opt_text(&role, "role") {
                Ok(None) => None,
                Ok(Some(name)) => Some(crate::space::Role::parse(&name).ok_or(())),
                Err(_) => Some(Err(())),
            };
            let role = role
                .transpose()
                .map_err(|()| js_error(Code::BadInput.as_str(), "role must be \"owner\", \"editor\", \"viewer\" or null"))?;
            Ok::<_, JsValue>((space, user, role))
        })();
        super::promise(async move {
            let (space, user, role) = read?;
            Ok(to_js(&inner.set_member(&space, &user, role).await.map_err(client_error)?))
        })
    }

    /// The members of `space` with their roles: `{ space, members: [{ user, role }] }`,
    /// every one of them; with `{ after, limit }`, that page only (by user id).
    pub fn members(&self, space: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        let read = args::text(&space, "space").and_then(|space| Ok((space, page(&options)?)));
        super::promise(async move {
            let (space, page) = read?;
            Ok(to_js(&inner.members(&space, page).await.map_err(client_error)?))
        })
    }

    /// The user's pending invitations: `[{ space, role, from, expiresAt }]`,
    /// all of them; with `{ after, limit }`, that page (by space).
    /// Nothing of an invited space is on the device until it is accepted.
    pub fn invitations(&self, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        let read = page(&options);
        super::promise(async move { Ok(to_js(&inner.invitations(read?).await.map_err(client_error)?)) })
    }

    /// The pending invitations to `space`, for one of its owners: `[{ space,
    /// user, role, from, expiresAt }]`, all of them; with `{ after, limit }`,
    /// that page (by invitee). Anyone else: `refused` with `refusal: "forbidden"`.
    pub fn invited(&self, space: JsValue, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        let read = args::text(&space, "space").and_then(|space| Ok((space, page(&options)?)));
        super::promise(async move {
            let (space, page) = read?;
            Ok(to_js(&inner.invited(&space, page).await.map_err(client_error)?))
        })
    }

    /// Accepts the invitation to `space`: resolves with `{ space, role }`;
    /// its rows arrive with the next sync (started now). None pending:
    /// `refused` with `refusal: "not_found"`.
    pub fn accept(&self, space: JsValue) -> Promise {
        let inner = self.inner.clone();
        let space = args::text(&space, "space");
        super::promise(async move { Ok(to_js(&inner.accept(&space?).await.map_err(client_error)?)) })
    }

    /// Declines the invitation to `space` (none pending: resolves all the same).
    pub fn decline(&self, space: JsValue) -> Promise {
        let inner = self.inner.clone();
        let space = args::text(&space, "space");
        super::promise(async move {
            inner.decline(&space?).await.map_err(client_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Leaves `space`; the next sync (started now) takes its rows off the
    /// device. The last owner cannot: `refused` with `refusal: "conflict"`.
    pub fn leave(&self, space: JsValue) -> Promise {
        let inner = self.inner.clone();
        let space = args::text(&space, "space");
        super::promise(async move {
            inner.leave(&space?).await.map_err(client_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }
}
