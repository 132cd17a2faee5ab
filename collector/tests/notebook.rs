//! `%load_ext oomscope` in a real Jupyter kernel (ipykernel 7.1, driven headless by
//! jupyter_client, `tests/notebook/drive.py`): the collector attaches to the kernel, each cell run
//! is marked, training steps inside a cell are marked by the zero-code hooks installed after
//! the cell that imported torch, `%oomscope` prints the analysis so far, and `%unload_ext`
//! detaches, the kernel going on with its results unchanged.

mod support;

use std::path::Path;
use std::process::Command;

use oomscope_format::{AttachEvent, CounterKind, Trace};
use oomscope_testkit::Scratch;
use support::{COLLECTOR, read, torch_python};

/// Runs `cells` in a fresh kernel started in `dir`; each cell's output, in order.
fn kernel(dir: &Path, cells: &[&str]) -> Vec<String> {
    let file = dir.join("cells.json");
    std::fs::write(&file, serde_json::to_string(cells).unwrap()).unwrap();
    let drive = format!("{}/tests/notebook/drive.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(torch_python())
        .arg(drive)
        .arg(dir)
        .arg(&file)
        // The kernel imports the package from the source tree, as a wheel would install it,
        // and finds the collector cargo built.
        .env("PYTHONPATH", support::python_path())
        .env("OOMSCOPE_COLLECTOR", COLLECTOR)
        .env("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env("OMP_NUM_THREADS", "1")
        .env_remove("OOMSCOPE_SOCKET")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outputs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["out"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(outputs.len(), cells.len(), "{outputs:#?}");
    outputs
}

/// The cells of the notebook, without the extension's: the kernel's own measurement of what the
/// 96 MiB cell added to its resident memory, and a few deterministic training steps.
const RSS: &str = "import os\ndef rss():\n    return int(open('/proc/self/statm').read().split()[1]) \
                   * os.sysconf('SC_PAGE_SIZE')\nkeep = []";
const GROW: &str =
    "before = rss()\nkeep.append(bytearray(b'x' * (96 << 20)))\nprint('grew', rss() - before)";
const MODEL: &str = "import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(256, 256)\n\
                     opt = torch.optim.SGD(m.parameters(), lr=0.1)";
const TRAIN: &str = "for s in range(12):\n    loss = m(torch.randn(32, 256)).pow(2).mean()\n    \
                     loss.backward(); opt.step(); opt.zero_grad()\nprint('loss %.6f' % loss.item())";
const AFTER: &str = "print('after', len(keep))";

/// The host RSS at the last reading at or before `t_us`.
fn rss_at(t: &Trace, t_us: u64) -> u64 {
    let rss = t.counter(CounterKind::HostRss, None).unwrap();
    t.samples.value_at(rss, t_us).unwrap()
}

#[test]
fn a_kernel_loaded_with_the_extension_is_recorded_cell_by_cell_and_left_unchanged() {
    let s = Scratch::new("notebook");
    let out = kernel(
        s.dir(),
        &[
            "%load_ext oomscope",
            RSS,
            GROW,
            MODEL,
            TRAIN,
            "%oomscope",
            "%unload_ext oomscope",
            AFTER,
            // Loaded again: a second trace, the hooks installed the first time resumed.
            "%load_ext oomscope",
            TRAIN,
            "%unload_ext oomscope",
        ],
    );
    assert!(
        out[0].starts_with("oomscope: recording this kernel (pid "),
        "{out:#?}"
    );
    let trace = out[0]
        .split(" into ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap()
        .to_owned();
    let grew: u64 = out[2]
        .trim()
        .strip_prefix("grew ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(grew >= 90 << 20, "{grew}");

    // `%oomscope`: the analysis so far, in `collector summary`'s words.
    let summary = out[5].replace("\n    ", " ");
    for want in [
        "attached to the running process",
        "no end recorded yet: the recording goes on",
        "12 steps (0-11)",
        "pre_cell",
        "post_cell",
        "post_optimizer_step",
    ] {
        assert!(summary.contains(want), "{want}: {summary}");
    }
    assert!(!summary.contains("warning:"), "{summary}");
    assert!(
        out[6].starts_with("oomscope: stopped recording; the trace is "),
        "{}",
        out[6]
    );
    // The kernel goes on.
    assert_eq!(out[7], "after 1\n");

    let t = read(Path::new(&trace)).trace;
    let events: Vec<_> = t.attach.iter().map(|a| a.event).collect();
    assert_eq!(events, [AttachEvent::Attached, AttachEvent::Detached]);
    assert!(t.metadata.command.iter().any(|a| a.contains("ipykernel")));
    // Every cell run while loaded is two marks; the 96 MiB cell's are named by its note.
    let cells = |stage: &str| t.marks.iter().filter(|m| m.name.as_ref() == stage).count();
    assert!(
        cells("pre_cell") >= 5 && cells("post_cell") >= 5,
        "{:?}",
        t.notes
    );
    let note = t
        .notes
        .iter()
        .find(|n| n.text.starts_with("cell [") && n.text.ends_with("]: before = rss()"))
        .unwrap_or_else(|| panic!("{:?}", t.notes));
    let pre = t
        .marks
        .iter()
        .find(|m| m.t_us >= note.t_us && m.name.as_ref() == "pre_cell")
        .unwrap();
    let post = t
        .marks
        .iter()
        .find(|m| m.t_us > pre.t_us && m.name.as_ref() == "post_cell")
        .unwrap();
    // What the trace read across the cell (before its first mark, and at the next cell's first,
    // when the kernel is between cells) against what the kernel measured itself.
    let next = t
        .marks
        .iter()
        .find(|m| m.t_us > post.t_us && m.name.as_ref() == "pre_cell")
        .unwrap();
    let traced = rss_at(&t, next.t_us) as f64 - rss_at(&t, pre.t_us) as f64;
    assert!(
        (traced - grew as f64).abs() <= 0.15 * grew as f64,
        "traced {traced} against the kernel's own {grew}"
    );

    // The second recording is a file of its own, its steps marked by the resumed hooks.
    let again = out[8]
        .split(" into ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap()
        .to_owned();
    assert!(again.ends_with("-2.oomt") && again != trace, "{again}");
    let t2 = read(Path::new(&again)).trace;
    let steps = t2
        .marks
        .iter()
        .filter(|m| m.name.as_ref() == "post_optimizer_step")
        .count();
    assert_eq!(steps, 12, "{:?}", t2.marks.len());
    assert_eq!(read(Path::new(&trace)).trace.attach.len(), 2);

    // The same cells without the extension: the same results.
    let plain = kernel(s.dir(), &[RSS, GROW, MODEL, TRAIN, AFTER]);
    assert_eq!(plain[3], out[4]);
    assert!(out[4].starts_with("loss "), "{}", out[4]);
}

/// After an error, the traceback Python and IPython keep holds its frames' variables: said with
/// how much (by frame and variable), and `%oomscope release` gives it back, measured by the
/// kernel itself (where `gc.collect()` alone frees nothing).
#[test]
fn an_error_s_traceback_is_said_to_keep_its_frames_memory_and_released_without_a_restart() {
    let s = Scratch::new("notebook-traceback");
    let build = "def build():\n    big = torch.ones(50 << 20)\n    acts = [torch.ones(4 << 20) for \
                 _ in range(4)]\n    raise MemoryError('planted')\nbuild()";
    let out = kernel(
        s.dir(),
        &[
            "%load_ext oomscope",
            &format!("{RSS}\nimport torch\nbase = rss()"),
            build,
            "import gc; gc.collect(); print(rss() - base)",
            "%oomscope release",
            "print(rss() - base)",
            "%unload_ext oomscope",
        ],
    );
    // 200 MiB in `big`, 4 × 16 MiB in the list `acts`: 264 MiB, as the frames hold them.
    assert!(
        out[2].starts_with("ERROR MemoryError: planted\n"),
        "{}",
        out[2]
    );
    assert!(
        out[2].contains(
            "oomscope: the last error's traceback keeps 264 MiB alive in its frames' variables: \
             `big` in build() (float32[52428800], 200 MiB), `acts` in build() (list of 4, 64 MiB)"
        ) && out[2].contains("`%oomscope release` frees it without restarting the kernel"),
        "{}",
        out[2]
    );
    let mib = |text: &str| text.trim().parse::<i64>().unwrap() >> 20;
    // A collection alone frees nothing: the references are Python's and IPython's.
    assert!(mib(&out[3]) >= 250, "{}", out[3]);
    assert!(
        out[4].starts_with(
            "oomscope: released the last error (its traceback kept 264 MiB): host RSS "
        ),
        "{}",
        out[4]
    );
    // The memory is back.
    assert!(mib(&out[5]) < 32, "{}", out[5]);
}
