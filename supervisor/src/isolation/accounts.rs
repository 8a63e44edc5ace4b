//! Whether a uid range is free: no account of the machine (in `/etc/passwd`) holds one of
//! its uids, and no group (in `/etc/group`) one of its gids. A session leased such a uid
//! would own that account's files and could signal its processes, and the start-up sweep
//! of the range would end them.

use cellvisor_config::UidRange;

/// The account database files read at start.
pub const PASSWD: &str = "/etc/passwd";
/// The group database file read at start.
pub const GROUP: &str = "/etc/group";

/// The first account or group of `passwd` and `group` (the files' text) whose uid or gid
/// lies in `range`, described for the log (`account "x" (uid 60800) in /etc/passwd`).
pub fn first_taken(range: UidRange, passwd: &str, group: &str) -> Option<String> {
    for (name, fields) in entries(passwd) {
        // name:password:uid:gid:...
        for (field, what) in [(fields.first(), "uid"), (fields.get(1), "gid")] {
            if let Some(id) = field.and_then(|f| f.parse::<u32>().ok()) {
                if range.contains(id) {
                    return Some(format!("account {name:?} ({what} {id}) in {PASSWD}"));
                }
            }
        }
    }
    for (name, fields) in entries(group) {
        // name:password:gid:members
        if let Some(gid) = fields.first().and_then(|f| f.parse::<u32>().ok()) {
            if range.contains(gid) {
                return Some(format!("group {name:?} (gid {gid}) in {GROUP}"));
            }
        }
    }
    None
}

/// The machine's accounts and groups in `range`, read from [`PASSWD`] and [`GROUP`] (a file
/// that cannot be read holds none: a container without one has no accounts to collide with).
pub fn first_taken_on_this_machine(range: UidRange) -> Option<String> {
    let passwd = std::fs::read_to_string(PASSWD).unwrap_or_default();
    let group = std::fs::read_to_string(GROUP).unwrap_or_default();
    first_taken(range, &passwd, &group)
}

/// Each entry's name and the fields after its password field; comments, blank lines and
/// NIS `+`/`-` lines are skipped.
fn entries(text: &str) -> impl Iterator<Item = (&str, Vec<&str>)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with(['#', '+', '-']))
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            fields.next()?; // password
            Some((name, fields.collect()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment\n\
        \n\
        +nis\n\
        alice:x:1000:1000::/home/alice:/bin/bash\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
    const GROUP_TEXT: &str = "root:x:0:\nusers:x:100:alice\nnogroup:x:65534:\n";

    fn range(first: u32, last: u32) -> UidRange {
        UidRange { first, last }
    }

    #[test]
    fn a_range_no_account_or_group_uses_is_free() {
        assert_eq!(
            first_taken(UidRange::DEFAULT, PASSWD_TEXT, GROUP_TEXT),
            None
        );
        assert_eq!(
            first_taken(range(1001, 2000), PASSWD_TEXT, GROUP_TEXT),
            None
        );
    }

    #[test]
    fn an_accounts_uid_or_gid_or_a_groups_gid_in_the_range_is_named() {
        let taken = first_taken(range(1000, 1000), PASSWD_TEXT, GROUP_TEXT).unwrap();
        assert_eq!(taken, "account \"alice\" (uid 1000) in /etc/passwd");
        let passwd = "svc:x:5:60800::/:/bin/false\n";
        let taken = first_taken(UidRange::DEFAULT, passwd, "").unwrap();
        assert_eq!(taken, "account \"svc\" (gid 60800) in /etc/passwd");
        let group = "cells:x:61000:\n";
        let taken = first_taken(UidRange::DEFAULT, PASSWD_TEXT, group).unwrap();
        assert_eq!(taken, "group \"cells\" (gid 61000) in /etc/group");
    }

    #[test]
    fn garbage_lines_are_skipped_not_fatal() {
        let passwd = "broken\nno-uid:x\nbad:x:notanumber:1:\n";
        assert_eq!(first_taken(range(1000, 65533), passwd, "::\n"), None);
    }
}
