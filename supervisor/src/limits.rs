//! OS limits (rlimits) applied to a worker between fork and exec.

use cellvisor_config::LimitsConfig;

/// One resource limit, prepared before the fork so the child only calls `setrlimit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: libc::__rlimit_resource_t,
    pub value: u64,
}

/// The rlimits the configuration asks for.
pub fn from_config(limits: &LimitsConfig) -> Vec<Rlimit> {
    let mut out = Vec::new();
    let mut push = |resource, value: Option<u64>| {
        if let Some(value) = value {
            out.push(Rlimit { resource, value });
        }
    };
    push(
        libc::RLIMIT_AS,
        limits.address_space.map(|size| size.as_u64()),
    );
    push(
        libc::RLIMIT_CPU,
        limits.cpu_time.map(|d| d.as_secs().max(1)),
    );
    push(libc::RLIMIT_NOFILE, limits.open_files);
    push(libc::RLIMIT_NPROC, limits.processes);
    push(
        libc::RLIMIT_FSIZE,
        limits.file_size.map(|size| size.as_u64()),
    );
    out
}

/// Applies `limits` in the forked child. Async-signal-safe: only `setrlimit`.
pub fn apply_in_child(limits: &[Rlimit]) -> std::io::Result<()> {
    for limit in limits {
        let value = libc::rlimit {
            rlim_cur: limit.value,
            rlim_max: limit.value,
        };
        // SAFETY: setrlimit reads a valid rlimit struct and has no other preconditions.
        if unsafe { libc::setrlimit(limit.resource, &value) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
