//! Who is who in the watched tree: the program, a launcher, ranks, their workers.
//!
//! Why: under `collector run -- torchrun …` one collector watches the agent and every worker;
//! marks, OOMs and memory must be told apart by rank, and the agent and the DataLoader workers
//! are not ranks. A process's rank comes, in order, from what it says itself (`rank=` in its
//! messages: the zero-code hooks and the helpers send it, and it survives launchers that set the
//! rank inside the process, like Ray or DeepSpeed's MPI path) and from the environment it was
//! started with (`/proc/PID/environ`, with the launchers' variables of [`crate::launch_env`]:
//! read when the process is first seen, and again while it has no identity or its parent's, in
//! case it was caught before its exec). The collector's own `RANK` is never taken for the run's: in a
//! Kubeflow pod it is the node's index.
//!
//! A child with exactly its parent's identity is a worker of that parent (forked and spawned
//! DataLoader workers inherit the environment); the program becomes a launcher as soon as a rank
//! appears below it. Each change is written as a PROCESS record; a rank that leaves the tree as a
//! PROCESS_END.

use std::collections::HashMap;

use crate::launch_env::Identity;
use oomscope_format::{ProcessEnd, ProcessInfo, ProcessRole, RankSource, Record, StartMethod};

use crate::host::{cmdline_of, environ_of, name_of, parent_of};

/// What the collector knows of one process.
#[derive(Debug, Clone)]
struct Known {
    info: ProcessInfo,
    /// Its environment's identity, as it was started.
    env: Identity,
    /// The tree walk has found it (a sender outside the tree is never taken for gone).
    in_tree: bool,
    /// Times its environment was read without finding an identity, or, for a worker with its
    /// parent's identity, read again (the same, or none) after [`START_RECHECK_US`]
    /// ([`Processes::copy_unsettled`]).
    looks: u8,
    /// When it was first seen: a child whose start method may still change is read again for
    /// [`START_RECHECK_US`] from then, and [`MIN_START_LOOKS`] polls after that.
    seen_us: u64,
    /// Its start method may still change: it read as forked (its parent's command line), or its
    /// command line read empty (in its exec).
    start_open: bool,
    /// Times its start method was read again after [`START_RECHECK_US`] had passed since it
    /// was first seen ([`MIN_START_LOOKS`]).
    start_looks: u8,
}

/// How long a child whose command line is its parent's is read again: `multiprocessing`'s
/// spawn forks, then execs a new interpreter with `spawn_main` on its command line; the tree
/// walk can see it in between (on a loaded machine, for some milliseconds).
const START_RECHECK_US: u64 = 2_000_000;

/// ...and this many polls after that, however late they come: on a loaded machine the polls
/// within the moment can all come before the exec (a changed tree wakes the poller every few
/// milliseconds while it settles), and the next a second later, after the moment. A spawned
/// worker read as forked tells its own memory as copies of its parent's (the zoo's
/// `spawn_workers.py` in CI).
const MIN_START_LOOKS: u8 = 3;

/// How many polls a process without an identity is read again: a launcher's child seen between
/// its fork and its exec has its identity a moment later; a helper without one never will.
const MAX_LOOKS: u8 = 10;

/// The registry of the tree's processes.
#[derive(Debug)]
pub struct Processes {
    root: u32,
    known: HashMap<u32, Known>,
    /// Bumped whenever the set of ranks changes (the sampler re-reads [`Processes::ranks`]).
    pub generation: u64,
}

impl Processes {
    /// A registry for the tree below `root` (the program).
    pub fn new(root: u32) -> Processes {
        Processes {
            root,
            known: HashMap::new(),
            generation: 0,
        }
    }

    /// Takes the tree as the poller found it: reads the processes not seen before and returns
    /// the records to write (new or changed identities; ranks that left).
    pub fn observe_tree(&mut self, tree: &[u32], t_us: u64) -> Vec<Record> {
        let mut records = Vec::new();
        for pid in tree {
            if let Some(k) = self.known.get_mut(pid)
                && Self::start_unsettled(k, t_us)
                && let Some(parent) = k.info.parent_pid
            {
                if t_us >= k.seen_us.saturating_add(START_RECHECK_US) {
                    k.start_looks = k.start_looks.saturating_add(1);
                }
                let cmdline = cmdline_of(*pid);
                let start = start_method(&cmdline, &cmdline_of(parent));
                // A spawned or fork-server child read in its fork (its parent's command line) or
                // in its exec (none yet) is read as what it became; never the other way.
                let better = match k.info.start {
                    StartMethod::Unknown => start != StartMethod::Unknown,
                    StartMethod::Fork => {
                        matches!(start, StartMethod::Spawn | StartMethod::Forkserver)
                    }
                    StartMethod::Spawn | StartMethod::Forkserver => false,
                };
                k.start_open = match start {
                    StartMethod::Fork => true,
                    StartMethod::Unknown => cmdline.is_empty(),
                    StartMethod::Spawn | StartMethod::Forkserver => false,
                };
                if better {
                    k.info.start = start;
                    k.info.t_us = t_us;
                    records.push(Record::Process(k.info.clone()));
                }
            }
            let known = self.known.get_mut(pid);
            // A process seen between a launcher's fork and its exec is a copy of the agent: with
            // no rank in its environment yet, or with the agent's own (torchrun in a Slurm step
            // has the step's rank), which made it look like the agent's worker. It is read again
            // until it has an identity of its own, or for a moment after it was first seen and a
            // few polls after that ([`Processes::copy_unsettled`]).
            let read_again = known.as_ref().is_none_or(|k| {
                Self::unidentified(k, *pid, self.root) || Self::copy_unsettled(k, t_us)
            });
            if let Some(k) = known {
                k.in_tree = true;
            }
            if !read_again {
                continue;
            }
            let env = Identity::from_environ(&environ_of(*pid));
            if let Some(k) = self.known.get_mut(pid) {
                if env == Identity::default() {
                    k.looks = k.looks.saturating_add(1);
                    continue;
                }
                if env == k.env {
                    // A copy's looks count after the moment, as a start method's do.
                    if t_us >= k.seen_us.saturating_add(START_RECHECK_US) {
                        k.looks = k.looks.saturating_add(1);
                    }
                    continue;
                }
                // Its exec gave it an identity of its own: it is read as new.
                self.known.remove(pid);
            }
            self.read_in(*pid, env, true, t_us, &mut records);
        }
        // Processes that left the tree are forgotten (a reused pid reads as a new process); a
        // rank's end is written.
        let left: Vec<u32> = self
            .known
            .iter()
            .filter(|(pid, k)| k.in_tree && **pid != self.root && !tree.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in left {
            let Some(k) = self.known.remove(&pid) else {
                continue;
            };
            if k.info.role == ProcessRole::Rank {
                records.push(Record::ProcessEnd(ProcessEnd {
                    t_us,
                    pid,
                    rank: k.info.rank,
                    local_rank: k.info.local_rank,
                    ..ProcessEnd::default()
                }));
                self.generation += 1;
            }
        }
        records
    }

    /// A process first seen (or seen again with an identity of its own after its exec), with
    /// the identity its environment gave it: its parent, command line, start method and name
    /// read, its role found, and its PROCESS record written.
    fn read_in(
        &mut self,
        pid: u32,
        env: Identity,
        in_tree: bool,
        t_us: u64,
        records: &mut Vec<Record>,
    ) {
        let parent = if pid == self.root {
            None
        } else {
            parent_of(pid)
        };
        let cmdline = cmdline_of(pid);
        let start = parent.map_or(StartMethod::Unknown, |p| {
            start_method(&cmdline, &cmdline_of(p))
        });
        let start_open = parent.is_some() && (start == StartMethod::Fork || cmdline.is_empty());
        let info = ProcessInfo {
            t_us,
            pid,
            parent_pid: parent,
            name: name_of(pid).into(),
            start,
            ..ProcessInfo::default()
        };
        self.insert(info, env, in_tree, records);
        if let Some(k) = self.known.get_mut(&pid) {
            k.start_open = start_open;
        }
    }

    /// A process said who it is (a `process` message, or a mark or OOM with `rank=`): its word
    /// outranks its environment. Returns the record to write when this changes what is known.
    pub fn said(&mut self, pid: u32, said: &ProcessInfo, t_us: u64) -> Vec<Record> {
        let mut records = Vec::new();
        // A copy of its parent not settled yet (a launcher's child read before its exec) is read
        // again before its word is weighed: a rank's own `rank=` is no worker's echo, and what
        // it says (its group) is not lost to a later poll reading it anew.
        if let Some(k) = self.known.get(&pid)
            && Self::copy_unsettled(k, t_us)
        {
            let env = Identity::from_environ(&environ_of(pid));
            if env != Identity::default() && env != k.env {
                let in_tree = k.in_tree;
                self.known.remove(&pid);
                self.read_in(pid, env, in_tree, t_us, &mut records);
            }
        }
        if !self.known.contains_key(&pid) {
            let info = ProcessInfo {
                t_us,
                pid,
                parent_pid: (pid != self.root).then(|| parent_of(pid)).flatten(),
                name: name_of(pid).into(),
                ..ProcessInfo::default()
            };
            let env = Identity::from_environ(&environ_of(pid));
            self.insert(info, env, false, &mut records);
        }
        let Some(known) = self.known.get_mut(&pid) else {
            return records;
        };
        let mut info = known.info.clone();
        // A worker repeating its rank's word (a forked DataLoader worker flushing what its parent
        // had queued) stays a worker.
        let workers_echo = info.role == ProcessRole::Worker && said.rank == info.rank;
        if said.rank.is_some() && !workers_echo {
            info.rank = said.rank;
            info.rank_from = RankSource::Message;
            // The program keeps its role (a program with a rank, or the launcher).
            if pid != self.root {
                info.role = ProcessRole::Rank;
            }
        }
        info.local_rank = said.local_rank.or(info.local_rank);
        info.world_size = said.world_size.or(info.world_size);
        info.restart = said.restart.or(info.restart);
        info.group = said.group.clone().or(info.group);
        if info != known.info {
            info.t_us = t_us;
            known.info = info.clone();
            self.generation += 1;
            records.push(Record::Process(info));
            self.root_becomes_launcher(t_us, &mut records);
        }
        records
    }

    /// The rank of a process, when it has one (a rank, or the program itself when it has a rank
    /// and no ranks run below it).
    pub fn rank_of(&self, pid: u32) -> Option<u32> {
        let info = &self.known.get(&pid)?.info;
        matches!(info.role, ProcessRole::Rank | ProcessRole::Program)
            .then_some(info.rank)
            .flatten()
    }

    /// The rank processes now: (pid, rank).
    pub fn ranks(&self) -> Vec<(u32, u32)> {
        let mut ranks: Vec<(u32, u32)> = self
            .known
            .values()
            .filter(|k| k.info.role == ProcessRole::Rank)
            .filter_map(|k| Some((k.info.pid, k.info.rank?)))
            .collect();
        ranks.sort_unstable_by_key(|(pid, rank)| (*rank, *pid));
        ranks
    }

    fn insert(
        &mut self,
        mut info: ProcessInfo,
        env: Identity,
        in_tree: bool,
        records: &mut Vec<Record>,
    ) {
        let parent = info.parent_pid.and_then(|p| self.known.get(&p));
        info.role = role(
            info.pid == self.root,
            &env,
            parent.map(|p| (&p.env, p.info.role)),
        );
        if matches!(info.role, ProcessRole::Rank | ProcessRole::Program) && env.rank.is_some() {
            info.rank = env.rank;
            info.rank_from = RankSource::Environment;
        }
        if info.role == ProcessRole::Worker {
            // A worker belongs to its parent's rank.
            info.rank = parent.and_then(|p| p.info.rank);
            info.rank_from = parent.map_or(RankSource::None, |p| p.info.rank_from);
        }
        info.local_rank = env.local_rank;
        info.world_size = env.world_size;
        info.restart = env.restart;
        let is_rank = info.role == ProcessRole::Rank;
        let t_us = info.t_us;
        self.known.insert(
            info.pid,
            Known {
                seen_us: info.t_us,
                start_open: false,
                start_looks: 0,
                info: info.clone(),
                env,
                in_tree,
                looks: 0,
            },
        );
        records.push(Record::Process(info));
        if is_rank {
            self.generation += 1;
            self.root_becomes_launcher(t_us, records);
        }
    }

    /// A process of the tree whose environment named no rank yet, to be read again (not the
    /// program, not one that said its rank itself, at most [`MAX_LOOKS`] times).
    fn unidentified(k: &Known, pid: u32, root: u32) -> bool {
        k.env == Identity::default()
            && pid != root
            && k.info.rank_from != RankSource::Message
            && k.looks < MAX_LOOKS
    }

    /// A worker with an identity in its environment (its parent's: a worker's identity is its
    /// rank parent's), first seen [`START_RECHECK_US`] ago at most, or read again fewer than
    /// [`MIN_START_LOOKS`] times after that: a forked DataLoader worker, or a launcher's child
    /// read before its exec, whatever its command line read (the exec can land between the reads
    /// of its environment and of its command line; on a loaded machine the polls of the moment
    /// can all come before the exec). Read again, see [`Processes::observe_tree`] and
    /// [`Processes::said`]: torchrun's rank 0 under Slurm, its environment read as the agent's
    /// (the step's rank 0) and its command line as its own, stayed the agent's worker, and its
    /// own `rank=0` was then taken for a worker's echo (the Slurm test, under load). Not a
    /// worker whose rank came from its rank parent's message: its environment names none of its
    /// own to find.
    fn copy_unsettled(k: &Known, now_us: u64) -> bool {
        k.info.role == ProcessRole::Worker
            && k.env != Identity::default()
            && k.info.rank_from != RankSource::Message
            && (now_us < k.seen_us.saturating_add(START_RECHECK_US) || k.looks < MIN_START_LOOKS)
    }

    /// A child whose start method may still change ([`Known::start_open`]), first seen
    /// [`START_RECHECK_US`] ago at most, or read again fewer than [`MIN_START_LOOKS`] times
    /// after that.
    fn start_unsettled(k: &Known, now_us: u64) -> bool {
        k.start_open
            && (now_us < k.seen_us.saturating_add(START_RECHECK_US)
                || k.start_looks < MIN_START_LOOKS)
    }

    /// Whether the next poll should read the tree's processes again even if the tree is the
    /// same: some are still without an identity (the poller otherwise reads only when the tree
    /// changes, and a rank seen before its exec would stay unknown until the next birth), may
    /// still turn out spawned (see [`START_RECHECK_US`], [`MIN_START_LOOKS`]), or may still be a
    /// launcher's child before its exec ([`Processes::copy_unsettled`]).
    pub fn wants_another_look(&self, now_us: u64) -> bool {
        self.known.iter().any(|(pid, k)| {
            k.in_tree
                && (Self::unidentified(k, *pid, self.root)
                    || Self::start_unsettled(k, now_us)
                    || Self::copy_unsettled(k, now_us))
        })
    }

    /// The program is a launcher once ranks run below it.
    fn root_becomes_launcher(&mut self, t_us: u64, records: &mut Vec<Record>) {
        let has_ranks = self
            .known
            .values()
            .any(|k| k.info.role == ProcessRole::Rank);
        if let Some(root) = self.known.get_mut(&self.root)
            && has_ranks
            && root.info.role == ProcessRole::Program
            && root.info.rank_from != RankSource::Message
        {
            root.info.role = ProcessRole::Launcher;
            root.info.rank = None;
            root.info.rank_from = RankSource::None;
            root.info.t_us = t_us;
            records.push(Record::Process(root.info.clone()));
        }
    }
}

/// How a child was started, from its command line and its parent's: `multiprocessing`'s spawn
/// runs `spawn_main` in a new interpreter, a fork server's children keep the server's command
/// line, and a forked child keeps its parent's. An empty line (the process is gone) or another
/// program (`exec`) is unknown. A spawned child read in the instant between its fork and its exec
/// would read as forked; Python's spawn execs at once (`_posixsubprocess`, vfork).
fn start_method(cmdline: &[u8], parent: &[u8]) -> StartMethod {
    let has = |needle: &[u8]| cmdline.windows(needle.len()).any(|w| w == needle);
    if cmdline.is_empty() {
        StartMethod::Unknown
    } else if has(b"multiprocessing.spawn") || has(b"spawn_main") {
        StartMethod::Spawn
    } else if has(b"multiprocessing.forkserver") {
        StartMethod::Forkserver
    } else if cmdline == parent {
        StartMethod::Fork
    } else {
        StartMethod::Unknown
    }
}

/// What a process is, from its environment and its parent's.
fn role(is_root: bool, env: &Identity, parent: Option<(&Identity, ProcessRole)>) -> ProcessRole {
    if is_root {
        return ProcessRole::Program;
    }
    let parent_is_rankish = parent.is_some_and(|(penv, prole)| {
        matches!(prole, ProcessRole::Rank | ProcessRole::Worker)
            || (prole == ProcessRole::Program && penv.rank.is_some())
    });
    match (env.rank, parent) {
        // Same identity as a rank parent: its worker (a DataLoader worker inherits `RANK`).
        (Some(_), Some((penv, _))) if penv == env && parent_is_rankish => ProcessRole::Worker,
        // The same environment as a parent that is no rank (a shell, `torchrun` under a pod's
        // `RANK`): not a rank either.
        (Some(_), Some((penv, _))) if penv == env => ProcessRole::Other,
        (Some(_), _) => ProcessRole::Rank,
        (None, _) if parent_is_rankish => ProcessRole::Worker,
        (None, _) => ProcessRole::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(rank: Option<u32>, local: Option<u32>) -> Identity {
        Identity {
            rank,
            local_rank: local,
            world_size: rank.map(|_| 2),
            restart: None,
        }
    }

    #[test]
    fn a_child_s_start_method_is_read_from_its_command_line() {
        let program = b"python\0train.py\0".as_slice();
        // What CPython 3.12 runs for a spawned worker and a fork server.
        let spawned = b"/usr/bin/python3\0-c\0from multiprocessing.spawn import spawn_main; \
            spawn_main(tracker_fd=5, pipe_handle=7)\0--multiprocessing-fork\0";
        let server = b"/usr/bin/python3\0-c\0from multiprocessing.forkserver import main; \
            main(10, 11, ['__main__'], **{'sys_path': []})\0";
        assert_eq!(start_method(program, program), StartMethod::Fork);
        assert_eq!(start_method(spawned, program), StartMethod::Spawn);
        assert_eq!(start_method(server, program), StartMethod::Forkserver);
        assert_eq!(start_method(server, server), StartMethod::Forkserver);
        assert_eq!(start_method(b"nvidia-smi\0", program), StartMethod::Unknown);
        assert_eq!(start_method(b"", program), StartMethod::Unknown);
    }

    #[test]
    fn roles_follow_the_launchers() {
        let none = Identity::default();
        // torchrun's agent (no RANK) starts ranks.
        assert_eq!(
            role(
                false,
                &id(Some(1), Some(1)),
                Some((&none, ProcessRole::Program))
            ),
            ProcessRole::Rank
        );
        // A DataLoader worker of rank 1 inherits its environment.
        assert_eq!(
            role(
                false,
                &id(Some(1), Some(1)),
                Some((&id(Some(1), Some(1)), ProcessRole::Rank))
            ),
            ProcessRole::Worker
        );
        // In a Kubeflow pod the agent has the node's RANK; its workers have their own.
        let pod = Identity {
            rank: Some(1),
            local_rank: None,
            world_size: Some(2),
            restart: None,
        };
        assert_eq!(
            role(
                false,
                &id(Some(1), Some(1)),
                Some((&pod, ProcessRole::Program))
            ),
            ProcessRole::Rank
        );
        // A shell between the program and torchrun shares the program's environment.
        assert_eq!(
            role(false, &pod, Some((&pod, ProcessRole::Launcher))),
            ProcessRole::Other
        );
        // Helpers without any rank below a rank are its workers; elsewhere they are others.
        assert_eq!(
            role(
                false,
                &none,
                Some((&id(Some(0), Some(0)), ProcessRole::Rank))
            ),
            ProcessRole::Worker
        );
        assert_eq!(
            role(false, &none, Some((&none, ProcessRole::Program))),
            ProcessRole::Other
        );
        assert_eq!(role(true, &pod, None), ProcessRole::Program);
    }

    #[test]
    fn the_program_becomes_a_launcher_and_its_word_wins() {
        let me = std::process::id();
        let mut p = Processes::new(me);
        let records = p.observe_tree(&[me], 10);
        assert!(matches!(&records[..], [Record::Process(i)] if i.role == ProcessRole::Program));
        // A process that says its rank is a rank: the program (its parent here) is then the
        // launcher. (This test process stands in for a rank of its own tree.)
        let said = ProcessInfo {
            rank: Some(3),
            world_size: Some(4),
            ..ProcessInfo::default()
        };
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let records = p.said(child.id(), &said, 20);
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        let roles: Vec<(u32, ProcessRole, Option<u32>)> = records
            .iter()
            .filter_map(|r| match r {
                Record::Process(i) => Some((i.pid, i.role, i.rank)),
                _ => None,
            })
            .collect();
        assert!(
            roles.contains(&(child.id(), ProcessRole::Rank, Some(3))),
            "{roles:?}"
        );
        assert!(
            roles.contains(&(me, ProcessRole::Launcher, None)),
            "{roles:?}"
        );
        assert_eq!(p.rank_of(child.id()), Some(3));
        assert_eq!(p.ranks(), vec![(child.id(), 3)]);
        // Saying the same again changes nothing.
        assert!(p.said(child.id(), &said, 30).is_empty());
        // The tree walk finds it, then it leaves the tree: its end is written once.
        assert!(p.observe_tree(&[me, child.id()], 35).is_empty());
        let records = p.observe_tree(&[me], 40);
        assert!(matches!(&records[..], [Record::ProcessEnd(e)] if e.rank == Some(3)));
        assert!(p.observe_tree(&[me], 50).is_empty());
    }

    #[test]
    fn a_process_seen_before_its_exec_is_read_again_until_it_has_its_rank() {
        let me = std::process::id();
        let mut p = Processes::new(me);
        p.observe_tree(&[me], 10);
        // Like torchrun's rank between the agent's fork and its exec: no RANK yet.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "sleep 0.4; exec env RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 sleep 5",
            ])
            .env_remove("RANK")
            .env_remove("LOCAL_RANK")
            .env_remove("WORLD_SIZE")
            .spawn()
            .unwrap();
        let tree = [me, child.id()];
        let first = p.observe_tree(&tree, 20);
        assert!(
            matches!(&first[..], [Record::Process(i)] if i.rank.is_none()),
            "{first:?}"
        );
        assert!(p.wants_another_look(25));
        std::thread::sleep(std::time::Duration::from_millis(900));
        // The same tree, read again: now it is rank 1.
        let again = p.observe_tree(&tree, 30);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            again.iter().any(
                |r| matches!(r, Record::Process(i) if i.pid == child.id() && i.role == ProcessRole::Rank && i.rank == Some(1))
            ),
            "{again:?}"
        );
        assert!(!p.wants_another_look(30));
    }

    #[test]
    fn a_launcher_s_child_with_its_identity_before_its_exec_becomes_a_rank_after_it() {
        // torchrun in a Slurm step has the step's rank; its child, between the fork and the
        // exec, has the same environment and reads as its worker. After the exec it has its own.
        let gate = Gate::new("fork");
        let mut root = agent("({}) & wait", &gate, 1);
        let root_pid = root.id();
        let (tree, child) = subshell_of(root_pid);
        let mut p = Processes::new(root_pid);
        let first = p.observe_tree(&tree, 10);
        assert!(
            first.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.role == ProcessRole::Worker && i.start == StartMethod::Fork)),
            "{first:?}"
        );
        assert!(p.wants_another_look(20));
        gate.open();
        exec_done(child, 4);
        let again = p.observe_tree(&crate::host::process_tree(root_pid), 1_000_000);
        stop(&mut root);
        assert!(
            again.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.role == ProcessRole::Rank && i.rank == Some(1))),
            "{again:?}"
        );
        assert_eq!(p.ranks(), [(child, 1)]);
        // Past the moment, a worker that stays a copy (a DataLoader worker) is not read again.
        assert!(!p.wants_another_look(1_000_000 + START_RECHECK_US + 1));
    }

    #[test]
    fn a_launcher_s_child_read_with_its_identity_and_its_own_command_line_is_read_again_late() {
        // torchrun's rank 0 under Slurm: its environment read before its exec (the agent's,
        // the step's rank 0), its command line already its own (not a fork's: start unknown).
        // On a loaded machine the next poll comes after START_RECHECK_US: it still reads again.
        let gate = Gate::new("exec");
        let mut root = agent("sh -c '{}' & wait", &gate, 0);
        let root_pid = root.id();
        let (_, child) = subshell_of(root_pid);
        // Past the fork: the child runs `sh -c '…'`, a command line of its own.
        let started = std::time::Instant::now();
        while cmdline_of(child) == cmdline_of(root_pid) {
            assert!(started.elapsed().as_secs() < 10, "no exec of {child}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut p = Processes::new(root_pid);
        let first = p.observe_tree(&crate::host::process_tree(root_pid), 10);
        assert!(
            first.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.role == ProcessRole::Worker
                    && i.start == StartMethod::Unknown && i.world_size == Some(2))),
            "{first:?}"
        );
        gate.open();
        exec_done(child, 4);
        let late = 10 + START_RECHECK_US + 1;
        assert!(p.wants_another_look(late));
        let again = p.observe_tree(&crate::host::process_tree(root_pid), late);
        stop(&mut root);
        assert!(
            again.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.role == ProcessRole::Rank && i.rank == Some(0)
                    && i.world_size == Some(4))),
            "{again:?}"
        );
        assert_eq!(p.ranks(), [(child, 0)]);
    }

    #[test]
    fn a_copy_s_own_word_is_weighed_after_its_environment_is_read_again() {
        // The same child, its `rank=0` heard before any poll read it again: it is rank 0 (no
        // worker's echo), and what it said (its group) is kept.
        let gate = Gate::new("said");
        let mut root = agent("({}) & wait", &gate, 0);
        let root_pid = root.id();
        let (tree, child) = subshell_of(root_pid);
        let mut p = Processes::new(root_pid);
        p.observe_tree(&tree, 10);
        assert_eq!(p.known[&child].info.role, ProcessRole::Worker);
        gate.open();
        exec_done(child, 4);
        let word = ProcessInfo {
            rank: Some(0),
            group: Some("pp0".into()),
            ..ProcessInfo::default()
        };
        p.said(child, &word, 500_000);
        p.observe_tree(&crate::host::process_tree(root_pid), 600_000);
        stop(&mut root);
        let info = &p.known[&child].info;
        assert_eq!(
            (info.role, info.rank, info.group.as_deref()),
            (ProcessRole::Rank, Some(0), Some("pp0"))
        );
    }

    #[test]
    fn a_worker_with_its_parent_s_identity_is_read_again_for_a_few_polls_then_left() {
        // A forked DataLoader worker of a rank: a copy for good.
        let mut root = std::process::Command::new("sh")
            .args(["-c", "(sleep 5; true) & wait"])
            .env("RANK", "1")
            .env("LOCAL_RANK", "1")
            .env("WORLD_SIZE", "2")
            .spawn()
            .unwrap();
        let root_pid = root.id();
        let (tree, child) = subshell_of(root_pid);
        let mut p = Processes::new(root_pid);
        p.observe_tree(&tree, 10);
        assert_eq!(p.known[&child].info.role, ProcessRole::Worker);
        for t_us in (20..START_RECHECK_US).step_by(100_000) {
            p.observe_tree(&tree, t_us);
        }
        assert_eq!(p.known[&child].looks, 0, "polls within the moment");
        let late = 10 + START_RECHECK_US + 1;
        for _ in 0..8 {
            p.observe_tree(&tree, late);
        }
        let k = &p.known[&child];
        assert_eq!(
            (k.info.role, k.looks),
            (ProcessRole::Worker, MIN_START_LOOKS)
        );
        assert!(!Processes::copy_unsettled(k, late));
        // Its start method was settled by the same polls: nothing more to look at.
        assert!(!p.wants_another_look(late));
        stop(&mut root);
    }

    /// A file that does not exist yet, for a shell to wait on: the test, not a sleep a loaded
    /// machine stretches, decides when the process goes on (to its exec).
    struct Gate(std::path::PathBuf);

    impl Gate {
        fn new(name: &str) -> Gate {
            let path =
                std::env::temp_dir().join(format!("oomscope-gate-{}-{name}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            Gate(path)
        }

        /// Shell words that wait for the gate, then run `command`.
        fn then(&self, command: &str) -> String {
            format!(
                "until [ -e {} ]; do sleep 0.02; done; {command}",
                self.0.display()
            )
        }

        fn open(&self) {
            std::fs::write(&self.0, b"").unwrap();
        }
    }

    impl Drop for Gate {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// An agent in a Slurm step (the step's rank 0 of 2): `sh -c SHAPE`, `{}` in `SHAPE` the
    /// words of its child, which waits on `gate`, then execs with an identity of its own (rank
    /// `rank` of 4). `({}) & wait` forks the child; `sh -c '{}' & wait` execs a shell first.
    fn agent(shape: &str, gate: &Gate, rank: u32) -> std::process::Child {
        let child = gate.then(&format!(
            "exec env RANK={rank} LOCAL_RANK={rank} WORLD_SIZE=4 sleep 5"
        ));
        std::process::Command::new("sh")
            .args(["-c", &shape.replace("{}", &child)])
            .env("RANK", "0")
            .env("LOCAL_RANK", "0")
            .env("WORLD_SIZE", "2")
            .spawn()
            .unwrap()
    }

    /// Waits (10 s at most) until `pid`'s environment says `world_size`: its exec is done.
    fn exec_done(pid: u32, world_size: u32) {
        let started = std::time::Instant::now();
        while Identity::from_environ(&environ_of(pid)).world_size != Some(world_size) {
            assert!(started.elapsed().as_secs() < 10, "no exec of {pid}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Ends `sh -c '(…) & wait'` and what it started.
    fn stop(root: &mut std::process::Child) {
        let _ = std::process::Command::new("pkill")
            .args(["-P", &root.id().to_string()])
            .status();
        let _ = root.kill();
        let _ = root.wait();
    }

    /// The tree below `root_pid` and the root's child: the subshell of `sh -c '(…) & wait'`
    /// (what the subshell runs, its `sleep`, is the subshell's child).
    fn subshell_of(root_pid: u32) -> (Vec<u32>, u32) {
        let started = std::time::Instant::now();
        loop {
            let tree = crate::host::process_tree(root_pid);
            let child = tree
                .iter()
                .copied()
                .find(|pid| *pid != root_pid && parent_of(*pid) == Some(root_pid));
            if let Some(child) = child {
                return (tree, child);
            }
            assert!(started.elapsed().as_secs() < 5, "no child in {tree:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_spawned_child_first_read_in_its_fork_is_read_as_spawned_by_a_late_poll() {
        // multiprocessing's spawn forks, then execs `spawn_main`; the tree walk saw the fork. On
        // a loaded machine the next poll can come after START_RECHECK_US: it still reads again.
        // (`spawn_""main`: the root's own command line must not say it; `sleep 5; true`: a
        // shell that execs a lone command, as bash does, would leave `sleep 5` as the line.)
        let mut root = std::process::Command::new("sh")
            .args([
                "-c",
                "(sleep 1; exec sh -c 'sleep 5; true' spawn_\"\"main) & wait",
            ])
            .spawn()
            .unwrap();
        let root_pid = root.id();
        let (tree, child) = subshell_of(root_pid);
        let mut p = Processes::new(root_pid);
        let first = p.observe_tree(&tree, 10);
        assert!(
            first.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.start == StartMethod::Fork)),
            "{first:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        let late = 10 + START_RECHECK_US + 1;
        assert!(p.wants_another_look(late));
        let again = p.observe_tree(&crate::host::process_tree(root_pid), late);
        stop(&mut root);
        assert!(
            again.iter().any(|r| matches!(r, Record::Process(i)
                if i.pid == child && i.start == StartMethod::Spawn)),
            "{again:?}"
        );
        // Spawned is final: its start is not read again.
        assert!(!Processes::start_unsettled(&p.known[&child], late));
    }

    #[test]
    fn a_child_read_as_forked_is_read_again_for_a_few_polls_then_left() {
        let mut root = std::process::Command::new("sh")
            .args(["-c", "(sleep 5; true) & wait"])
            .spawn()
            .unwrap();
        let root_pid = root.id();
        let (tree, child) = subshell_of(root_pid);
        let mut p = Processes::new(root_pid);
        p.observe_tree(&tree, 10);
        // Polls within the moment (a settling tree wakes the poller every few ms) do not count.
        for t_us in (20..START_RECHECK_US).step_by(100_000) {
            p.observe_tree(&tree, t_us);
        }
        assert_eq!(p.known[&child].start_looks, 0);
        let late = 10 + START_RECHECK_US + 1;
        for _ in 0..8 {
            p.observe_tree(&tree, late);
        }
        stop(&mut root);
        let k = &p.known[&child];
        assert_eq!(k.info.start, StartMethod::Fork);
        assert_eq!(k.start_looks, MIN_START_LOOKS);
        assert!(!Processes::start_unsettled(k, late));
    }
}
