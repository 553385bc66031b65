//! Every stable code marksync speaks, spelled once: whole-request errors on
//! the wire (PROTOCOL §5), the judge's refusals of an op (§3), what sync
//! waits for (a recovery, §7), and the errors the JS boundary throws (each
//! `Error` carries its `code`). Apps and tests match on these words: they
//! never change meaning.

super::word::words! {
    /// A stable code (see the module's doc).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Code {
        // Whole-request errors (PROTOCOL §5), each with its HTTP status.
        /// 401: no token, a bad token, an expired token.
        Unauthorized = "unauthorized",
        /// 400: the body does not parse, or an op breaks §1–2 shapes.
        BadRequest = "bad_request",
        /// 413: the body is larger than the limit.
        PayloadTooLarge = "payload_too_large",
        /// 409: the first op's schema is newer than the server's (the server is
        /// the old side); as a refusal, an op's schema newer than the server's.
        SchemaTooNew = "schema_too_new",
        /// 403: the caller may not do this in this space (PROTOCOL §3c); as a
        /// refusal, an op into a space its sender is not a member of.
        Forbidden = "forbidden",
        /// 404: no such space (only an admin is told; a member is told `forbidden`).
        NotFound = "not_found",
        /// 409: the request contradicts what is stored (a space's name taken, its last owner).
        Conflict = "conflict",
        /// 429: slow down; see `Retry-After`.
        RateLimited = "rate_limited",
        /// 408: the body did not arrive in time; nothing was judged.
        RequestTimeout = "request_timeout",
        /// 415: the body is encoded in a way the server does not decode (it
        /// takes `gzip` or `br`, one coding, as its answers' `Accept-Encoding`
        /// says); nothing was read. A client sends the body plain again.
        UnsupportedEncoding = "unsupported_encoding",
        /// 403: the token is another user's than the one the device's database
        /// belongs to (the request's `user` parameter): nothing was read or
        /// written. Also the device's recovery and JS error of that case.
        WrongUser = "wrong_user",
        /// 500.
        Internal = "internal",
        /// 503: the server's database cannot be reached or written just now (an
        /// outage, a full disk). Like any 5xx it leaves a push's outcome unknown
        /// (a connection lost in its `COMMIT`), so its ops are sent again under
        /// the same opIds; `Retry-After` says when to try.
        Unavailable = "unavailable",

        // The judge's refusals of one op (a verdict's `code`).
        /// A required field is missing (or null).
        MissingFields = "missing_fields",
        /// A value has the wrong type.
        WrongType = "wrong_type",
        /// A number is below `min` or above `max`.
        OutOfRange = "out_of_range",
        /// A string is longer than `maxLength`.
        TooLong = "too_long",
        /// The row has a field the table does not define.
        UnknownField = "unknown_field",
        /// The table is not in the schema.
        UnknownTable = "unknown_table",
        /// The row after the edit passes the row bound.
        RowTooLarge = "row_too_large",
        /// The sender is a viewer of the op's space.
        ReadOnly = "read_only",
        /// The op's `at` lies implausibly far ahead of the server's clock.
        ClockAhead = "clock_ahead",
        /// The op changes a `writeOnce` field that is already set.
        WriteOnce = "write_once",
        /// The op sets an `ownersOnly` field and its sender is not an owner of the space.
        OwnersOnly = "owners_only",
        /// An editor's op changes a row of an `ownRows` table that another user created.
        OwnRows = "own_rows",

        // What sync waits for (a recovery) besides the request errors above.
        /// The server was asked about ops over their retry limit and did not know them.
        RetriesExhausted = "retries_exhausted",
        /// The server refused the request for good (a 4xx no retry can change).
        Refused = "refused",
        /// The local database failed and could not be read again.
        Storage = "storage",

        // Errors across the JS boundary (`err.code`).
        /// Bad input; nothing changed.
        BadInput = "bad_input",
        /// IndexedDB cannot be opened (e.g. some private modes).
        StorageUnavailable = "storage_unavailable",
        /// A local transaction failed; nothing of it was written.
        StorageFailed = "storage_failed",
        /// The browser's storage quota is used up; nothing of the edit was written.
        StorageFull = "storage_full",
        /// Sync cannot go on without a person (the error's `recovery` says why).
        RecoveryRequired = "recovery_required",
        /// The database was closed.
        Closed = "closed",
        /// Too many `newRowId()` calls without a pause.
        IdsExhausted = "ids_exhausted",
        /// The device's clock has no later `at` left.
        ClockExhausted = "clock_exhausted",
        /// The server's schema, as the device knows it, refuses the edit.
        Invalid = "invalid",
        /// No answer came (a membership call).
        Network = "network",
    }
}

impl Code {
    /// The HTTP status a whole-request error travels with (500 for a code
    /// that is not one).
    pub const fn http_status(self) -> u16 {
        match self {
            Code::Unauthorized => 401,
            Code::BadRequest => 400,
            Code::PayloadTooLarge => 413,
            Code::SchemaTooNew | Code::Conflict => 409,
            Code::Forbidden | Code::WrongUser => 403,
            Code::NotFound => 404,
            Code::RateLimited => 429,
            Code::RequestTimeout => 408,
            Code::UnsupportedEncoding => 415,
            Code::Unavailable => 503,
            _ => 500,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_reads_back_as_itself_on_the_wire_and_in_serde() {
        for c in [Code::WrongUser, Code::MissingFields, Code::RetriesExhausted, Code::BadInput, Code::SchemaTooNew] {
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.as_str()));
        }
        assert_eq!(Code::parse("nope"), None);
    }

    #[test]
    fn all_lists_every_code_once() {
        assert_eq!(Code::ALL.first(), Some(&Code::Unauthorized));
        for (i, c) in Code::ALL.iter().enumerate() {
            assert_eq!(Code::parse(c.as_str()), Some(*c));
            assert!(!Code::ALL[..i].contains(c), "{c} twice");
        }
        assert!(Code::ALL.contains(&Code::Network) && Code::ALL.contains(&Code::Internal));
    }
}
