//! The numbers `zygote.py` hands to the kernel through ctypes (system calls, `prctl` options,
//! clone flags) are written there by hand: each is checked here against the `libc` crate's
//! value for the architecture this is built for, so a typo or a new architecture fails a
//! test instead of a fork.

use super::install::ZYGOTE_SOURCE;

/// The integer a top-level `NAME = 123` (or `0x...`) line of the zygote assigns.
fn constant(name: &str) -> i64 {
    let prefix = format!("{name} = ");
    let text = ZYGOTE_SOURCE
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("zygote.py has no line `{name} = ...`"));
    let text = text.split('#').next().unwrap_or_default().trim();
    match text.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .unwrap_or_else(|e| panic!("zygote.py's {name} = {text:?}: {e}"))
}

/// The entry for this architecture of the zygote's `SYS_CLONE = {"arch": n, ...}` table.
fn clone_number_for(arch: &str) -> i64 {
    let table = ZYGOTE_SOURCE
        .lines()
        .find_map(|line| line.strip_prefix("SYS_CLONE = {"))
        .expect("zygote.py has its SYS_CLONE table");
    table
        .trim_end_matches('}')
        .split(',')
        .filter_map(|entry| entry.split_once(':'))
        .find(|(key, _)| key.trim().trim_matches('"') == arch)
        .and_then(|(_, number)| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("zygote.py's SYS_CLONE has no entry for {arch}"))
}

// `c_long` is `i64` here but not on every target: the conversions are not useless there.
#[allow(clippy::useless_conversion)]
#[test]
fn the_zygotes_system_call_numbers_are_this_architectures() {
    assert_eq!(
        clone_number_for(std::env::consts::ARCH),
        i64::from(libc::SYS_clone)
    );
    assert_eq!(
        constant("SYS_LANDLOCK_RESTRICT_SELF"),
        i64::from(libc::SYS_landlock_restrict_self)
    );
}

#[allow(clippy::useless_conversion)]
#[test]
fn the_zygotes_flags_and_prctl_options_are_the_kernels() {
    for (name, value) in [
        ("CLONE_PARENT", i64::from(libc::CLONE_PARENT)),
        ("PR_SET_PDEATHSIG", i64::from(libc::PR_SET_PDEATHSIG)),
        ("PR_SET_NO_NEW_PRIVS", i64::from(libc::PR_SET_NO_NEW_PRIVS)),
        ("PR_GET_NO_NEW_PRIVS", i64::from(libc::PR_GET_NO_NEW_PRIVS)),
        ("PR_CAPBSET_DROP", i64::from(libc::PR_CAPBSET_DROP)),
        ("PR_CAP_AMBIENT", i64::from(libc::PR_CAP_AMBIENT)),
        (
            "PR_CAP_AMBIENT_LOWER",
            i64::from(libc::PR_CAP_AMBIENT_LOWER),
        ),
    ] {
        assert_eq!(constant(name), value, "zygote.py's {name}");
    }
}
