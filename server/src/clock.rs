//! The server's clock: the `now` of every answer, the judge's bound on an
//! op's `at`, and every `decided_at`, `created_at` and `changed_at` stored.

/// Milliseconds since the Unix epoch, as the protocol's integer (0 before the epoch).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// [`now_ms`] as a database bigint.
pub(crate) fn now_ms_db() -> i64 {
    i64::try_from(now_ms()).unwrap_or(i64::MAX)
}
