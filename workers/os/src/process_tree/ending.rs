//! Ending part of a process tree, even one that forks as fast as it can (a fork bomb).
//!
//! Killing what one look at the tree found is not enough against a tree that grows: the
//! processes not yet killed fork again, each kill frees a slot of `RLIMIT_NPROC` for them,
//! and the kernel's per-task `children` lists (how a tree is read) are not reliable while
//! they change, so a look can come back empty while processes remain. So the tree is first
//! frozen: each process found gets SIGSTOP (a process with a stop pending cannot fork: the
//! kernel restarts its `fork` once it runs again), and the tree is read again until a look
//! finds no process that was not already stopped. Only then is every process killed
//! (SIGKILL), those that are our own children reaped, and the tree read again until no live
//! process of the ones to end is left, confirmed by one scan of all of `/proc` (which sees
//! every process that lasts through it); all of it within a bound of time.
//!
//! [`Ending`] decides, from one look at the tree, what to signal: plain data, tested without
//! processes. [`end_tree`] applies it to the real `/proc`.

use super::{tree_by_scan, trees, ProcStat};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Where an ending is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Stopping every process found, until a look finds none that was not stopped.
    Freezing,
    /// Killing them, until a look finds none alive.
    Killing,
}

/// What one look at the tree asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// To stop (SIGSTOP) now.
    pub stop: Vec<u32>,
    /// To kill (SIGKILL) now.
    pub kill: Vec<u32>,
    /// Dead children of ours that were ended: to reap.
    pub reap: Vec<u32>,
    /// No live process to end was in this look.
    pub clear: bool,
}

/// The decisions of one ending, look after look.
#[derive(Debug)]
pub struct Ending {
    /// The process whose tree is read: never ended.
    root: u32,
    /// The process doing the ending: its dead children can be reaped.
    me: u32,
    phase: Phase,
    /// Sent SIGSTOP (it may be pending still: the process can fork no more either way).
    stopped: HashSet<u32>,
    /// Sent SIGKILL.
    killed: HashSet<u32>,
    /// Killed, dead, and the child of another process (which alone can reap it), at the
    /// last look.
    theirs: Vec<u32>,
    /// Every process to end any look found, dead or alive.
    found: HashSet<u32>,
}

/// What an ending did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// How many processes were killed.
    pub count: usize,
    /// Those of them left dead (zombies) for a parent other than the caller to reap, such
    /// as a Python interpreter whose cell forked them.
    pub theirs: Vec<u32>,
    /// How many distinct processes to end the looks found, those already dead included.
    pub found: usize,
}

impl Ending {
    pub fn new(root: u32, me: u32) -> Ending {
        Ending {
            root,
            me,
            phase: Phase::Freezing,
            stopped: HashSet::new(),
            killed: HashSet::new(),
            theirs: Vec::new(),
            found: HashSet::new(),
        }
    }

    /// What to do after a look at the tree (`seen`: its members, the dead included), for the
    /// processes `doomed` picks.
    pub fn step(&mut self, seen: &[ProcStat], doomed: impl Fn(&ProcStat) -> bool) -> Step {
        let mut step = Step::default();
        let mut live = Vec::new();
        self.theirs.clear();
        for process in seen.iter().filter(|p| p.pid != self.root && doomed(p)) {
            self.found.insert(process.pid);
            if !process.is_dead() {
                live.push(process.pid);
            } else if !self.killed.contains(&process.pid) {
                continue;
            } else if process.ppid == self.me {
                step.reap.push(process.pid);
            } else {
                self.theirs.push(process.pid);
            }
        }
        step.clear = live.is_empty();
        if self.phase == Phase::Freezing {
            step.stop = (live.iter())
                .filter(|pid| !self.stopped.contains(pid))
                .copied()
                .collect();
            self.stopped.extend(&step.stop);
            if !step.stop.is_empty() {
                return step;
            }
            // Nothing found that could still fork: the tree is frozen.
            self.phase = Phase::Killing;
        }
        step.kill = (live.iter())
            .filter(|pid| !self.killed.contains(pid))
            .copied()
            .collect();
        step
    }

    /// Records that `pid` was sent SIGKILL (a failed send is not recorded, and is tried again
    /// at the next look that finds the process).
    pub fn killed(&mut self, pid: u32) {
        self.killed.insert(pid);
    }

    /// Out of time: kills what the next look finds, frozen or not.
    pub fn stop_freezing(&mut self) {
        self.phase = Phase::Killing;
    }

    /// How many processes were sent SIGKILL, and which of them another parent must reap.
    pub fn ended(&self) -> Ended {
        Ended {
            count: self.killed.len(),
            theirs: self.theirs.clone(),
            found: self.found.len(),
        }
    }
}

/// How long an ending may take before it gives up on what it could not find or kill.
pub const BOUND: Duration = Duration::from_secs(2);

/// Ends the processes under `root` that `choose` picks from each look (the tree is still
/// walked through those it spares), by [`Ending`]'s steps, within `bound`. Answers what was
/// killed. `root` must stay alive meanwhile, so orphans land on it (a subreaper) and stay in
/// reach.
pub fn end_tree(root: u32, choose: impl Fn(&[ProcStat]) -> HashSet<u32>, bound: Duration) -> Ended {
    let deadline = Instant::now() + bound;
    let mut ending = Ending::new(root, std::process::id());
    loop {
        // The last look kills whatever it finds, frozen or not.
        let late = Instant::now() >= deadline;
        if late {
            ending.stop_freezing();
        }
        let seen = trees(&[root]).remove(&root).unwrap_or_default();
        let mut step = look(&mut ending, &seen, &choose);
        if step.clear && step.kill.is_empty() {
            // A look by children lists can miss processes while those lists change: a scan
            // of all of `/proc` confirms (and whatever it finds is handled like any look).
            step = look(&mut ending, &tree_by_scan(root), &choose);
            if step.clear && step.kill.is_empty() {
                apply(&step, &mut ending);
                return ending.ended();
            }
        }
        let waiting = step.stop.is_empty() && step.kill.is_empty();
        apply(&step, &mut ending);
        if late {
            return ending.ended();
        }
        if waiting {
            // Killed processes take a moment to die.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One look's step, for the processes `choose` picks from it.
fn look(
    ending: &mut Ending,
    seen: &[ProcStat],
    choose: &impl Fn(&[ProcStat]) -> HashSet<u32>,
) -> Step {
    let chosen = choose(seen);
    ending.step(seen, |p| chosen.contains(&p.pid))
}

fn apply(step: &Step, ending: &mut Ending) {
    for pid in &step.stop {
        signal(*pid, Signal::SIGSTOP);
    }
    for pid in &step.kill {
        if signal(*pid, Signal::SIGKILL) {
            ending.killed(*pid);
        }
    }
    for pid in &step.reap {
        super::reap(*pid);
    }
}

fn signal(pid: u32, signal: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|raw| kill(Pid::from_raw(raw), signal).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u32 = 10;

    fn process(pid: u32, ppid: u32, state: char) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            state,
            cpu_ticks: 0,
            children_cpu_ticks: 0,
            rss_bytes: 0,
            start_ticks: 0,
        }
    }

    fn all(_: &ProcStat) -> bool {
        true
    }

    #[test]
    fn a_growing_tree_is_stopped_until_nothing_new_then_killed() {
        let mut ending = Ending::new(ROOT, ROOT);
        let first = [process(ROOT, 1, 'S'), process(20, ROOT, 'R')];
        let step = ending.step(&first, all);
        assert_eq!(step.stop, [20]);
        assert!(step.kill.is_empty() && !step.clear);
        // 20 forked 21 before its stop arrived: 21 is stopped, nothing killed yet.
        let second = [
            process(ROOT, 1, 'S'),
            process(20, ROOT, 'T'),
            process(21, 20, 'R'),
        ];
        let step = ending.step(&second, all);
        assert_eq!(step.stop, [21]);
        assert!(step.kill.is_empty());
        // Nothing new: frozen, so both are killed at once.
        let step = ending.step(&second, all);
        assert!(step.stop.is_empty());
        assert_eq!(step.kill, [20, 21]);
        ending.killed(20);
        ending.killed(21);
        assert_eq!(ending.ended().count, 2);
    }

    #[test]
    fn a_stop_still_pending_counts_as_stopped() {
        let mut ending = Ending::new(ROOT, ROOT);
        let running = [process(20, ROOT, 'R')];
        assert_eq!(ending.step(&running, all).stop, [20]);
        // Still `R` (the stop is pending): not stopped again, and killed.
        let step = ending.step(&running, all);
        assert!(step.stop.is_empty());
        assert_eq!(step.kill, [20]);
    }

    #[test]
    fn killed_processes_are_not_killed_twice_and_our_dead_children_are_reaped() {
        let mut ending = Ending::new(ROOT, ROOT);
        let seen = [process(20, ROOT, 'T'), process(21, 20, 'T')];
        ending.step(&seen, all);
        let step = ending.step(&seen, all);
        assert_eq!(step.kill, [20, 21]);
        ending.killed(20);
        ending.killed(21);
        // 20 died (a zombie of ours), 21 is dying and now ours: wait, kill nothing again.
        let dying = [process(20, ROOT, 'Z'), process(21, ROOT, 'R')];
        let step = ending.step(&dying, all);
        assert!(step.kill.is_empty() && step.stop.is_empty() && !step.clear);
        assert_eq!(step.reap, [20]);
        let gone = [process(21, ROOT, 'Z')];
        let step = ending.step(&gone, all);
        assert!(step.clear);
        assert_eq!(step.reap, [21]);
        assert_eq!(ending.ended().count, 2);
    }

    #[test]
    fn one_found_after_the_freeze_is_killed_and_a_failed_kill_is_retried() {
        let mut ending = Ending::new(ROOT, ROOT);
        ending.step(&[process(20, ROOT, 'T')], all);
        assert_eq!(ending.step(&[process(20, ROOT, 'T')], all).kill, [20]);
        // The send failed (not recorded); 30, missed by the earlier looks, turns up.
        let seen = [process(20, ROOT, 'T'), process(30, ROOT, 'R')];
        let step = ending.step(&seen, all);
        assert_eq!(step.kill, [20, 30]);
    }

    #[test]
    fn out_of_time_what_is_found_is_killed_unfrozen() {
        let mut ending = Ending::new(ROOT, ROOT);
        ending.stop_freezing();
        let step = ending.step(&[process(20, ROOT, 'R')], all);
        assert!(step.stop.is_empty());
        assert_eq!(step.kill, [20]);
    }

    #[test]
    fn the_root_the_spared_and_others_dead_children_are_left_alone() {
        let interpreter = 11;
        let mut ending = Ending::new(ROOT, ROOT);
        let doomed = |p: &ProcStat| p.pid != interpreter;
        let seen = [
            process(ROOT, 1, 'S'),
            process(interpreter, ROOT, 'S'),
            // A zombie of the interpreter: not ours to reap.
            process(12, interpreter, 'Z'),
            // A zombie of ours nobody killed: the warden's (or whoever waits for it).
            process(13, ROOT, 'Z'),
        ];
        let step = ending.step(&seen, doomed);
        assert_eq!(
            step,
            Step {
                clear: true,
                ..Step::default()
            }
        );
        ending.killed(12);
        let step = ending.step(&seen, doomed);
        assert_eq!(
            step,
            Step {
                clear: true,
                ..Step::default()
            }
        );
        // 12, killed, is left for the interpreter to reap.
        let ended = ending.ended();
        assert_eq!((ended.count, ended.theirs), (1, vec![12]));
        assert_eq!(ended.found, 2, "12 and 13 were found");
    }
}
