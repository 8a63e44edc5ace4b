use super::*;

/// A stat line as Linux 6 writes it, for pid 42 named `a) b (c`.
const LINE: &str = "42 (a) b (c) S 7 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

#[test]
fn stat_lines_parse_even_with_odd_names() {
    let stat = parse_stat(42, LINE.as_bytes()).expect("parsed");
    assert_eq!(stat.ppid, 7);
    assert_eq!(stat.state, 'S');
    assert_eq!(stat.cpu_ticks, 42);
    assert_eq!(stat.children_cpu_ticks, 7);
    assert_eq!(stat.start_ticks, 5);
    assert_eq!(stat.rss_bytes, 25 * page_size());
    assert!(!stat.is_dead() && !stat.is_stopped());
}

#[test]
fn lines_the_kernel_would_not_write_are_refused_without_a_panic() {
    for line in [
        "",
        "garbage",
        "(x) S 1 2",
        "42 (x)",
        "42 (x)S 1",
        "42 (x) S",
        "42 (x) S notanumber 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25",
        "42 x) S 1 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25",
        ")(",
        "42 (a) ",
        " (x) S 1",
        "42 (a)  S 1",
    ] {
        assert_eq!(parse_stat(42, line.as_bytes()), None, "{line:?}");
    }
    // Before the name: only the pid's digits and one space (a byte the lossy text turns into
    // a wider character there would have been sliced inside it).
    for line in [
        &b"\xff(x) S 1 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25"[..],
        b"4\xff2 (x) S 1 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25",
        b"ab (x) S 1 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25",
        b"42\t(x) S 1 42 42 0 -1 4194304 1 0 0 0 30 12 3 4 20 0 1 0 5 1000 25",
    ] {
        assert_eq!(parse_stat(42, line), None, "{line:?}");
    }
    // Cut anywhere, a real line parses or is refused, never panics.
    for end in 0..LINE.len() {
        let _ = parse_stat(42, &LINE.as_bytes()[..end]);
    }
}

#[test]
fn this_process_reads_the_same_through_every_way() {
    let me = std::process::id();
    let once = stat(me).expect("our own stat");
    let kept = StatFile::open(me).expect("opened");
    let again = kept.read().expect("read through the kept file");
    assert_eq!(
        (once.pid, once.ppid, once.start_ticks),
        (again.pid, again.ppid, again.start_ticks)
    );
    assert!(!once.is_dead(), "{once:?}");
    let memory = memory(None).expect("statm");
    assert!(memory.resident_bytes > 0 && memory.mapped_bytes >= memory.resident_bytes);
    assert!(super::memory(Some(me)).expect("statm").resident_bytes > 0);
    assert!(!is_stopped(me));
}

#[test]
fn a_kept_stat_file_fails_once_its_process_is_gone() {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep runs");
    let kept = StatFile::open(child.id()).expect("opened");
    assert_eq!(kept.read().map(|s| s.pid), Some(child.id()));
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(kept.read(), None);
    assert_eq!(kept.pid(), child.id());
}

#[test]
fn a_stopped_process_is_seen_stopped() {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("sleep runs");
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: kill with a pid we started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !is_stopped(child.id()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stopped = is_stopped(child.id());
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(stopped);
    assert!(!is_stopped(child.id()));
}

#[test]
fn a_kept_listing_follows_the_descriptors_it_lists() {
    let me = std::process::id();
    let mut listing = DescriptorDir::open(me).expect("opened");
    let before = listing.count().expect("counted");
    let extra: Vec<File> = (0..64)
        .map(|_| File::open("/proc/self/stat").expect("opened"))
        .collect();
    // Other test threads may open and close files meanwhile, but not dozens: the listing,
    // read again through the same directory, sees ours.
    let after = listing.count().expect("counted again");
    assert!(after >= before + 48, "{before} then {after}");
    drop(extra);
    assert!(before >= 3);
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sleep runs");
    let mut theirs = DescriptorDir::open(child.id()).expect("opened");
    // A program just started may still be opening and closing its libraries: the two
    // readings are compared once they agree, which a listing that does not follow never
    // would within the second.
    let listed = || {
        std::fs::read_dir(format!("/proc/{}/fd", child.id()))
            .map(|l| l.count() as u64)
            .ok()
    };
    let (mut counted, mut seen) = (theirs.count(), listed());
    for _ in 0..100 {
        if counted == seen {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        (counted, seen) = (theirs.count(), listed());
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(counted, seen);
    assert_eq!(
        theirs.count().unwrap_or(0),
        0,
        "a listing kept past its process"
    );
    assert_eq!(open_descriptors(child.id()), None);
}

#[test]
fn status_gives_the_uid_the_state_and_the_capabilities() {
    let me = status(None).expect("our own status");
    // SAFETY: getuid has no preconditions.
    assert_eq!(me.real_uid, unsafe { libc::getuid() });
    assert_ne!(me.state, 'Z');
    assert_eq!(
        status(Some(std::process::id())).map(|s| s.real_uid),
        Some(me.real_uid)
    );
    // A real status with the lines this reads changed.
    let real = std::fs::read_to_string("/proc/self/status").expect("our status text");
    let text: String = real
        .lines()
        .map(|line| match line.split(':').next() {
            Some("Uid") => "Uid:\t1000\t1001\t1000\t1000".to_owned(),
            Some("State") => "State:\tZ (zombie)".to_owned(),
            Some("CapEff") => "CapEff:\t00000000000000c0".to_owned(),
            _ => line.to_owned(),
        })
        .map(|line| line + "\n")
        .collect();
    let parsed = parse_status(text.as_bytes()).expect("parsed");
    assert_eq!(parsed.real_uid, 1000);
    assert_eq!(parsed.state, 'Z');
    assert_eq!(parsed.effective_caps, 0xc0);
    assert_eq!(parse_status("Uid:\tnobody\n".as_bytes()), None);
    assert_eq!(parse_status("garbage".as_bytes()), None);
}

#[test]
fn our_own_stat_names_us() {
    let mine = own_stat().expect("our own stat");
    assert_eq!(mine.pid, std::process::id());
    assert!(mine.start_ticks > 0);
}
