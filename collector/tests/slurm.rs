//! The collector under a real Slurm cluster (support/slurm.rs: `slurmctld` and fake nodes on this
//! host, from Debian's packages): the recipes of docs/distributed.md with real PyTorch DDP (gloo,
//! CPU). Each asserts that every rank and node is named right, that the job's traces are read
//! together (`collector summary runs/JOB/`), and nothing is counted twice. Skipped (and said)
//! where there can be no cluster (not root, no packages), unless `OOMSCOPE_REQUIRE_SLURM` is set,
//! as scripts/test.sh does.

#[path = "support/slurm.rs"]
mod slurm;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use oomscope_format::{ProcessRole, Trace};
use slurm::Cluster;
use support::{COLLECTOR, python_path, read, torch_program, torch_python};

/// A cluster of `nodes` nodes, or `None` (the test skips) where there can be none.
fn cluster(name: &str, nodes: usize) -> Option<Cluster> {
    if let Some(why) = slurm::unavailable() {
        slurm::skip(&why);
        return None;
    }
    Some(Cluster::start(name, nodes).unwrap_or_else(|e| panic!("{e}")))
}

/// What every Slurm command of these tests runs with: the Python helper importable, no GPU
/// library, one OpenMP thread, and torch's rendezvous on this host.
fn with_env(cmd: &mut std::process::Command, dir: &Path) {
    cmd.current_dir(dir)
        .env("PYTHONPATH", python_path())
        .env("PYTHONUNBUFFERED", "1")
        .env("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env("OMP_NUM_THREADS", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", slurm::free_port().to_string());
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The one job directory under `runs/` and its traces' file names, sorted.
fn job_traces(dir: &Path) -> (PathBuf, Vec<String>) {
    let jobs: Vec<PathBuf> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let mut names: Vec<String> = std::fs::read_dir(&jobs[0])
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (jobs[0].clone(), names)
}

/// The ranks a trace's PROCESS records name (their latest record per pid: the ranks a launcher
/// started, or the program itself when it is one), and who the launcher is, if any.
fn ranks_of(t: &Trace) -> (BTreeSet<u32>, Vec<u32>) {
    let mut latest: Vec<(u32, ProcessRole, Option<u32>)> = Vec::new();
    for p in &t.processes {
        latest.retain(|(pid, _, _)| *pid != p.pid);
        latest.push((p.pid, p.role, p.rank));
    }
    let ranks = latest
        .iter()
        .filter(|p| matches!(p.1, ProcessRole::Rank | ProcessRole::Program))
        .filter_map(|p| p.2)
        .collect();
    let launchers = latest
        .iter()
        .filter(|p| p.1 == ProcessRole::Launcher)
        .map(|p| p.0)
        .collect();
    (ranks, launchers)
}

/// `collector summary runs/JOB/`: the whole job, read together.
fn job_summary(job: &Path) -> String {
    let out = support::run(&["summary", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Submits a batch script of `body` (bash) with `args` (the allocation) and waits for it; the
/// job's output. `collector` and the test environment's Python tools come first on PATH, so a
/// recipe runs as the docs write it.
fn sbatch(c: &Cluster, args: &[&str], body: &str) -> String {
    let script = c.dir().join("job.sh");
    std::fs::write(&script, format!("#!/bin/bash\nset -e\n{body}")).unwrap();
    let mut sbatch = c.command("sbatch");
    sbatch
        .arg("--wait")
        .args(args)
        .args(["-o", "job.out"])
        .arg(&script)
        .env("PATH", recipe_path());
    with_env(&mut sbatch, c.dir());
    let out = sbatch.output().unwrap();
    let log = std::fs::read_to_string(c.dir().join("job.out")).unwrap_or_default();
    assert!(out.status.success(), "{}\n{log}\n{}", text(&out), c.logs());
    log
}

#[test]
fn srun_one_task_per_rank_on_two_nodes_names_every_rank_and_node() {
    let Some(c) = cluster("srun-ranks", 2) else {
        return;
    };
    // docs/distributed.md's recipe as written, in a batch script given two nodes of two tasks;
    // the test's DDP program as train.py (it reads its rank from Slurm in an srun step).
    let recipe = docs_recipe("Slurm, one task per GPU (each task its own trace)");
    assert!(recipe.contains("python train.py"), "{recipe}");
    let filled = recipe.replace(
        "train.py",
        &format!("{} --steps 6", torch_program("ddp.py")),
    );
    let log = sbatch(&c, &["-N2", "--ntasks-per-node=2"], &filled);
    let (job, names) = job_traces(c.dir());
    assert_eq!(
        names,
        ["n1-0.oomt", "n1-1.oomt", "n2-2.oomt", "n2-3.oomt"],
        "{log}"
    );
    for name in &names {
        let t = read(&job.join(name)).trace;
        let rank: u32 = name[3..4].parse().unwrap();
        // The task's python is the rank (its environment: Slurm's PROCID inside the srun step),
        // one rank per trace; every mark is that rank's.
        let (ranks, _) = ranks_of(&t);
        assert_eq!(ranks, BTreeSet::from([rank]), "{name}: {:?}", t.processes);
        assert!(!t.marks.is_empty(), "{name}");
        assert!(t.marks.iter().all(|m| m.rank == Some(rank)), "{name}");
    }
    // Read together: four traces, four ranks, each once.
    let summary = job_summary(&job);
    assert!(summary.contains("4 traces, 4 ranks"), "{summary}");
    assert!(summary.contains("Ranks (4)"), "{summary}");
    for rank in 0..4 {
        assert_eq!(
            summary.matches(&format!("  rank {rank}:")).count(),
            1,
            "{summary}"
        );
    }
}

#[test]
fn sbatch_torchrun_under_the_collector_takes_the_agent_for_the_launcher() {
    let Some(c) = cluster("sbatch-torchrun", 1) else {
        return;
    };
    // In an sbatch script's batch step Slurm says SLURM_PROCID=0 with no step: torchrun's agent
    // and every process it starts there see it. The ranks are torchrun's (RANK), the agent none.
    let body = format!(
        "{COLLECTOR} run -q -o 'runs/{{job}}/{{node}}.oomt' -- {python} -m torch.distributed.run \
         --standalone --nproc-per-node 2 {program} --steps 4\n\
         {COLLECTOR} run -q -o 'runs/{{job}}-{{rank}}.oomt' -- true 2> rank-in-batch.txt || true\n",
        python = torch_python().display(),
        program = torch_program("ddp.py"),
    );
    let log = sbatch(&c, &["-N1", "-n1"], &body);
    let (job, names) = job_traces(c.dir());
    assert_eq!(names, ["n1.oomt"], "{log}");
    let t = read(&job.join("n1.oomt")).trace;
    let (ranks, launchers) = ranks_of(&t);
    assert_eq!(ranks, BTreeSet::from([0, 1]), "{:?}", t.processes);
    assert_eq!(launchers, [t.metadata.pid], "{:?}", t.processes);
    // `{rank}` in the batch step is nobody's: one error line, not a file named after PROCID 0.
    let said = std::fs::read_to_string(c.dir().join("rank-in-batch.txt")).unwrap();
    assert!(
        said.contains("{rank}") && said.contains("in an srun step"),
        "{said}"
    );
    let summary = job_summary(&job);
    assert!(summary.contains("Ranks (2)"), "{summary}");
}

/// A recipe of docs/distributed.md's code block, as written: the lines from its `# TITLE`
/// comment to the next comment.
fn docs_recipe(title: &str) -> String {
    let docs = std::fs::read_to_string(format!(
        "{}/../docs/distributed.md",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let start = docs
        .find(&format!("# {title}\n"))
        .unwrap_or_else(|| panic!("docs/distributed.md has no recipe `# {title}`"));
    docs[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// PATH with `collector` and the test environment's Python tools (`torchrun`) first, so a
/// recipe runs as the docs write it.
fn recipe_path() -> String {
    let collector_dir = Path::new(COLLECTOR).parent().unwrap();
    let venv_bin = torch_python().parent().unwrap().to_owned();
    format!(
        "{}:{}:{}",
        collector_dir.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn the_docs_recipe_of_one_task_per_node_wrapping_torchrun_runs_as_written() {
    let Some(c) = cluster("docs-torchrun", 2) else {
        return;
    };
    // Filled in: 2 processes a node (the docs' 8 are a GPU node's), the test's DDP program as
    // train.py, a free port for the rendezvous.
    let recipe = docs_recipe("Slurm, one task per node wrapping torchrun");
    assert!(
        recipe.contains("--nproc-per-node 8") && recipe.contains("train.py"),
        "{recipe}"
    );
    let port = slurm::free_port().to_string();
    let filled = recipe
        .replace("--nproc-per-node 8", "--nproc-per-node 2")
        .replace(":29500", &format!(":{port}"))
        .replace(
            "train.py",
            &format!("{} --steps 4", torch_program("ddp.py")),
        );
    let log = sbatch(&c, &["-N2", "--ntasks-per-node=1"], &filled);
    let (job, names) = job_traces(c.dir());
    assert_eq!(names, ["n1.oomt", "n2.oomt"], "{log}");
    // One trace per node, torchrun's agent its launcher, two ranks each, four in all.
    let mut all = BTreeSet::new();
    for name in &names {
        let t = read(&job.join(name)).trace;
        let (ranks, launchers) = ranks_of(&t);
        assert_eq!(ranks.len(), 2, "{name}: {:?}", t.processes);
        assert_eq!(launchers, [t.metadata.pid], "{name}: {:?}", t.processes);
        all.extend(ranks);
    }
    assert_eq!(all, BTreeSet::from([0, 1, 2, 3]));
    let summary = job_summary(&job);
    assert!(summary.contains("2 traces, 4 ranks"), "{summary}");
}

/// A memory cgroup of `limit_bytes` under this process's own (cgroup v1, or v2 with the memory
/// controller delegated), removed on drop; `Err` says why there is none.
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn new(name: &str, limit_bytes: u64) -> Result<MemoryCgroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let entries: Vec<Vec<&str>> = own.lines().map(|l| l.splitn(3, ':').collect()).collect();
        let v1 = entries
            .iter()
            .find(|e| e.len() == 3 && e[1].split(',').any(|c| c == "memory"));
        let (parent, limit_file) = match v1 {
            Some(e) => (
                format!("/sys/fs/cgroup/memory{}", e[2]),
                "memory.limit_in_bytes",
            ),
            None => {
                let path = entries
                    .iter()
                    .find(|e| e.len() == 3 && e[1].is_empty())
                    .map(|e| e[2])
                    .ok_or("no cgroup")?;
                let parent = format!("/sys/fs/cgroup{path}");
                let control = std::fs::read_to_string(format!("{parent}/cgroup.subtree_control"))
                    .unwrap_or_default();
                if !control.split_whitespace().any(|c| c == "memory") {
                    return Err("no memory controller this process can write".to_owned());
                }
                (parent, "memory.max")
            }
        };
        let dir = PathBuf::from(format!(
            "{}/oomscope-slurm-{name}-{}",
            parent.trim_end_matches('/'),
            std::process::id()
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join(limit_file), limit_bytes.to_string()).map_err(|e| e.to_string())?;
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        Ok(MemoryCgroup(dir))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

#[test]
fn a_rank_killed_for_memory_under_srun_is_named_first() {
    let Some(c) = cluster("oom-kill", 1) else {
        return;
    };
    // Rank 1's task runs in a memory cgroup of 1.2 GiB (its collector too, as a wrapped command
    // is) and keeps 1 GiB more from its first step on: the kernel's OOM killer ends it.
    let cgroup = match MemoryCgroup::new("oom-kill", 1200 << 20) {
        Ok(cg) => cg,
        Err(why) => {
            slurm::skip(&format!("no memory cgroup: {why}"));
            return;
        }
    };
    let join = format!(
        "if [ \"$SLURM_PROCID\" = 1 ]; then echo $$ > {}/cgroup.procs; fi; exec \"$@\"",
        cgroup.0.display()
    );
    let mut srun = c.command("srun");
    srun.args([
        "-N1", "-n2", "sh", "-c", &join, "sh", COLLECTOR, "run", "-q", "-o",
    ])
    .arg("runs/{job}/{node}-{rank}.oomt")
    .arg("--")
    .arg(torch_python())
    .args([
        &torch_program("ddp.py"),
        "--steps",
        "40",
        "--hold-rank",
        "1",
        "--hold-mib",
        "1024",
    ]);
    with_env(&mut srun, c.dir());
    let out = srun.output().unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    // srun's own words for the task the kernel ended (the collector exits as its program did:
    // 128 + SIGKILL), and the other's, which gloo's broken ring ended.
    assert!(
        text(&out).contains("task 1: Exited with exit code 137"),
        "{}",
        text(&out)
    );
    let (job, names) = job_traces(c.dir());
    assert_eq!(names, ["n1-0.oomt", "n1-1.oomt"], "{}", text(&out));
    let killed = read(&job.join("n1-1.oomt")).trace;
    let exit = killed.exit.expect("the collector saw its program end");
    assert!(
        matches!(exit.status, oomscope_format::ExitStatus::Signal(9)),
        "{exit:?}"
    );
    let summary = job_summary(&job);
    assert!(summary.contains("Rank 1 failed first"), "{summary}");
    assert!(summary.contains("2 traces, 2 ranks"), "{summary}");
}
