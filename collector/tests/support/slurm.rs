//! A real Slurm cluster for a test: `munged`, `slurmctld` and one `slurmd` per node (two or more
//! are fake nodes on this host, each `slurmd -N nK` on a port of its own), from Debian's
//! `slurm-wlm` and `munge` (scripts/setup-slurm.sh). Everything it makes lives under one
//! directory in /tmp (not `TMPDIR`, which may be private to root: munged, as the munge user,
//! must reach its socket's directory): the configuration (`SLURM_CONF`, so /etc is never
//! touched), munge's socket and key, spool, pid files and logs; ports are free ones the kernel
//! picks. Dropping it shuts the daemons down and removes the directory (kept when the test
//! failed). No systemd, no cgroups (`proctrack/linuxproc`, `task/none`), so it runs as root in a
//! plain container; `SlurmdParameters=config_overrides` lets a 2-core machine offer each node 4
//! CPUs.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster may take to come up (measured: ~1.3 s from a clean state).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running cluster.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

/// Why there is no cluster here: not root, or the packages are missing. A test then skips,
/// unless `OOMSCOPE_REQUIRE_SLURM` is set (scripts/test.sh sets it: CI installs the packages).
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("slurmd must run as root".to_owned());
    }
    ["munged", "slurmctld", "slurmd", "srun", "sbatch"]
        .iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("{tool} is not installed (scripts/setup-slurm.sh installs it)"))
}

/// Says why a Slurm test skips, or fails it where Slurm is required.
pub fn skip(why: &str) {
    assert!(
        std::env::var_os("OOMSCOPE_REQUIRE_SLURM").is_none(),
        "OOMSCOPE_REQUIRE_SLURM is set but there is no Slurm cluster here: {why}"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!("SKIPPED: {why}");
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
            || Path::new("/usr/sbin").join(tool).is_file()
    })
}

/// A TCP port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn host_name() -> String {
    let out = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl Cluster {
    /// Starts a cluster of `nodes` nodes named `n1`, `n2`, … (each with 4 CPUs), all on this
    /// host; `name` names its scratch directory.
    pub fn start(name: &str, nodes: usize) -> Result<Cluster, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        let dir = PathBuf::from(format!("/tmp/oomscope-slurm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["munge", "spool", "log", "run"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
        }
        // munged runs as the munge user, reads its own copy of the key, and wants every
        // directory above its socket searchable by all.
        let munge = dir.join("munge");
        std::fs::copy("/etc/munge/munge.key", munge.join("key")).map_err(|e| e.to_string())?;
        for path in [dir.as_path(), munge.as_path()] {
            run(Command::new("chmod").arg("755").arg(path))?;
        }
        run(Command::new("chown")
            .arg("-R")
            .arg("munge:munge")
            .arg(&munge))?;
        run(Command::new("chmod").arg("600").arg(munge.join("key")))?;
        let socket = munge.join("sock");
        run(Command::new("setpriv")
            .args(["--reuid=munge", "--regid=munge", "--clear-groups"])
            .arg(which("munged"))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", munge.join("key").display()))
            .arg(format!("--pid-file={}", munge.join("pid").display()))
            .arg(format!("--log-file={}", munge.join("log").display()))
            .arg(format!("--seed-file={}", munge.join("seed").display())))?;

        let host = host_name();
        let names: Vec<String> = (1..=nodes).map(|i| format!("n{i}")).collect();
        let ports: Vec<u16> = (0..=nodes).map(|_| free_port()).collect();
        let node_lines: String = names
            .iter()
            .zip(&ports[1..])
            .map(|(n, port)| {
                format!(
                    "NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=4 \
                     RealMemory=16000 State=UNKNOWN\n"
                )
            })
            .collect();
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=oomscope\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmctldPort={ctld}\n\
                 SlurmUser=root\n\
                 AuthType=auth/munge\n\
                 AuthInfo=socket={socket}\n\
                 CredType=cred/munge\n\
                 StateSaveLocation={d}/spool/ctld\n\
                 SlurmdSpoolDir={d}/spool/%n\n\
                 SlurmctldPidFile={d}/run/slurmctld.pid\n\
                 SlurmdPidFile={d}/run/slurmd-%n.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\n\
                 SlurmdLogFile={d}/log/slurmd-%n.log\n\
                 ProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 SelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\n\
                 MpiDefault=none\n\
                 ReturnToService=2\n\
                 SlurmdParameters=config_overrides\n\
                 {node_lines}\
                 PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                ctld = ports[0],
                socket = socket.display(),
            ),
        )
        .map_err(|e| e.to_string())?;
        let cluster = Cluster {
            dir: dir.clone(),
            conf,
        };
        run(&mut cluster.command(&which("slurmctld")))?;
        for n in &names {
            run(cluster.command(&which("slurmd")).args(["-N", n]))?;
        }
        let started = Instant::now();
        loop {
            let idle = cluster
                .command("sinfo")
                .args(["-h", "-t", "idle", "-o", "%D"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            if idle == nodes.to_string() {
                return Ok(cluster);
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "the cluster did not come up in {START_TIMEOUT:?} (sinfo: {idle:?}); logs:\n{}",
                    cluster.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `program` (srun, sbatch, squeue, …) aimed at this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// The directory the cluster lives in (a test may put its files there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every daemon's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let log = self.dir().join("log");
        for entry in std::fs::read_dir(&log).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            out.push_str(&format!("--- {}\n", entry.path().display()));
            for line in tail.iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("scontrol")
            .arg("shutdown")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // Wait for the daemons to go (their pid files name them), then stop munged.
        let run = self.dir().join("run");
        let pids: Vec<i32> = std::fs::read_dir(&run)
            .into_iter()
            .flatten()
            .flatten()
            .chain(
                std::fs::read_dir(self.dir().join("munge"))
                    .into_iter()
                    .flatten()
                    .flatten(),
            )
            .filter(|e| e.file_name().to_string_lossy().ends_with("pid"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        for pid in pids {
            // SAFETY: kill with signal 0 only asks whether the process exists.
            while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                // munged is not stopped by scontrol: ask it.
                // SAFETY: sends SIGTERM to a daemon this cluster started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            // SAFETY: as above, for one that would not stop.
            if unsafe { libc::kill(pid, 0) } == 0 {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // A failed test's cluster stays for its logs and traces.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The full path of a daemon (they live in /usr/sbin, which a test's PATH may lack).
fn which(tool: &str) -> String {
    let sbin = Path::new("/usr/sbin").join(tool);
    if sbin.is_file() {
        sbin.display().to_string()
    } else {
        tool.to_owned()
    }
}

/// Runs a setup command; its output in the error when it fails.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
