//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
//!
//! Here: `collector serve` following a run as it is recorded. The page shows the run live and
//! refuses what it does not serve, a file opened on a live page stays shown, and the live panel
//! says what `collector watch --json` says. One of the `browser_*` targets, split by what they
//! test so that each reads in one sitting.
// The serve test prints how soon the page said the run ended, for BENCHMARKS.md.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use oomscope_e2e::page::{all_words, collapsed};
use oomscope_e2e::{Browser, ONE_BROWSER, Scratch, Served, summary_json};
use serde_json::Value;
use thirtyfour::prelude::*;

/// A training loop long enough to watch: 4 MiB kept every step for ~12 s.
const LIVE_TRAIN: &str = r#"
import time, oomscope_probe as oom
MIB = 1 << 20
def resident(mib):
    b = bytearray(mib * MIB)
    b[::4096] = b"\x01" * (len(b) // 4096)
    return b
kept = []
for step in range(120):
    oom.step(step)
    oom.mark("pre_forward", phase="train")
    act = resident(16)
    time.sleep(0.04)
    oom.mark("post_forward")
    kept.append(resident(4))
    time.sleep(0.03)
    del act
    oom.mark("post_backward")
    time.sleep(0.03)
    oom.mark("post_optimizer_step")
"#;

/// A scratch folder with `LIVE_TRAIN` in it, and `collector serve` following `live.oomt` there
/// (not written yet): (the folder, the script, the trace, the server).
fn serve_live_train(name: &str) -> (Scratch, std::path::PathBuf, std::path::PathBuf, Served) {
    let s = Scratch::new(name);
    let script = s.write("live_train.py", LIVE_TRAIN.as_bytes());
    let trace = s.path("live.oomt");
    let served = Served::start(&[trace.to_str().unwrap()]);
    (s, script, trace, served)
}

/// `#live-note` once it says the run ended (waits up to 20 s).
async fn live_note_when_ended(b: &Browser) -> String {
    b.d()
        .query(By::Css("#live-note"))
        .with_text(thirtyfour::stringmatch::StringMatch::new("ended").partial())
        .wait(Duration::from_secs(20), Duration::from_millis(100))
        .first()
        .await
        .expect("the page says the run ended")
        .text()
        .await
        .unwrap()
}

/// The step `#live-note` says the run is at ("live: following · step 12 at post_forward").
async fn live_step(b: &Browser) -> Option<u64> {
    let text = b
        .js("const e = document.getElementById('live-note'); return e ? e.textContent : null")
        .await;
    let text = text.as_str()?;
    let after = text.split(" · step ").nth(1)?;
    after
        .split_whitespace()
        .next()?
        .replace(['\u{a0}', ' '], "")
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn collector_serve_shows_a_run_live_and_refuses_what_it_does_not_serve() {
    let _one = ONE_BROWSER.lock().await;
    let (_s, script, trace, served) = serve_live_train("serve");
    assert!(
        served.url.starts_with("http://127.0.0.1:"),
        "{}",
        served.url
    );

    // Bad requests: a 4xx and nothing else.
    let host = format!("Host: {}", served.authority());
    for (request, status) in [
        (format!("GET /etc/passwd HTTP/1.1\r\n{host}"), 404),
        (format!("GET /../live.oomt HTTP/1.1\r\n{host}"), 404),
        (
            format!("GET /trace/0/../../live.oomt HTTP/1.1\r\n{host}"),
            404,
        ),
        (format!("GET /trace/7?from=0 HTTP/1.1\r\n{host}"), 404),
        (
            format!("GET /trace/0?from=99999999999 HTTP/1.1\r\n{host}"),
            416,
        ),
        (format!("GET /trace/0 HTTP/1.1\r\n{host}"), 400),
        (
            format!("POST / HTTP/1.1\r\n{host}\r\nContent-Length: 0"),
            405,
        ),
        (
            format!("GET / HTTP/1.1\r\n{host}\r\nOrigin: http://evil.example"),
            403,
        ),
        ("GET / HTTP/1.1\r\nHost: evil.example".to_owned(), 403),
    ] {
        let (got, body) = served.raw(&request);
        assert_eq!(got, status, "{request:?}: {body}");
        assert!(body.len() < 80, "a one-line reason only: {body:?}");
    }
    let (ok, page) = served.raw(&format!("GET / HTTP/1.1\r\n{host}"));
    assert_eq!(ok, 200);
    assert!(
        page.contains("connect-src 'self'"),
        "the report's CSP, fetching its own origin"
    );

    let b = Browser::start("serve").await;
    b.d().goto(&served.url).await.expect("page opens");
    // Before the run starts: the page says it waits.
    b.d()
        .query(By::Css("#live-waiting"))
        .with_text(thirtyfour::stringmatch::StringMatch::new("waiting for live.oomt").partial())
        .wait(Duration::from_secs(20), Duration::from_millis(100))
        .first()
        .await
        .expect("the page says it waits for the trace");
    // No reload from here on: this mark would be lost.
    b.js("window.oomscopeNoReload = 1; return 1").await;

    let mut run = oomscope_e2e::start_recording(&script, &[], &trace);
    let started = std::time::Instant::now();
    let mut steps_seen = Vec::new();
    let mut leak_before_end = false;
    while run.try_wait().expect("the run").is_none() {
        assert!(started.elapsed() < Duration::from_secs(90), "the run hangs");
        if let Some(step) = live_step(&b).await
            && steps_seen.last() != Some(&step)
        {
            steps_seen.push(step);
        }
        let leak = b
            .js("return !!document.querySelector('#verdict li[data-id=leak]')")
            .await;
        if leak == Value::Bool(true) && run.try_wait().expect("the run").is_none() {
            leak_before_end = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        steps_seen.len() >= 3 && steps_seen.windows(2).all(|w| w[0] < w[1]),
        "the step shown rises while the run goes: {steps_seen:?}"
    );
    assert!(
        leak_before_end,
        "the leak's verdict showed before the run ended"
    );
    // At the end: the whole trace, the note says so, the verdict is the summary's. How long the
    // page took to say it, from the recorder's exit (its last bytes written), is printed for
    // BENCHMARKS.md (sample to screen, browser).
    let exited = std::time::Instant::now();
    let note = live_note_when_ended(&b).await;
    println!(
        "collector serve: the page said the run ended {} ms after the recorder exited",
        exited.elapsed().as_millis()
    );
    assert!(note.contains("ended"));
    assert_eq!(live_step(&b).await, Some(119), "the program's last step");
    // The page's verdict is the finished trace's, as `collector summary` says it.
    let summary = summary_json(&trace);
    let findings = summary["analysis"]["findings"].as_array().unwrap();
    assert_eq!(findings[0]["id"], "leak", "{findings:?}");
    let verdict = b
        .d()
        .query(By::Css("#verdict[data-from=page] li[data-id=leak]"))
        .wait(Duration::from_secs(20), Duration::from_millis(100))
        .first()
        .await
        .expect("the final verdict");
    let words = verdict.text().await.unwrap();
    assert!(
        words.contains(findings[0]["title"].as_str().unwrap()),
        "{words} vs {}",
        findings[0]
    );
    assert_eq!(
        b.js("return window.oomscopeNoReload || 0").await,
        Value::from(1),
        "the page updated without a reload"
    );
    b.quit().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_opened_on_a_live_page_stays_shown_while_the_run_goes_on() {
    let _one = ONE_BROWSER.lock().await;
    let (_s, script, trace, served) = serve_live_train("serve-open");
    let b = Browser::start("serve-open").await;
    b.d().goto(&served.url).await.expect("page opens");
    let mut run = oomscope_e2e::start_recording(&script, &[], &trace);
    let started = std::time::Instant::now();
    // The run is shown, step by step.
    while live_step(&b).await.is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "no step shown");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = || async {
        b.js("const e = document.getElementById('trace-name'); return e ? e.textContent : ''")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(name().await.starts_with("live.oomt"), "{}", name().await);
    // The user opens another trace while the run goes on.
    let golden = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_4_oom_kill.oomt");
    b.wait_for("#open-input")
        .await
        .send_keys(golden.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
    let opened = std::time::Instant::now();
    while !name().await.starts_with("v1_4_oom_kill.oomt") {
        assert!(
            opened.elapsed() < Duration::from_secs(20),
            "{}",
            name().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let step_when_opened = live_step(&b).await;
    // Refreshes come every 0.4 s while the run records: none of them takes the page back.
    let mut checks = 0;
    while run.try_wait().expect("the run").is_none() {
        assert!(started.elapsed() < Duration::from_secs(90), "the run hangs");
        let shown = name().await;
        assert!(
            shown.starts_with("v1_4_oom_kill.oomt"),
            "a live refresh replaced the file the user opened: {shown}"
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        checks >= 5,
        "the run ended too soon to tell ({checks} checks)"
    );
    // The run was still followed: its note went on to the end, and says what is shown.
    let note = live_note_when_ended(&b).await;
    assert!(note.contains("showing the file you opened"), "{note}");
    assert!(
        live_step(&b).await > step_when_opened,
        "{note} (step {step_when_opened:?} when the file was opened)"
    );
    assert!(name().await.starts_with("v1_4_oom_kill.oomt"));
    b.quit().await;
}

/// A run followed live (not ended) on the page `collector serve` serves: its live panel says what
/// `collector watch --json` says of the same trace as it grows: the memories, the alerts at 90%
/// of a limit (none at first, then the device's), the leak and when memory is full.
#[tokio::test(flavor = "multi_thread")]
async fn the_live_panel_says_what_watch_json_says_as_the_trace_grows() {
    let _one = ONE_BROWSER.lock().await;
    // 11.6 GiB at the first step, 96 MiB kept a step, a 30 GiB device: under 90% of it at 60% of
    // the run, over at 85%.
    let bytes = oomscope_testkit::synth::TrainingRun {
        steps: 200,
        leak_bytes_per_step: 96 << 20,
        gpu_total_bytes: 30 << 30,
        ..oomscope_testkit::synth::TrainingRun::default()
    }
    .to_bytes();
    let s = Scratch::new("live-panel");
    let trace = s.path("live.oomt");
    let served = Served::start(&[trace.to_str().unwrap()]);
    let b = Browser::start("live-panel").await;
    b.d().goto(&served.url).await.expect("page opens");
    for (share, alerts) in [(60, 0), (85, 1)] {
        std::fs::write(&trace, &bytes[..bytes.len() * share / 100]).unwrap();
        let watched = oomscope_e2e::watch_json(&trace, 1_500);
        assert_eq!(watched["ended"], false, "{watched}");
        assert!(watched["leak"].is_object(), "at {share}%: {watched}");
        let said = |v: &Value| collapsed(v["said"].as_str().unwrap());
        let want_alerts: Vec<String> = watched["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| format!("WARNING {}", said(a)))
            .collect();
        assert_eq!(want_alerts.len(), alerts, "{watched}");
        let want_leak = said(&watched["leak"]);
        assert!(want_leak.contains(": full at step"), "{want_leak}");
        // The page, once it has read as far: the same step, alerts and leak.
        let step = watched["step"].as_u64().unwrap();
        let started = std::time::Instant::now();
        while live_step(&b).await != Some(step)
            || all_words(&b, "#live-panel .live-alert").await != want_alerts
            || all_words(&b, "#live-panel .live-leak").await != [want_leak.clone()]
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "at {share}%: the page shows step {:?}, alerts {:?}, leak {:?}; watch --json: \
                 step {step}, alerts {want_alerts:?}, leak {want_leak:?}",
                live_step(&b).await,
                all_words(&b, "#live-panel .live-alert").await,
                all_words(&b, "#live-panel .live-leak").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let memories: Vec<String> = all_words(&b, "#live-panel .live-memory").await;
        assert_eq!(
            memories.len(),
            watched["memory"].as_array().unwrap().len(),
            "{memories:?} vs {watched}"
        );
        assert_eq!(
            b.js("return document.getElementById('live-panel').dataset.alerts")
                .await,
            Value::from(alerts.to_string())
        );
    }
    b.quit().await;
}
