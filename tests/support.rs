//! Shared pieces of the end-to-end tests: the collector binary built beside the tests, scratch
//! directories, recording a Python program under `collector run`, and a headless Debian
//! chromium driven through chromedriver (started here, killed with its whole process group).
//!
//! The tests use the real binaries: `cargo test --workspace` builds `collector` (with the viewer
//! embedded once `scripts/build-viewer.sh` has run) before any test starts.
//!
//! The browser tests are split into several targets (`browser_*.rs`, each a process of its own);
//! what more than one of them uses is here (`TRAIN`, `ONE_BROWSER`) or in [`page`].

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use thirtyfour::prelude::*;

pub mod page;

/// `target/<profile>`, where cargo put the collector next to this test binary's `deps/`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let deps = exe.parent().expect("in deps/");
    deps.parent().expect("in target/<profile>").to_path_buf()
}

/// The collector binary this workspace built.
pub fn collector() -> PathBuf {
    let path = target_dir().join("collector");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (or build the collector first)",
        path.display()
    );
    path
}

/// The Python marker helper's directory (for `PYTHONPATH`).
pub fn python_helper_dir() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../collector/python")
}

pub use oomscope_testkit::Scratch;

/// Runs the collector with `args`; the Python helper is importable by children.
pub fn run_collector(args: &[&str]) -> Output {
    collector_command(args)
        .output()
        .expect("the collector starts")
}

/// `collector ARGS` with the Python helper importable by children and no GPU library.
fn collector_command(args: &[&str]) -> Command {
    let mut c = Command::new(collector());
    c.args(args)
        .env("PYTHONPATH", python_helper_dir())
        .env("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so")
        .stdin(Stdio::null());
    c
}

/// Records `python3 script args...` into `trace`; panics with the collector's stderr on
/// failure to write a trace.
pub fn record(script: &Path, args: &[&str], trace: &Path) {
    record_with(script, args, trace, &[]);
}

/// The Python interpreter itself, not a wrapper on `PATH` (pyenv's `python3` shim sometimes runs
/// it as a child instead of in its own process: the program is then not the rank, and a short
/// rank's memory rests on the process poller, which may miss it — found 2026-11-24, 1 run in 6).
fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "python3".to_owned())
    })
}

/// [`record`] with `env` set for the collector and its program (`RANK`, … as a launcher sets
/// them).
pub fn record_with(script: &Path, args: &[&str], trace: &Path, env: &[(&str, &str)]) {
    let out = recording(script, args, trace)
        .envs(env.iter().copied())
        .output()
        .expect("the collector starts");
    assert!(
        trace.is_file(),
        "no trace written: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `collector run -q --interval-ms 5 -o TRACE -- python3 SCRIPT ARGS...`, not started.
fn recording(script: &Path, args: &[&str], trace: &Path) -> Command {
    let mut all = vec![
        "run",
        "-q",
        "--interval-ms",
        "5",
        "-o",
        trace.to_str().expect("utf-8 path"),
        "--",
        python(),
        script.to_str().expect("utf-8 path"),
    ];
    all.extend_from_slice(args);
    collector_command(&all)
}

/// A training loop that really holds host memory: activations in forward, freed after
/// backward; `LEAK` MiB kept per step; eval every 10 steps; an OOM at the end when asked.
pub const TRAIN: &str = r#"
import sys, time, oomscope_probe as oom
MIB = 1 << 20
leak, crash = int(sys.argv[1]), sys.argv[2] == "oom"
def resident(mib):
    b = bytearray(mib * MIB)
    b[::4096] = b"\x01" * (len(b) // 4096)
    return b
params = resident(24)
oom.components(parameters_bytes=24 * MIB, gradients_bytes=24 * MIB, optimizer_state_bytes=48 * MIB)
kept = []
for step in range(30):
    oom.step(step)
    oom.mark("pre_forward", phase="train")
    act = resident(40)
    time.sleep(0.03)
    oom.mark("post_forward")
    if leak:
        kept.append(resident(leak))
    time.sleep(0.02)
    del act
    oom.mark("post_backward")
    time.sleep(0.02)
    oom.mark("post_optimizer_step")
    if step % 10 == 9:
        oom.phase("eval")
        oom.mark("eval_forward", phase="eval")
        time.sleep(0.02)
        oom.phase("train")
oom.note("checkpoint saved")
time.sleep(0.05)
if crash:
    oom.mark("pre_forward", step=30, phase="train")
    time.sleep(0.05)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.23 GiB is free.", file=sys.stderr)
    sys.exit(1)
"#;

/// Starts recording `python3 script args...` into `trace` (`collector run`, readings every 5 ms),
/// without waiting for it: the run's process.
pub fn start_recording(script: &Path, args: &[&str], trace: &Path) -> Child {
    recording(script, args, trace)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the collector starts")
}

/// What `collector watch --json` says of `trace` after following it for `for_ms`: its last line
/// (one JSON object per refresh), parsed.
pub fn watch_json(trace: &Path, for_ms: u64) -> serde_json::Value {
    use std::io::BufRead as _;
    let mut child = collector_command(&[
        "watch",
        "--json",
        "--interval-ms",
        "100",
        trace.to_str().expect("utf-8 path"),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("the collector starts");
    let stdout = child.stdout.take().expect("piped");
    let lines = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(Duration::from_millis(for_ms));
    let _ = child.kill();
    let _ = child.wait();
    let lines = lines.join().expect("read the lines");
    let last = lines.last().expect("collector watch --json printed a line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

/// `collector serve ARGS --port 0` running (killed when dropped), and the address it printed.
#[derive(Debug)]
pub struct Served {
    child: Child,
    /// The page's address (`http://127.0.0.1:PORT/`, with `?token=` when one is needed).
    pub url: String,
}

impl Served {
    /// Starts `collector serve ARGS --port 0` and reads the address it prints.
    pub fn start(args: &[&str]) -> Served {
        use std::io::BufRead as _;
        let mut all = vec!["serve", "--port", "0"];
        all.extend_from_slice(args);
        let mut child = collector_command(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the collector starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("collector serve prints its address");
        assert!(line.starts_with("http://"), "not an address: {line:?}");
        Served {
            child,
            url: line.trim().to_owned(),
        }
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> &str {
        let rest = self.url.trim_start_matches("http://");
        rest.split('/').next().unwrap_or(rest)
    }

    /// The status code of a raw HTTP/1.1 request (`request`'s first lines, without the blank
    /// line that ends them), and the answer's body.
    pub fn raw(&self, request: &str) -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let mut stream = TcpStream::connect(self.authority()).expect("the server listens");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(stream, "{request}\r\nConnection: close\r\n\r\n").expect("sent");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {answer:?}"));
        let body = answer
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, b)| b.to_owned());
        (status, body)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The empty viewer (`collector report -o viewer.html`, no trace) written into `s`; its path.
pub fn empty_viewer(s: &Scratch) -> PathBuf {
    let viewer = s.path("viewer.html");
    let o = run_collector(&["report", "-o", viewer.to_str().expect("utf-8 path")]);
    assert!(
        o.status.success(),
        "collector report -o failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    viewer
}

/// `collector report TRACE -o OUT`; returns the output.
pub fn report(trace: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "report",
        trace.to_str().expect("utf-8 path"),
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    let o = run_collector(&args);
    assert!(
        o.status.success(),
        "collector report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `collector summary --json TRACE`, parsed.
pub fn summary_json(trace: &Path) -> serde_json::Value {
    let o = run_collector(&["summary", "--json", trace.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("summary --json is JSON")
}

/// One browser at a time: the machine has two cores. Each test target is a process of its own
/// with its own lock, and cargo runs the targets one after another.
pub static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A headless chromium session; quits (or is killed with its process group) when done.
#[derive(Debug)]
pub struct Browser {
    /// The WebDriver session.
    pub driver: Option<WebDriver>,
    chromedriver: Child,
    _profile: Scratch,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

impl Browser {
    /// Starts chromedriver and a headless chromium (root needs `--no-sandbox`).
    pub async fn start(name: &str) -> Browser {
        let port = free_port();
        let mut cmd = Command::new("chromedriver");
        cmd.arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let chromedriver = cmd.spawn().expect(
            "chromedriver is not installed: run `bash scripts/setup-viewer.sh` (Debian chromium-driver)",
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not start listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = Scratch::new(&format!("chrome-{name}"));
        let mut caps = DesiredCapabilities::chrome();
        caps.set_binary("/usr/bin/chromium").expect("capability");
        for arg in [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", profile.path("profile").display()),
        ] {
            caps.add_arg(arg).expect("capability");
        }
        // Extra switches for measurements, e.g. `--js-flags=--no-liftoff` to see what V8's
        // baseline WASM tier costs.
        for arg in std::env::var("OOMSCOPE_CHROME_ARGS")
            .unwrap_or_default()
            .split_whitespace()
        {
            caps.add_arg(arg).expect("capability");
        }
        let driver = WebDriver::new(format!("http://127.0.0.1:{port}"), caps)
            .await
            .expect("chromium starts under chromedriver");
        Browser {
            driver: Some(driver),
            chromedriver,
            _profile: profile,
        }
    }

    /// The session.
    pub fn d(&self) -> &WebDriver {
        self.driver.as_ref().expect("not quit")
    }

    /// Opens a local file.
    pub async fn open(&self, path: &Path) {
        let url = format!(
            "file://{}",
            path.canonicalize().expect("file exists").display()
        );
        self.d().goto(url).await.expect("page opens");
    }

    /// Waits up to 20 s for an element.
    pub async fn wait_for(&self, css: &str) -> WebElement {
        self.d()
            .query(By::Css(css))
            .wait(Duration::from_secs(20), Duration::from_millis(50))
            .first()
            .await
            .unwrap_or_else(|e| panic!("`{css}` never appeared: {e}"))
    }

    /// Runs a script and returns its JSON result.
    pub async fn js(&self, script: &str) -> serde_json::Value {
        self.d()
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}"))
            .json()
            .clone()
    }

    /// With `OOMSCOPE_SCREENSHOTS=DIR` set, scrolls `css` to the top of the window and saves the
    /// window as `DIR/NAME.png` (how the README's screenshots of interactive states are made:
    /// `OOMSCOPE_SCREENSHOTS=docs/screenshots cargo test -p oomscope-e2e --tests`).
    pub async fn screenshot_if_asked(&self, css: &str, name: &str) {
        let Some(dir) = std::env::var_os("OOMSCOPE_SCREENSHOTS") else {
            return;
        };
        self.js(&format!(
            "document.querySelector(\"{css}\").scrollIntoView(); return 1"
        ))
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let path = Path::new(&dir).join(format!("{name}.png"));
        self.d()
            .screenshot(&path)
            .await
            .unwrap_or_else(|e| panic!("screenshot {}: {e}", path.display()));
    }

    /// Ends the session cleanly.
    pub async fn quit(mut self) {
        if let Some(d) = self.driver.take() {
            let _ = d.quit().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromium runs as chromedriver's children, in its process group.
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{}", self.chromedriver.id())])
            .status();
        let _ = self.chromedriver.kill();
        let _ = self.chromedriver.wait();
    }
}
