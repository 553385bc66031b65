//! The app's own rules around the judge (PROTOCOL §3, "Rules"): checked for
//! each op the schema and the roles let through, before it is applied. A
//! refusal is a `rejected` verdict like any other — remembered forever,
//! replayed word for word, never judged again (so a change of the rules never
//! changes a past answer).
//!
//! The core calls them and stays pure: what a rule needs from outside (the
//! app's own data) is read before judging, by whoever runs the judge.

use crate::protocol::{Op, Row};
use crate::space::Role;

/// What a rule sees of one op.
#[derive(Debug, Clone, Copy)]
pub struct RuleInput<'a> {
    /// Who sent it.
    pub user: &'a str,
    /// The sender's role in the op's space (`Owner` in their personal space).
    pub role: Role,
    /// The space the op writes in (`~<user>` for the personal space).
    pub space: &'a str,
    /// The op, as sent.
    pub op: &'a Op,
    /// The row before the op (as the newest schema spells it), `None` for a new row.
    pub before: Option<&'a Row>,
    /// The row the op would make.
    pub after: &'a Row,
}

/// A rule's refusal: a stable code the app's screens can switch on, and the
/// words the person sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct RuleRefusal {
    /// Stable, `snake_case` (the app's own codes).
    pub code: String,
    /// For people.
    pub reason: String,
}

impl RuleRefusal {
    /// A refusal with `code` and `reason`.
    pub fn new(code: impl Into<String>, reason: impl Into<String>) -> RuleRefusal {
        RuleRefusal { code: code.into(), reason: reason.into() }
    }
}

/// Rules an app adds to the judge.
pub trait Rules {
    /// Allows the op, or refuses it in the app's words.
    fn check(&self, input: &RuleInput<'_>) -> Result<(), RuleRefusal>;
}

/// No rules beyond the schema and the roles.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRules;

impl Rules for NoRules {
    fn check(&self, _: &RuleInput<'_>) -> Result<(), RuleRefusal> {
        Ok(())
    }
}

impl<F: Fn(&RuleInput<'_>) -> Result<(), RuleRefusal>> Rules for F {
    fn check(&self, input: &RuleInput<'_>) -> Result<(), RuleRefusal> {
        self(input)
    }
}
