//! Which TCP peers are this daemon's own cells: the network's counterpart of the Unix
//! socket's peer check. A cell that found the token (a file its user can read) must still not
//! drive the daemon that runs it.
//!
//! A peer on this machine has its end of the connection in the kernel's socket table
//! (`/proc/net/tcp`, `/proc/net/tcp6`); its inode, found among the file descriptors of the
//! processes under this daemon, names the cell. Where sessions run as uids of their own
//! (`isolation.level = "uid"`) the table's owner of the socket settles it first: a session
//! uid is never a client. A peer on another machine is in no table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether the connection from `peer` to `local` was opened by a process under this daemon,
/// or by a uid leased to its sessions (`session_uids`): where sessions run as uids of their
/// own, the table's owner of the socket names a cell even when its process cannot be seen
/// (a non-dumpable one hides its descriptors).
pub(super) fn from_own_cell(
    local: SocketAddr,
    peer: SocketAddr,
    session_uids: Option<cellvisor_config::UidRange>,
) -> bool {
    let Some((inode, owner)) = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            socket_inode(&text, peer, local)
        })
    else {
        return false;
    };
    if session_uids.is_some_and(|range| range.contains(owner)) {
        return true;
    }
    let daemon = std::process::id();
    let target = format!("socket:[{inode}]");
    let trees = cellvisor_os::process_tree::trees(&[daemon]);
    trees
        .get(&daemon)
        .into_iter()
        .flatten()
        .filter(|process| process.pid != daemon)
        .any(|process| holds(process.pid, &target))
}

/// Whether process `pid` has a file descriptor on `target` (`socket:[inode]`).
fn holds(pid: u32, target: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target))
}

/// The inode and owning uid of the socket whose local end is `local` and remote end is
/// `remote`, in a `/proc/net/tcp{,6}` table.
fn socket_inode(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<(u64, u32)> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (l, r) = (address(fields.get(1)?)?, address(fields.get(2)?)?);
        let uid = fields.get(7)?.parse().ok()?;
        let inode = fields.get(9)?.parse().ok()?;
        (same(l, local) && same(r, remote) && inode != 0).then_some((inode, uid))
    })
}

/// Two addresses equal once IPv4-mapped IPv6 is read as IPv4 (a dual-stack listener).
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// One `ADDR:PORT` of the table: the address as 32-bit words in host byte order, the port
/// in hex.
fn address(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(|w| w.to_ne_bytes());
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1CFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1137 1 0000000092e05fd4 100 0 0 10 0
   1: 0100007F:A2B4 0100007F:1CFC 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000092e05fd4 20 4 30 10 -1
";

    #[test]
    fn a_loopback_connection_is_found_by_both_ends() {
        let server: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:41652".parse().unwrap();
        assert_eq!(socket_inode(TABLE, client, server), Some((4242, 1000)));
        // The other direction, or another port, is no connection of that client.
        assert_eq!(socket_inode(TABLE, server, client), None);
        let other: SocketAddr = "127.0.0.1:41653".parse().unwrap();
        assert_eq!(socket_inode(TABLE, other, server), None);
    }

    #[test]
    fn ipv6_and_mapped_ipv4_addresses_are_read() {
        let v6 = address("00000000000000000000000001000000:1CFC").unwrap();
        assert_eq!(v6, "[::1]:7420".parse().unwrap());
        let mapped = address("0000000000000000FFFF00000100007F:1CFC").unwrap();
        assert!(same(mapped, "127.0.0.1:7420".parse().unwrap()), "{mapped}");
        assert_eq!(address("nonsense"), None);
    }

    #[test]
    fn a_connection_of_this_test_process_is_not_a_cell() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // Found in the table, but held by this process, not one under it.
        assert!(!from_own_cell(listener.local_addr().unwrap(), peer, None));
        // A socket owned by a uid leased to sessions is a cell's, wherever its process is.
        let me = nix::unistd::getuid().as_raw();
        let ours = cellvisor_config::UidRange {
            first: me,
            last: me,
        };
        assert!(from_own_cell(
            listener.local_addr().unwrap(),
            peer,
            Some(ours)
        ));
    }
}
