//! Giving back to the system the memory the allocator keeps after a large result.
//!
//! A structured result is parsed into many small blocks; once they are freed, glibc keeps their pages
//! for reuse until it is asked to trim: the server stayed at 301 MiB after one 8 MiB list of 110,000 rows
//! (288 MiB of it free).

/// Results at least this large (as JSON) are followed by a trim.
pub const AFTER_BYTES: usize = 256 * 1024;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
static SCHEDULED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Trims the allocator on a blocking thread, unless a trim is waiting to run already.
pub fn schedule() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !SCHEDULED.swap(true, std::sync::atomic::Ordering::AcqRel) {
        tokio::task::spawn_blocking(|| {
            SCHEDULED.store(false, std::sync::atomic::Ordering::Release);
            // SAFETY: malloc_trim takes only the allocator's own locks.
            unsafe { libc::malloc_trim(0) };
        });
    }
}
