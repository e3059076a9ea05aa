//! Process-wide allocator settings: the one piece of `unsafe` outside the numeric kernels,
//! kept here so that the crate's `unsafe` lives in one module tree.

/// Raises glibc's mmap and trim thresholds (glibc only; a no-op elsewhere): candle allocates
/// and frees tens of megabytes every training step, and glibc's default serves each with a new
/// mapping, so page faults took ~30% of training time. See `crate::tune_allocator`.
pub(crate) fn raise_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt only changes two allocator thresholds and takes no pointers; glibc
    // serialises it with the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
