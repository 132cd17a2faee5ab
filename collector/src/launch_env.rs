//! What the launchers of distributed training put in a process's environment, read one way for
//! every layer: the collector reads it from `/proc/PID/environ` (who is a rank) and from its own
//! environment (output path templates), the Python helper and the Rust `Probe` from theirs.
//!
//! Why here and as lists: torchrun, Slurm, Open MPI, MPICH/PMI and Kubeflow each name the same
//! facts differently (`RANK`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`), and each list's
//! order is which name wins when several are set: torchrun's `RANK` first, because under
//! `srun … torchrun` the Slurm variables name the node's task, not the worker. Sources:
//! PyTorch's `torch/distributed/run.py` (the worker environment), srun(1) ("OUTPUT ENVIRONMENT
//! VARIABLES"), Open MPI's `mpirun(1)`, and `pkg/controller.v1/pytorch/envvar.go` of
//! github.com/kubeflow/training-operator.

/// Global rank, in order of precedence.
pub const RANK_VARS: [&str; 5] = [
    "RANK",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
];
/// Rank within the node.
pub const LOCAL_RANK_VARS: [&str; 4] = [
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
];
/// Number of ranks in the job.
pub const WORLD_SIZE_VARS: [&str; 4] = [
    "WORLD_SIZE",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
];
/// Which attempt of a job that restarts (torchrun's elastic restarts, Slurm's requeue).
pub const ATTEMPT_VARS: [&str; 2] = ["TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"];
/// The job's identity: Slurm's job id, torchrun's rendezvous id, Kubeflow's rendezvous id.
pub const JOB_VARS: [&str; 4] = [
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PET_RDZV_ID",
    "JOB_ID",
];
/// The node's index in the job.
pub const NODE_RANK_VARS: [&str; 4] = ["SLURM_NODEID", "GROUP_RANK", "PET_NODE_RANK", "NODE_RANK"];
/// The node's name (else the host name).
pub const NODE_NAME_VARS: [&str; 1] = ["SLURMD_NODENAME"];
/// Slurm's task variables, which describe a task only inside an `srun` step (`SLURM_STEP_ID`
/// set): in an `sbatch` script's batch step Slurm sets `SLURM_PROCID=0` (and the job's
/// `SLURM_NTASKS`) with no step, so every process a launcher starts there would read as rank 0
/// (measured on Slurm 22.05). There they are not read.
pub const SLURM_STEP_ONLY_VARS: [&str; 3] = ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"];

/// `lookup` without [`SLURM_STEP_ONLY_VARS`] outside an `srun` step.
fn in_step<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> impl Fn(&str) -> Option<&'a str> {
    let step = lookup("SLURM_STEP_ID").is_some();
    move |name| {
        if !step && SLURM_STEP_ONLY_VARS.contains(&name) {
            return None;
        }
        lookup(name)
    }
}

/// A process's place in a distributed job as its environment states it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identity {
    /// Global rank.
    pub rank: Option<u32>,
    /// Rank within the node.
    pub local_rank: Option<u32>,
    /// Number of ranks.
    pub world_size: Option<u32>,
    /// Attempt (restart count).
    pub restart: Option<u32>,
}

impl Identity {
    /// Reads an identity through `lookup` (a variable's value, when set).
    pub fn from_lookup<'a>(lookup: impl Fn(&str) -> Option<&'a str>) -> Identity {
        let lookup = in_step(lookup);
        let number = |vars: &[&str]| {
            vars.iter()
                .find_map(|v| lookup(v).and_then(|s| s.trim().parse().ok()))
        };
        Identity {
            rank: number(&RANK_VARS),
            local_rank: number(&LOCAL_RANK_VARS),
            world_size: number(&WORLD_SIZE_VARS),
            restart: number(&ATTEMPT_VARS),
        }
    }

    /// Reads an identity from the bytes of a `/proc/PID/environ` file (`NAME=value` entries
    /// separated by NUL).
    pub fn from_environ(environ: &[u8]) -> Identity {
        let entries: Vec<(&str, &str)> = environ
            .split(|b| *b == 0)
            .filter_map(|e| std::str::from_utf8(e).ok()?.split_once('='))
            .collect();
        Identity::from_lookup(|name| entries.iter().find(|(k, _)| *k == name).map(|(_, v)| *v))
    }
}

/// The first of `vars` that is set (and not empty), through `lookup`.
pub fn first_set<'a>(vars: &[&str], lookup: &impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
    vars.iter()
        .find_map(|v| lookup(v).map(str::trim).filter(|s| !s.is_empty()))
}

/// The placeholders of an output path template, each with where its value comes from.
pub const PLACEHOLDERS: [(&str, &str); 8] = [
    (
        "job",
        "SLURM_JOB_ID, TORCHELASTIC_RUN_ID, PET_RDZV_ID or JOB_ID",
    ),
    ("node", "SLURMD_NODENAME, else the host name"),
    (
        "node_rank",
        "SLURM_NODEID, GROUP_RANK, PET_NODE_RANK or NODE_RANK",
    ),
    (
        "rank",
        "RANK, SLURM_PROCID (in an srun step), OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK",
    ),
    (
        "local_rank",
        "LOCAL_RANK, SLURM_LOCALID (in an srun step), OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID",
    ),
    (
        "attempt",
        "TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT, else 0",
    ),
    ("pid", "the collector's process id"),
    ("host", "the host name"),
];

/// Whether a path holds a template placeholder (`{rank}`, …).
pub fn is_template(path: &str) -> bool {
    PLACEHOLDERS
        .iter()
        .any(|(name, _)| path.contains(&format!("{{{name}}}")))
}

/// Fills an output path template (`runs/{job}/{node}-{rank}.oomt`) from the environment seen
/// through `lookup`, the host name and the pid. A placeholder whose variables are all unset is an
/// error naming them (a file called `runs/-.oomt` would collide with every other rank's), and so
/// is an unknown `{name}`.
pub fn expand_template<'a>(
    template: &str,
    lookup: impl Fn(&str) -> Option<&'a str>,
    host: &str,
    pid: u32,
) -> Result<String, String> {
    let lookup = in_step(lookup);
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let name = &after[..close];
        let value = match name {
            "job" => first_set(&JOB_VARS, &lookup).map(str::to_owned),
            "node" => Some(
                first_set(&NODE_NAME_VARS, &lookup)
                    .unwrap_or(host)
                    .to_owned(),
            ),
            "node_rank" => first_set(&NODE_RANK_VARS, &lookup).map(str::to_owned),
            "rank" => first_set(&RANK_VARS, &lookup).map(str::to_owned),
            "local_rank" => first_set(&LOCAL_RANK_VARS, &lookup).map(str::to_owned),
            "attempt" => Some(first_set(&ATTEMPT_VARS, &lookup).unwrap_or("0").to_owned()),
            "pid" => Some(pid.to_string()),
            "host" => Some(host.to_owned()),
            _ => {
                let known: Vec<String> = PLACEHOLDERS
                    .iter()
                    .map(|(n, _)| format!("{{{n}}}"))
                    .collect();
                return Err(format!(
                    "unknown placeholder {{{name}}} in the output path (known: {})",
                    known.join(", ")
                ));
            }
        };
        let Some(value) = value else {
            let from = PLACEHOLDERS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("", |(_, from)| *from);
            return Err(format!(
                "the output path uses {{{name}}} but none of {from} is set"
            ));
        };
        // A value never adds directories of its own.
        out.push_str(&value.replace('/', "_"));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }

    #[test]
    fn torchrun_variables_win_over_slurm_ones() {
        let id = Identity::from_lookup(env(&[
            ("SLURM_PROCID", "1"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("SLURM_LOCALID", "0"),
            ("WORLD_SIZE", "8"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ]));
        assert_eq!(
            id,
            Identity {
                rank: Some(5),
                local_rank: Some(1),
                world_size: Some(8),
                restart: Some(2),
            }
        );
        let step = [
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
        ];
        let slurm = Identity::from_lookup(env(&step));
        assert_eq!((slurm.rank, slurm.world_size), (Some(3), Some(4)));
        // An sbatch script's batch step: PROCID 0 and the job's task count, but no step. What a
        // launcher starts there is no rank by Slurm's word (torchrun's RANK still counts).
        let batch = [
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "4"),
        ];
        assert_eq!(Identity::from_lookup(env(&batch)), Identity::default());
        let worker = [("SLURM_PROCID", "0"), ("RANK", "5"), ("LOCAL_RANK", "1")];
        assert_eq!(
            Identity::from_lookup(env(&worker)),
            Identity {
                rank: Some(5),
                local_rank: Some(1),
                ..Identity::default()
            }
        );
        assert_eq!(Identity::from_lookup(env(&[("RANK", "x")])).rank, None);
    }

    #[test]
    fn environ_files_are_read() {
        let id =
            Identity::from_environ(b"PATH=/bin\0OMPI_COMM_WORLD_RANK=7\0OMPI_COMM_WORLD_SIZE=16\0");
        assert_eq!((id.rank, id.world_size), (Some(7), Some(16)));
        assert_eq!(Identity::from_environ(b""), Identity::default());
    }

    #[test]
    fn templates_follow_the_launchers() {
        let slurm = [
            ("SLURM_JOB_ID", "4242"),
            ("SLURMD_NODENAME", "gpu-07"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_ID", "0"),
        ];
        assert_eq!(
            expand_template("runs/{job}/{node}-{rank}.oomt", env(&slurm), "h", 9).unwrap(),
            "runs/4242/gpu-07-3.oomt"
        );
        assert_eq!(
            expand_template("{node_rank}.{attempt}.{pid}.{host}", env(&slurm), "h", 9).unwrap(),
            "1.0.9.h"
        );
        let err = expand_template("runs/{rank}.oomt", env(&[]), "h", 1).unwrap_err();
        assert!(
            err.contains("{rank}") && err.contains("SLURM_PROCID"),
            "{err}"
        );
        // In a batch step `{rank}` is nobody's: an error, not every node's file called `-0`.
        let batch = [("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "0")];
        let err = expand_template("runs/{job}/{rank}.oomt", env(&batch), "h", 1).unwrap_err();
        assert!(err.contains("in an srun step"), "{err}");
        assert_eq!(
            expand_template("runs/{job}/{node}.oomt", env(&batch), "h", 1).unwrap(),
            "runs/4242/h.oomt"
        );
        let err = expand_template("runs/{ranks}.oomt", env(&[]), "h", 1).unwrap_err();
        assert!(err.contains("unknown placeholder {ranks}"), "{err}");
        assert!(is_template("a/{node}.oomt") && !is_template("a/b.oomt"));
        assert_eq!(
            expand_template("{job}.oomt", env(&[("JOB_ID", "a/b")]), "h", 1).unwrap(),
            "a_b.oomt"
        );
    }
}
