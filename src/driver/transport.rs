//! The transport: how a push, a pull or a question reaches the server.
//!
//! The driver speaks to the server only through [`Transport`]; the browser
//! brings `fetch` (the wasm adapter's `FetchTransport`), tests and the
//! simulator bring the in-memory judge ([`MemoryTransport`]) or a network of
//! their own making.

use std::cell::RefCell;
use std::rc::Rc;

use crate::attempt::Failure;
use crate::memory_server::MemoryServer;
use crate::protocol::space::{InvitationsList, MemberChange, MAX_LIST_LIMIT};
use crate::protocol::{
    CreateSpace, ErrorBody, Member, MembersList, OpId, PushRequest, PushResponse, SetMember, SpacesPullRequest, SpacesPullResponse,
    VerdictsRequest, VerdictsResponse,
};
use crate::space::Membership;

/// Why a membership call failed: the server's error code and message
/// (`forbidden`, `conflict`, `bad_request`, …), or `network` when no answer came.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// The server's code, or `network`.
    pub code: String,
    /// What went wrong, in the server's words when it answered.
    pub message: String,
}

impl CallError {
    /// No answer came.
    pub fn network(f: Failure) -> CallError {
        CallError { code: crate::protocol::Code::Network.as_str().into(), message: f.to_string() }
    }

    /// The server's refusal, code and words.
    pub fn of(e: ErrorBody) -> CallError {
        // `as_str` is the wire's spelling (`protocol::code::tests`).
        CallError { code: e.error.code.as_str().into(), message: e.error.message }
    }
}

/// A page of a list the server keeps (PROTOCOL §3c): at most `limit`
/// entries after the one named `after` (empty: from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The last entry of the page before (a user id, or a space's name).
    pub after: String,
    /// 1 to [`MAX_LIST_LIMIT`].
    pub limit: usize,
}

impl Page {
    /// The first page, as long as a page may be.
    pub const FIRST: Page = Page { after: String::new(), limit: MAX_LIST_LIMIT };

    /// The page's query parameters, `after=…&limit=…` (`encode`: a component's URL encoding).
    pub fn query(&self, encode: impl Fn(&str) -> String) -> String {
        format!("after={}&limit={}", encode(&self.after), self.limit)
    }

    /// The entries of a whole list, ordered as the server orders them, that
    /// this page holds (`key`: what `after` names of an entry).
    pub fn of<T>(&self, list: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
        let start = match self.after.as_str() {
            "" => 0,
            after => list.iter().position(|e| key(e) == after).map_or(list.len(), |i| i + 1),
        };
        list.into_iter().skip(start).take(self.limit).collect()
    }
}

/// A way to reach the server.
#[allow(async_fn_in_trait)]
pub trait Transport {
    /// Sends a push; `Ok` only for a 200 whose body parses.
    async fn push(&self, req: &PushRequest) -> Result<PushResponse, Failure>;
    /// Sends a pull of every followed space (`POST /v1/pull`); `Ok` only for a 200 whose body parses.
    async fn pull(&self, req: &SpacesPullRequest) -> Result<SpacesPullResponse, Failure>;
    /// Asks what the server remembers of these ops (`POST /v1/verdicts`, read-only).
    async fn verdicts(&self, op_ids: &[OpId]) -> Result<VerdictsResponse, Failure>;
    /// `GET /v1/schema`: the server's schema file and its `ETag`; `None`
    /// when it is still the one tagged `etag` (304).
    async fn schema(&self, etag: Option<&str>) -> Result<Option<(String, Option<String>)>, Failure>;
    /// After a 401: get a fresh token. `Ok(false)` if there is no way to;
    /// the token function's own failure if it threw.
    async fn refresh_auth(&self) -> Result<bool, Failure>;
    /// Gets what a request needs before it can leave (the token): a failure
    /// here means nothing was sent.
    async fn prepare(&self) -> Result<(), Failure>;
    /// Names the user the device's database belongs to on every request
    /// (`?user=`), once known.
    fn set_user(&self, user: Option<&str>);
    /// `POST /v1/spaces`: creates a shared space owned by the user.
    async fn create_space(&self, req: &CreateSpace) -> Result<Membership, CallError>;
    /// `POST /v1/spaces/members`: changes or removes a member, or invites a user who is not one.
    async fn set_member(&self, req: &SetMember) -> Result<MemberChange, CallError>;
    /// `GET /v1/spaces/members?space=`: a page of who is a member of a space.
    async fn members(&self, space: &str, page: Page) -> Result<MembersList, CallError>;
    /// `GET /v1/invitations`: a page of the user's pending invitations.
    async fn invitations(&self, page: Page) -> Result<InvitationsList, CallError>;
    /// `GET /v1/spaces/invitations?space=`: a page of the invitations to a space the user owns.
    async fn invited(&self, space: &str, page: Page) -> Result<InvitationsList, CallError>;
    /// `POST /v1/invitations/accept`: joins a space the user is invited to.
    async fn accept(&self, space: &str) -> Result<Membership, CallError>;
    /// `POST /v1/invitations/decline`: refuses an invitation.
    async fn decline(&self, space: &str) -> Result<(), CallError>;
    /// `POST /v1/spaces/leave`: the user leaves a space (`role: null` on themself).
    async fn leave(&self, space: &str) -> Result<(), CallError>;
}

/// The in-memory judge as a transport, for tests (natively and in the browser). Answers can
/// be lost after the server committed (`lose_next`), to test retries.
#[derive(Clone)]
pub struct MemoryTransport {
    /// The server, shared between clients (devices) of one test.
    pub server: Rc<RefCell<MemoryServer>>,
    /// The user this transport authenticates as.
    pub user: String,
    /// Lose the answers of the next n pushes (after commit).
    pub lose_next: Rc<RefCell<u32>>,
    /// Fail the next n pushes with a 503 before the server sees them.
    pub fail_next: Rc<RefCell<u32>>,
}

impl Transport for MemoryTransport {
    async fn push(&self, req: &PushRequest) -> Result<PushResponse, Failure> {
        {
            let mut fail = self.fail_next.borrow_mut();
            if *fail > 0 {
                *fail -= 1;
                return Err(Failure::Server { status: 503, message: "unavailable".into(), retry_after_ms: 0 });
            }
        }
        let r = self.server.borrow_mut().push(&self.user, req);
        let mut lose = self.lose_next.borrow_mut();
        if *lose > 0 {
            *lose -= 1;
            return Err(Failure::Network("answer lost".into()));
        }
        r.map_err(|e| Failure::from_http(e.error.code.http_status(), Some(&e), None))
    }

    async fn pull(&self, req: &SpacesPullRequest) -> Result<SpacesPullResponse, Failure> {
        Ok(self.server.borrow().pull_spaces(&self.user, req))
    }

    async fn verdicts(&self, op_ids: &[OpId]) -> Result<VerdictsResponse, Failure> {
        Ok(self.server.borrow().verdicts(&self.user, &VerdictsRequest { op_ids: op_ids.to_vec() }))
    }

    async fn schema(&self, _etag: Option<&str>) -> Result<Option<(String, Option<String>)>, Failure> {
        let text = serde_json::to_string(&self.server.borrow().schema).map_err(|e| Failure::BadResponse(e.to_string()))?;
        Ok(Some((text, None)))
    }

    async fn refresh_auth(&self) -> Result<bool, Failure> {
        Ok(false)
    }

    async fn prepare(&self) -> Result<(), Failure> {
        Ok(())
    }

    fn set_user(&self, _user: Option<&str>) {}

    async fn create_space(&self, req: &CreateSpace) -> Result<Membership, CallError> {
        let mut server = self.server.borrow_mut();
        server.create_space(&req.space, &self.user).map_err(CallError::of)?;
        let role = server.role(&req.space, &self.user).unwrap_or(crate::space::Role::Owner);
        Ok(Membership { space: req.space.clone(), role })
    }

    async fn set_member(&self, req: &SetMember) -> Result<MemberChange, CallError> {
        let invited = self.server.borrow_mut().set_member(Some(&self.user), &req.space, &req.user, req.role).map_err(CallError::of)?;
        Ok(MemberChange { user: req.user.clone(), role: req.role, invited })
    }

    async fn invitations(&self, page: Page) -> Result<InvitationsList, CallError> {
        let all = self.server.borrow().invitations(&self.user);
        Ok(InvitationsList { invitations: page.of(all, |i| &i.space) })
    }

    async fn invited(&self, space: &str, page: Page) -> Result<InvitationsList, CallError> {
        let all = self.server.borrow().invited(&self.user, space).map_err(CallError::of)?;
        Ok(InvitationsList { invitations: page.of(all, |i| &i.user) })
    }

    async fn accept(&self, space: &str) -> Result<Membership, CallError> {
        let role = self.server.borrow_mut().accept(&self.user, space).map_err(CallError::of)?;
        Ok(Membership { space: space.to_owned(), role })
    }

    async fn decline(&self, space: &str) -> Result<(), CallError> {
        self.server.borrow_mut().decline(&self.user, space);
        Ok(())
    }

    async fn leave(&self, space: &str) -> Result<(), CallError> {
        self.server.borrow_mut().set_member(Some(&self.user), space, &self.user, None).map_err(CallError::of)?;
        Ok(())
    }

    async fn members(&self, space: &str, page: Page) -> Result<MembersList, CallError> {
        let listed = self.server.borrow().members(&self.user, space).map_err(CallError::of)?;
        let members = page.of(listed, |(user, _)| user).into_iter().map(|(user, role)| Member { user, role: Some(role) }).collect();
        Ok(MembersList { space: space.to_owned(), members })
    }
}
