//! How the server binary's process takes memory from the kernel.

/// Asks the kernel for no transparent huge pages in this process (Linux;
/// nothing elsewhere), for a process whose allocator is mimalloc.
///
/// Where transparent huge pages are on for every mapping (a common
/// default), each fresh 2 MiB of mimalloc's arenas is zeroed whole on its
/// first touch, and again after mimalloc gives it back: under pushes from many
/// users that was 15% of the server's CPU (`clear_page_erms`), and without it
/// PostgreSQL judged about 1.1× the ops per second (BENCHMARKS.md,
/// "PostgreSQL's judged ops/s: plain inserts and updates, and no huge pages").
/// It is what `MIMALLOC_ALLOW_THP=0` does, called from `main` because that
/// variable is read before `main` runs. An app that embeds the server keeps
/// its own process settings: this is the binary's choice, as its allocator is.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes plain integers and only sets a flag
        // of this process; it reads and writes no memory of ours.
        let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if done != 0 {
            tracing::debug!("transparent huge pages could not be turned off for this process");
        }
    }
}
