//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
// The hour test prints its measurement for BENCHMARKS.md.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use oomscope_e2e::{
    Browser, Scratch, Served, empty_viewer, record, record_with, report, run_collector,
    summary_json,
};
use serde_json::Value;
use thirtyfour::prelude::*;

/// One browser at a time: the machine has two cores.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A training loop that really holds host memory: activations in forward, freed after
/// backward; `LEAK` MiB kept per step; eval every 10 steps; an OOM at the end when asked.
const TRAIN: &str = r#"
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

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if !s.is_empty() => s.parse().ok(),
        _ => None,
    }
}

/// The DOM's stage table equals `collector summary --json`'s for the primary metric.
async fn assert_stage_table_matches(b: &Browser, summary: &Value) {
    let table = &summary["analysis"]["stage_table"];
    let primary = table["primary_metric"].as_str().expect("a primary metric");
    let metrics: Vec<&str> = table["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mi = metrics.iter().position(|m| *m == primary).unwrap();
    let shown = b
        .js("return document.getElementById('stage-metric').value")
        .await;
    assert_eq!(
        shown.as_str(),
        Some(primary),
        "the table opens on the primary metric"
    );
    let rows = b
        .js("return [...document.querySelectorAll('#stage-table tbody tr')].map(r => r.dataset)")
        .await;
    let rows = rows.as_array().unwrap();
    let expected = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), expected.len(), "rows: {rows:?}");
    for (dom, want) in rows.iter().zip(expected) {
        let m = &want["metrics"][mi];
        assert_eq!(dom["stage"], want["stage"]);
        assert_eq!(dom["phase"], want["phase"]);
        assert_eq!(as_f64(&dom["count"]), as_f64(&want["count"]));
        for (attr, field) in [
            ("meanBytes", "mean_bytes"),
            ("maxBytes", "max_bytes"),
            ("meanDeltaBytes", "mean_delta_bytes"),
            ("maxDeltaBytes", "max_delta_bytes"),
        ] {
            assert_eq!(
                as_f64(&dom[attr]),
                as_f64(&m[field]),
                "{} {field}: page {} vs summary {}",
                want["stage"],
                dom[attr],
                m[field]
            );
        }
    }
}

async fn painted_pixels(b: &Browser, canvas_id: &str) -> u64 {
    painted_pixels_in(b, &format!("#{canvas_id}")).await
}

/// Pixels drawn darker than light grey on the canvas `css` selects.
async fn painted_pixels_in(b: &Browser, css: &str) -> u64 {
    let script = format!(
        "const c = document.querySelector(\"{css}\");
         const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
         let n = 0;
         for (let i = 0; i < d.length; i += 4) {{ if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) n++; }}
         return n;"
    );
    b.js(&script).await.as_u64().unwrap()
}

#[tokio::test]
async fn a_report_shows_what_the_summary_says_and_compares_a_second_trace() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("report");
    let script = s.write("train.py", TRAIN.as_bytes());
    let leaky = s.path("leaky.oomt");
    record(&script, &["8", "oom"], &leaky);
    let html = s.path("leaky.html");
    let out = report(&leaky, &html, &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        html.display().to_string(),
        "report prints its path"
    );
    let summary = summary_json(&leaky);

    let b = Browser::start("report").await;
    b.open(&html).await;
    b.wait_for("#stage-table tbody tr").await;

    assert_stage_table_matches(&b, &summary).await;

    // The timeline is drawn, and says when.
    let pixels = painted_pixels(&b, "timeline-canvas").await;
    assert!(
        pixels > 2_000,
        "timeline canvas looks blank ({pixels} painted pixels)"
    );
    let first = b.js("return document.body.dataset.firstChartMs").await;
    assert!(
        as_f64(&first).is_some_and(|ms| ms > 0.0),
        "first chart time: {first}"
    );

    // Hovering the plot shows the values and the stage under the cursor.
    let canvas = b.d().find(By::Id("timeline-canvas")).await.unwrap();
    b.d()
        .action_chain()
        .move_to_element_center(&canvas)
        .perform()
        .await
        .unwrap();
    let tip = b.wait_for(".tooltip").await.text().await.unwrap();
    assert!(tip.contains("t = ") && tip.contains("step "), "{tip}");
    assert!(tip.contains("host.rss: "), "{tip}");

    // Findings: the same ones, in the same order (most severe first).
    let titles = b
        .js("return [...document.querySelectorAll('#findings article.finding')].map(a => a.dataset.id)")
        .await;
    let want: Vec<Value> = summary["analysis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].clone())
        .collect();
    assert_eq!(titles.as_array().unwrap(), &want);
    assert!(
        want.iter().any(|id| id == "leak"),
        "the planted leak is found: {want:?}"
    );
    assert!(
        want.iter().any(|id| id == "oom"),
        "the OOM is explained: {want:?}"
    );
    let banner = b.wait_for("#oom-banner").await.text().await.unwrap();
    assert!(banner.contains("2.00 GiB"), "{banner}");
    assert!(banner.contains("step 30"), "{banner}");

    // The breakdown at the peak is a chart.
    b.wait_for("#breakdown-canvas").await;
    assert!(painted_pixels(&b, "breakdown-canvas").await > 200);

    // Exports are generated in the page, byte for byte what `collector export` writes.
    b.js("window.__blobs = []; const o = URL.createObjectURL; URL.createObjectURL = (x) => { window.__blobs.push(x); return o(x); }; return 1")
        .await;
    b.d()
        .find(By::Id("export-csv"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let csv = b.js("return window.__blobs[0].text()").await;
    let cli = run_collector(&["export", "--format", "csv", leaky.to_str().unwrap()]);
    assert_eq!(csv.as_str().unwrap(), String::from_utf8_lossy(&cli.stdout));

    // A second run through the file input, as the report attached to its ticket (the page reads
    // the trace the .html embeds): the fix, side by side.
    let fixed = s.path("fixed.oomt");
    record(&script, &["0", "ok"], &fixed);
    let fixed_html = s.path("fixed.html");
    report(&fixed, &fixed_html, &[]);
    let input = b.d().find(By::Id("compare-input")).await.unwrap();
    input
        .send_keys(fixed_html.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
    b.wait_for("#compare-peaks tbody tr").await;
    let peaks = b
        .js("return [...document.querySelectorAll('#compare-peaks tbody tr')].map(r => r.dataset)")
        .await;
    let rss = peaks
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "host.rss")
        .unwrap_or_else(|| panic!("host.rss compared: {peaks}"));
    let (a, bb) = (
        as_f64(&rss["aBytes"]).unwrap(),
        as_f64(&rss["bBytes"]).unwrap(),
    );
    let fixed_summary = summary_json(&fixed);
    let fixed_peak = fixed_summary["analysis"]["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metric"] == "host.rss")
        .filter_map(|p| p["bytes"].as_f64())
        .fold(0.0, f64::max);
    assert_eq!(bb, fixed_peak, "B is the second trace's peak");
    assert!(
        a > bb + 150.0 * 1048576.0,
        "the leak (30 × 8 MiB) shows: A {a} vs B {bb}"
    );
    let stages = b
        .js("return document.querySelectorAll('#compare-stages tbody tr').length")
        .await;
    assert!(stages.as_u64().unwrap() >= 4, "{stages}");
    b.quit().await;
}

#[tokio::test]
async fn damaged_and_foreign_files_show_a_message_not_a_blank_page() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("corrupt");
    let script = s.write("train.py", TRAIN.as_bytes());
    let full = s.path("full.oomt");
    record(&script, &["2", "ok"], &full);
    let bytes = std::fs::read(&full).unwrap();
    let cut = s.write("cut.oomt", &bytes[..bytes.len() * 3 / 5]);
    let html = s.path("cut.html");
    report(&cut, &html, &[]);

    let b = Browser::start("corrupt").await;
    b.open(&html).await;
    let banner = b.wait_for("#partial-banner").await.text().await.unwrap();
    assert!(banner.contains("Partly readable"), "{banner}");
    // The prefix that decoded is shown.
    b.wait_for("#stage-table tbody tr").await;
    assert!(painted_pixels(&b, "timeline-canvas").await > 1_000);

    // A report whose embedded base64 was damaged (decoded by the browser's `fromBase64`).
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page.find("id=\"oomscope-trace\"").unwrap();
    let text = at + page[at..].find('>').unwrap() + 1;
    let broken = format!("{}!!!!{}", &page[..text], &page[text + 4..]);
    b.open(&s.write("broken.html", broken.as_bytes())).await;
    let error = b.wait_for("#load-error").await.text().await.unwrap();
    assert!(error.contains("embedded trace is damaged"), "{error}");

    // Something that is not a trace at all, opened through the picker.
    let junk = s.write("notes.oomt", b"<html>this is not a trace</html>");
    let input = b.d().find(By::Id("open-input")).await.unwrap();
    input
        .send_keys(junk.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
    let error = b.wait_for("#load-error").await.text().await.unwrap();
    assert!(error.contains("notes.oomt"), "{error}");
    assert!(error.contains("not a readable oomscope trace"), "{error}");
    b.quit().await;

    // `collector report` of a foreign file: one line, non-zero exit, no file.
    let o = run_collector(&[
        "report",
        junk.to_str().unwrap(),
        "-o",
        s.path("junk.html").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: cannot open"), "{err}");
    assert!(!s.path("junk.html").exists());

    // Other bad requests: one line each, exit 1, nothing written over.
    for (args, says) in [
        (
            vec!["report", cut.to_str().unwrap(), "-o", cut.to_str().unwrap()],
            "overwrite its own trace",
        ),
        (
            vec!["report", cut.to_str().unwrap(), "--max-size-mb=-1"],
            "--max-size-mb",
        ),
        (
            vec!["report", cut.to_str().unwrap(), "--max-size-mb", "0.5"],
            "cannot hold the viewer",
        ),
        (
            vec![
                "report",
                cut.to_str().unwrap(),
                "-o",
                "/nonexistent/dir/r.html",
            ],
            "cannot write",
        ),
        (vec!["report", "/nonexistent/t.oomt"], "cannot read"),
    ] {
        let o = run_collector(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read(&cut).unwrap(), bytes[..bytes.len() * 3 / 5]);
}

#[tokio::test]
async fn markup_in_a_trace_is_shown_as_text_and_never_runs() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("hostile");
    let script = s.write(
        "hostile.py",
        br#"
import sys, time, oomscope_probe as oom
# Stage names are single protocol tokens (no spaces, no '='), so their payload calls a method.
for step in range(3):
    oom.mark("<script>document.body.setAttribute('data-pwned','stage')</script>", step=step)
    time.sleep(0.03)
    oom.mark("<b>bold</b><img/src/onerror>", step=step)
    time.sleep(0.03)
oom.note("<iframe src=javascript:window.__pwned=3></iframe> <img src=x onerror=window.__pwned=6>")
time.sleep(0.05)
"#,
    );
    let trace = s.path("hostile.oomt");
    record(
        &script,
        &[
            "<svg/onload=window.__pwned=4>",
            "\"><script>window.__pwned=5</script>",
        ],
        &trace,
    );
    let marks = oomscope_format::decode(&std::fs::read(&trace).unwrap())
        .unwrap()
        .trace
        .marks
        .len();
    assert_eq!(marks, 6, "the hostile stage names were recorded");
    let html_path = s.path("hostile.html");
    report(&trace, &html_path, &[]);
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(
        !html.contains("__pwned") && !html.contains("data-pwned"),
        "no recorded string is in the HTML"
    );
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("default-src 'none'"));

    let b = Browser::start("hostile").await;
    b.open(&html_path).await;
    b.wait_for("#stage-table tbody tr").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pwned = b
        .js("return window.__pwned === undefined ? (document.body.dataset.pwned || null) : window.__pwned")
        .await;
    assert_eq!(pwned, Value::Null, "a script from the trace ran");
    let injected = b
        .js("return document.querySelectorAll('b, img, svg, iframe').length + document.scripts.length - 3")
        .await;
    assert_eq!(
        injected.as_i64(),
        Some(0),
        "elements were created from trace text"
    );
    // The text is there, literally.
    let stages = b
        .js("return [...document.querySelectorAll('#stage-table tbody tr td:first-child')].map(td => td.textContent)")
        .await;
    assert!(
        stages
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "<script>document.body.setAttribute('data-pwned','stage')</script>"),
        "{stages}"
    );
    let notes = b.wait_for("#notes").await.text().await.unwrap();
    assert!(
        notes.contains("<img src=x onerror=window.__pwned=6>"),
        "{notes}"
    );
    b.wait_for("#command").await;
    let command = b
        .js("return document.getElementById('command').textContent")
        .await;
    assert!(
        command
            .as_str()
            .unwrap()
            .contains("<svg/onload=window.__pwned=4>"),
        "{command}"
    );
    let title = b.js("return document.title").await;
    // The verdict, then the file's name as plain text.
    assert!(
        title
            .as_str()
            .unwrap()
            .ends_with(" · hostile.oomt · oomscope"),
        "{title}"
    );
    b.quit().await;
}

#[tokio::test]
async fn an_hour_at_1khz_fits_in_five_megabytes_and_draws_within_a_second() {
    use oomscope_testkit::synth::TrainingRun;
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("hour");
    let trace = s.write("hour.oomt", TrainingRun::hour_at_1khz().to_bytes());
    let html = s.path("hour.html");
    report(&trace, &html, &[]);
    let size = std::fs::metadata(&html).unwrap().len();
    assert!(size < 5_000_000, "report is {size} bytes");
    let summary = summary_json(&trace);

    let b = Browser::start("hour").await;
    b.open(&html).await;
    b.wait_for("body[data-first-chart-ms]").await;
    let first = as_f64(&b.js("return document.body.dataset.firstChartMs").await).unwrap();
    b.wait_for("#stage-table tbody tr").await;
    let analysed = as_f64(&b.js("return document.body.dataset.analysisMs").await).unwrap();
    let verdict = as_f64(&b.js("return document.body.dataset.verdictMs").await).unwrap();
    println!(
        "hour report: {size} bytes; verdict at {verdict:.0} ms, first chart at {first:.0} ms, \
         analysis done at {analysed:.0} ms"
    );
    // The verdict the report carries is on the page before the page's own analysis has run
    // (which waits for the first chart), and it is the verdict that analysis then shows.
    assert!(
        verdict <= first && first <= analysed,
        "{verdict} {first} {analysed}"
    );
    let carried = b
        .js(
            "const v = document.getElementById('oomscope-trace').dataset.verdict; \
             return new TextDecoder().decode(Uint8Array.from(atob(v), c => c.charCodeAt(0)))",
        )
        .await;
    let carried = oomscope_analysis::render::verdict::Verdict::from_text(carried.as_str().unwrap())
        .expect("the report carries a verdict");
    let strip = b.wait_for("#verdict[data-from='page']").await;
    assert_eq!(
        strip.attr("data-short").await.unwrap().as_deref(),
        Some(carried.short.as_str())
    );
    let lines = strip
        .find_all(By::Css(".verdict-line strong"))
        .await
        .unwrap();
    let mut said = Vec::new();
    for l in lines {
        said.push(l.text().await.unwrap());
    }
    let carried_said: Vec<String> = carried.lines.iter().map(|l| l.said.clone()).collect();
    assert_eq!(said, carried_said);
    // BENCHMARKS.md records the measured figure (target ≤ 1 s); the test leaves room for a
    // loaded CI machine but fails on a real regression.
    assert!(first < 2_500.0, "first chart took {first} ms");
    let notice = b.wait_for("#thinned-notice").await.text().await.unwrap();
    assert!(notice.contains("thinned copy"), "{notice}");
    // The thinned copy keeps what the analysis reads: same stage table as the full trace.
    assert_stage_table_matches(&b, &summary).await;
    b.quit().await;
}

/// The figures in BENCHMARKS.md: the hour report opened 5 times (first chart, analysis), and
/// the full 14 MB hour trace opened through the file picker (decode + first chart, redraw of
/// the whole hour and of a zoomed window). A measurement, not a check: run it on an idle
/// machine with `cargo test --release -p oomscope-e2e --test browser measure -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn measure_the_viewer_on_an_hour_at_1khz() {
    use oomscope_testkit::synth::TrainingRun;
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("measure");
    let trace = s.write("hour.oomt", TrainingRun::hour_at_1khz().to_bytes());
    let html = s.path("hour.html");
    // Other limits to measure with, e.g. `OOMSCOPE_REPORT_ARGS="--max-rows 0"`.
    let args = std::env::var("OOMSCOPE_REPORT_ARGS").unwrap_or_default();
    let args: Vec<&str> = args.split_whitespace().collect();
    report(&trace, &html, &args);
    println!(
        "report {args:?}: {} bytes",
        std::fs::metadata(&html).unwrap().len()
    );
    let viewer = empty_viewer(&s);
    let b = Browser::start("measure").await;
    for run in 0..5 {
        b.open(&html).await;
        b.wait_for("#stage-table tbody tr").await;
        let first = as_f64(&b.js("return document.body.dataset.firstChartMs").await).unwrap();
        let analysed = as_f64(&b.js("return document.body.dataset.analysisMs").await).unwrap();
        let tables = as_f64(&b.js("return document.body.dataset.tablesMs").await).unwrap();
        let verdict =
            as_f64(&b.js("return document.body.dataset.verdictMs").await).unwrap_or(f64::NAN);
        // (Absent from viewers built before these marks: NaN.)
        let started =
            as_f64(&b.js("return document.body.dataset.startMs").await).unwrap_or(f64::NAN);
        let read = as_f64(&b.js("return document.body.dataset.readMs").await).unwrap_or(f64::NAN);
        // The browser's own part of the start: the file read, then the HTML parsed.
        let navigation =
            |field: &str| format!("return performance.getEntriesByType('navigation')[0].{field}");
        let loaded = as_f64(&b.js(&navigation("responseEnd")).await).unwrap_or(f64::NAN);
        let parsed = as_f64(&b.js(&navigation("domInteractive")).await).unwrap_or(f64::NAN);
        println!(
            "report run {run}: page read {loaded:.0} ms, parsed {parsed:.0} ms, viewer started \
             {started:.0} ms, trace read {read:.0} ms, verdict {verdict:.0} ms, first chart \
             {first:.0} ms, analysis done {analysed:.0} ms, every table {tables:.0} ms"
        );
    }
    for run in 0..3 {
        b.open(&viewer).await;
        let input = b.wait_for("#open-input").await;
        let start = as_f64(&b.js("return performance.now()").await).unwrap();
        input
            .send_keys(trace.canonicalize().unwrap().display().to_string())
            .await
            .unwrap();
        b.wait_for("body[data-first-chart-ms]").await;
        let first = as_f64(&b.js("return document.body.dataset.firstChartMs").await).unwrap();
        b.wait_for("#stage-table tbody tr").await;
        let analysed = as_f64(&b.js("return document.body.dataset.analysisMs").await).unwrap();
        let whole = b
            .js("return document.getElementById('timeline-canvas').dataset.drawMs")
            .await;
        let mut zoomed = Vec::new();
        for _ in 0..6 {
            b.d()
                .find(By::Id("zoom-in"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            // The redraw happens in the next animation frame.
            tokio::time::sleep(Duration::from_millis(150)).await;
            zoomed.push(
                b.js("return document.getElementById('timeline-canvas').dataset.drawMs")
                    .await,
            );
        }
        println!(
            "full trace run {run}: first chart {:.0} ms after picking the file, analysis done {:.0} ms after; \
             redraw whole hour {whole} ms, zoomed in ×2..×64: {zoomed:?} ms",
            first - start,
            analysed - start
        );
    }
    b.quit().await;
}

/// The snapshot on the page reads as `collector summary` prints it (`text`, `json`): each device
/// line as the terminal's sentence, the sites alive at the peak as the JSON's, byte for byte, each
/// with its whole stack (holding `in_stack`) on hover. Returns the JSON's sites.
async fn assert_snapshot_reads_as_the_summary(
    b: &Browser,
    text: &str,
    json: &Value,
    in_stack: &str,
) -> Vec<Value> {
    for li in b
        .d()
        .find_all(By::Css(".snapshot-device .device-lines li"))
        .await
        .unwrap()
    {
        let line = li.text().await.unwrap();
        let first_words: String = line
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>().join(" "),
            terminal_sentence(text, &first_words)
        );
    }
    let rows = b
        .js("return [...document.querySelectorAll('table.at-peak tbody tr')].map(r => [r.dataset.site, Number(r.dataset.bytes), r.title])")
        .await;
    let expected = json["analysis"]["devices"][0]["at_peak"]
        .as_array()
        .unwrap()
        .clone();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), expected.len());
    for (row, want) in rows.iter().zip(&expected) {
        assert_eq!(row[0], want["site"]);
        assert_eq!(row[1], want["bytes"]);
        assert!(
            row[2].as_str().unwrap().contains(in_stack),
            "the whole stack on hover: {row}"
        );
    }
    expected
}

/// A snapshot written by CPython in torch's structure, large enough to be read in the page's
/// worker (over a megabyte deflated, 325 000 entries: more than one of the worker's messages
/// hold), and the facts its generator wrote beside it.
fn large_snapshot(s: &Scratch) -> (std::path::PathBuf, Value) {
    let pickle = s.path("large.pickle");
    let made = std::process::Command::new("python3")
        .arg(
            std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
                .join("../shared/snapshot/tests/data/make_snapshot.py"),
        )
        .arg(&pickle)
        .args(["--steps", "25000"])
        .status()
        .unwrap();
    assert!(made.success());
    let facts =
        serde_json::from_slice(&std::fs::read(s.path("large.pickle.json")).unwrap()).unwrap();
    (pickle, facts)
}

/// A snapshot too large to read at once as the page opens (over a megabyte deflated, and more
/// entries than one of the worker's messages holds): its report reads it in the page's Web
/// Worker, showing progress, and then shows what `collector summary` prints.
#[tokio::test]
async fn a_large_snapshot_report_is_read_in_the_background_as_the_summary_reads() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("snapshot-large");
    let (pickle, facts) = large_snapshot(&s);
    let entries = facts["entries"].as_u64().unwrap();
    assert!(
        entries > 1 << 18,
        "{entries} entries: more than one message"
    );
    let html = s.path("large.html");
    report(&pickle, &html, &[]);
    let text =
        String::from_utf8(run_collector(&["summary", pickle.to_str().unwrap()]).stdout).unwrap();
    let json: Value = serde_json::from_slice(
        &run_collector(&["summary", "--json", pickle.to_str().unwrap()]).stdout,
    )
    .unwrap();

    let b = Browser::start("snapshot-large").await;
    b.open(&html).await;
    b.wait_for("section.snapshot-device").await;
    assert_eq!(
        b.js("return document.body.dataset.snapshotWorker !== undefined")
            .await,
        Value::Bool(true)
    );
    let about = b.wait_for("#snapshot-about").await.text().await.unwrap();
    assert!(
        about.contains(&oomscope_format::units::format_count(entries)),
        "{about}: {entries} entries"
    );
    assert_snapshot_reads_as_the_summary(&b, &text, &json, "train.py").await;
    b.wait_for("canvas.snapshot-chart[data-scale]").await;
    assert!(painted_pixels_in(&b, "canvas.snapshot-chart").await > 1_000);
    let title = b.js("return document.title").await;
    assert!(
        title
            .as_str()
            .unwrap()
            .starts_with("Out of memory on GPU 1"),
        "{title}"
    );
    b.quit().await;
}

/// Issue 16's browser figures in BENCHMARKS.md: a 1 GB PyTorch memory snapshot (written by the
/// `snapshot_workload` example, torch's structure) picked in the empty viewer: how long until its
/// chart is drawn, the longest the page went without running its event loop while reading (a
/// 50 ms timer's largest gap), and the renderer processes' peak memory (RSS, from /proc). A
/// measurement: `cargo test --release -p oomscope-e2e --test browser measure_the_viewer_on_a_large
/// -- --ignored --nocapture` (`OOMSCOPE_SNAPSHOT_MB`, default 1024).
#[tokio::test]
#[ignore]
async fn measure_the_viewer_on_a_large_snapshot() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("measure-snapshot");
    let mb: u64 = std::env::var("OOMSCOPE_SNAPSHOT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let pickle = s.path("big.pickle");
    let made = std::process::Command::new(env!("CARGO"))
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "oomscope-analysis",
            "--example",
            "snapshot_workload",
            "--",
        ])
        .args([
            "--out",
            pickle.to_str().unwrap(),
            "--mb",
            &mb.to_string(),
            "--no-read",
        ])
        .status()
        .unwrap();
    assert!(made.success());
    let size = std::fs::metadata(&pickle).unwrap().len();
    let viewer = empty_viewer(&s);
    let b = Browser::start("measure-snapshot").await;
    b.open(&viewer).await;
    let input = b.wait_for("#open-input").await;
    b.js(
        "window.__gap = 0; window.__gaps = []; window.__last = performance.now(); \
          setInterval(() => { const now = performance.now(); const gap = now - window.__last; \
          if (gap > 250) window.__gaps.push([Math.round(window.__last), Math.round(gap)]); \
          window.__gap = Math.max(window.__gap, gap); window.__last = now; }, 50); return 1",
    )
    .await;
    let start = as_f64(&b.js("return performance.now()").await).unwrap();
    input
        .send_keys(pickle.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
    let mut statuses: Vec<String> = Vec::new();
    let mut peak_rss_kib = 0u64;
    let began = std::time::Instant::now();
    loop {
        peak_rss_kib = peak_rss_kib.max(renderer_rss_kib());
        let done = b
            .js("return !!document.querySelector('canvas.snapshot-chart[data-scale]') || !!document.querySelector('.banner.error')")
            .await;
        if done == Value::Bool(true) {
            break;
        }
        if let Value::String(t) = b
            .js("return document.getElementById('status').textContent")
            .await
            && statuses.last() != Some(&t)
        {
            statuses.push(t);
        }
        assert!(
            began.elapsed() < Duration::from_secs(900),
            "not open after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let now = as_f64(&b.js("return performance.now()").await).unwrap();
    let gap = as_f64(&b.js("return window.__gap").await).unwrap();
    let entries = b
        .js("return document.getElementById('snapshot-about').textContent")
        .await;
    let phases = b
        .js("const d = document.body.dataset; return [d.snapshotReadMs, d.snapshotAnalysisMs, d.snapshotStackedMs, d.snapshotReceivedMs].map(Number)")
        .await;
    let worker = b
        .js("const d = document.body.dataset; return d.snapshotWorkerFailed || (d.snapshotWorker ? 'read in the worker' : 'read in the page')")
        .await;
    // A phase the page did not go through (no hand-over when it read the file itself): NaN.
    let at = |i: usize| (phases[i].as_f64().unwrap_or(f64::NAN) - start) / 1000.0;
    // Every stall over 250 ms: when it began (s after picking) and how long it was (ms).
    let gaps: Vec<(f64, f64)> = b
        .js("return window.__gaps")
        .await
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| Some(((g[0].as_f64()? - start) / 1000.0, g[1].as_f64()?)))
        .collect();
    println!("stalls over 250 ms (s after picking, ms): {gaps:.1?}");
    println!(
        "{worker}: read done {:.1} s, analysis done {:.1} s, stacked timelines done {:.1} s, \
         received by the page {:.1} s after picking",
        at(0),
        at(1),
        at(2),
        at(3)
    );
    println!(
        "snapshot {size} bytes: chart drawn {:.1} s after picking it; longest stall {gap:.0} ms; \
         renderer peak RSS {} MiB; {} progress texts seen (last: {:?}); {entries}",
        (now - start) / 1000.0,
        peak_rss_kib / 1024,
        statuses.len(),
        statuses.last()
    );
    b.quit().await;
}

/// The resident memory of chromium's renderer processes, summed (KiB).
fn renderer_rss_kib() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains("--type=renderer") {
                return None;
            }
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum()
}

/// The ranks' figures in BENCHMARKS.md: a node of 8 ranks recorded for an hour at 100 Hz
/// (`synth::NodeRun`), its report's size and first chart and analysis (5 openings). A
/// measurement: `cargo test -p oomscope-e2e --test browser measure_the_viewer_on_8 -- --ignored
/// --nocapture` (the page's timings do not depend on the test's build profile).
#[tokio::test]
#[ignore]
async fn measure_the_viewer_on_8_ranks_for_an_hour() {
    use oomscope_testkit::synth::NodeRun;
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("measure-ranks");
    let trace = s.write("node8.oomt", NodeRun::default().to_bytes());
    let html = s.path("node8.html");
    report(&trace, &html, &[]);
    println!(
        "trace {} bytes, report {} bytes",
        std::fs::metadata(&trace).unwrap().len(),
        std::fs::metadata(&html).unwrap().len()
    );
    let b = Browser::start("measure-ranks").await;
    for run in 0..5 {
        b.open(&html).await;
        b.wait_for("#rank-table tbody tr").await;
        let first = as_f64(&b.js("return document.body.dataset.firstChartMs").await).unwrap();
        let analysed = as_f64(&b.js("return document.body.dataset.analysisMs").await).unwrap();
        let rows = b
            .js("return document.querySelectorAll('#rank-table tbody tr').length")
            .await;
        println!(
            "report run {run}: first chart {first:.0} ms, analysis done {analysed:.0} ms, {rows} rank rows"
        );
    }
    b.quit().await;
}

#[tokio::test]
async fn two_traces_dropped_on_the_empty_viewer_are_compared() {
    use base64::Engine as _;
    use oomscope_testkit::synth::TrainingRun;
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("drop");
    let viewer = empty_viewer(&s);
    let run = |leak: u64| {
        let r = TrainingRun {
            steps: 40,
            leak_bytes_per_step: leak,
            ..TrainingRun::default()
        };
        base64::engine::general_purpose::STANDARD.encode(r.to_bytes())
    };
    let (leaky, fixed) = (run(64 << 20), run(0));
    // The terminal's comparison of the same pair, the fix read from its report's `.html`.
    let b64 = base64::engine::general_purpose::STANDARD;
    let before = s.write("before.oomt", b64.decode(&leaky).unwrap());
    let after = s.write("after.oomt", b64.decode(&fixed).unwrap());
    let after_html = s.path("after.html");
    report(&after, &after_html, &[]);
    let o = run_collector(&[
        "summary",
        before.to_str().unwrap(),
        "--compare",
        after_html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let terminal = String::from_utf8(o.stdout).unwrap();
    let terminal_headline = terminal.lines().nth(1).unwrap().trim().to_owned();
    assert!(
        terminal_headline.starts_with("Leak gone; ")
            && terminal_headline.contains("peak_allocated -"),
        "{terminal}"
    );

    let b = Browser::start("drop").await;
    b.open(&viewer).await;
    b.wait_for("#dropzone").await;
    b.d()
        .execute(
            "const file = (b64, name) => new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name);
             const dt = new DataTransfer();
             dt.items.add(file(arguments[0], 'before.oomt'));
             dt.items.add(file(arguments[1], 'after.oomt'));
             document.getElementById('dropzone').dispatchEvent(
                 new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
             return 1;",
            vec![Value::from(leaky), Value::from(fixed)],
        )
        .await
        .unwrap();
    b.wait_for("#compare-stages tbody tr").await;
    let names = b.wait_for("#compare p").await.text().await.unwrap();
    assert!(
        names.contains("before.oomt") && names.contains("after.oomt"),
        "{names}"
    );
    let title = b.js("return document.title").await;
    assert!(
        title
            .as_str()
            .unwrap()
            .ends_with(" · before.oomt · oomscope"),
        "{title}"
    );
    let rows = b
        .js("return [...document.querySelectorAll('#compare-peaks tbody tr.better')].length")
        .await;
    assert!(rows.as_u64().unwrap() >= 1, "the fix lowers a peak: {rows}");

    // The findings diffed in the terminal's words, the leak named gone.
    let headline = b.wait_for("#compare-headline").await.text().await.unwrap();
    assert_eq!(headline, terminal_headline);
    let gone = b
        .js("return [...document.querySelectorAll('#compare-findings li.gone')].map(l => l.dataset.finding)")
        .await;
    assert_eq!(gone, serde_json::json!(["leak"]), "{terminal}");
    for li in b
        .d()
        .find_all(By::Css("#compare-findings li"))
        .await
        .unwrap()
    {
        let text = li.text().await.unwrap();
        assert!(terminal.contains(&text), "{text:?} not in\n{terminal}");
    }
    // Both runs overlaid by step: 40 steps each, the leaky one ending 39 × 64 MiB higher.
    let chart = b.wait_for("#compare-chart").await;
    let attr = |name: &'static str| {
        let chart = chart.clone();
        async move { chart.attr(name).await.unwrap().unwrap() }
    };
    assert_eq!(attr("data-a-steps").await, "40");
    assert_eq!(attr("data-b-steps").await, "40");
    let (a_last, b_last): (u64, u64) = (
        attr("data-a-last-bytes").await.parse().unwrap(),
        attr("data-b-last-bytes").await.parse().unwrap(),
    );
    assert!(a_last > b_last + 38 * (64 << 20), "{a_last} vs {b_last}");
    b.wait_for("#compare-chart[data-scale]").await;
    let pixels = painted_pixels(&b, "compare-chart").await;
    assert!(
        pixels > 1_000,
        "overlay looks blank ({pixels} painted pixels)"
    );
    b.screenshot_if_asked("#compare", "compare").await;
    b.quit().await;
}

#[tokio::test]
async fn what_was_alive_at_an_oom_reads_as_in_the_terminal() {
    // The v1.3 golden trace: an allocator-observer OOM of the zero-code hooks, then what was
    // alive at it by source line (`collector run --oom-snapshot`).
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("alive");
    let trace = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_3_alive_at_oom.oomt");
    let html = s.path("alive.html");
    report(&trace, &html, &[]);
    let text =
        String::from_utf8(run_collector(&["summary", trace.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("train.py:20 (forward)"), "{text}");

    let b = Browser::start("alive").await;
    b.open(&html).await;
    b.wait_for("#alive-at-oom tbody tr").await;
    let rows = b
        .d()
        .find_all(By::Css("#alive-at-oom tbody tr"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for row in &rows {
        let bytes = row.attr("data-bytes").await.unwrap().unwrap();
        seen.push((bytes, row.text().await.unwrap()));
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].0, (6u64 << 30).to_string());
    for (_, row) in &seen {
        // Every row's words, as the terminal prints them.
        let line = row.split_whitespace().collect::<Vec<_>>().join(" ");
        let terminal = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
        assert!(
            terminal.clone().any(|l| l == line),
            "{line:?} not in\n{text}"
        );
    }
    assert!(
        b.d().find(By::Css(".oom-snapshot")).await.is_err(),
        "no snapshot was saved with this trace"
    );

    // The same run had `--oom-snapshot` save the whole snapshot next to it (the trace names the
    // file): the report carries it, shown under the OOM with its own findings, chart
    // and blocks, as `collector summary` reads the pickle.
    let mut decoded = oomscope_format::decode(&std::fs::read(&trace).unwrap())
        .unwrap()
        .trace;
    decoded
        .saved_snapshots
        .push(oomscope_format::SavedSnapshot {
            t_us: decoded.ooms[0].t_us,
            file: "run.oom-4242.pickle".into(),
            pid: None,
        });
    let with_note = s.write(
        "run.oomt",
        oomscope_analysis::reduce::encode(&decoded).unwrap(),
    );
    // A small snapshot is read as the page opens, a large one in the page's worker.
    let small = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/snapshot/tests/data/small_p4.pickle");
    for (pickle, in_worker) in [(small, false), (large_snapshot(&s).0, true)] {
        std::fs::copy(&pickle, s.path("run.oom-4242.pickle")).unwrap();
        let html = s.path("run.html");
        report(&with_note, &html, &["--max-size-mb", "0"]);
        let json: Value = serde_json::from_slice(
            &run_collector(&["summary", "--json", pickle.to_str().unwrap()]).stdout,
        )
        .unwrap();
        b.open(&html).await;
        let attached = b.wait_for("#ooms details.oom-snapshot").await;
        assert_eq!(
            attached.attr("data-name").await.unwrap().as_deref(),
            Some("run.oom-4242.pickle")
        );
        b.wait_for("#oom-snapshot-findings").await;
        let peak = b
            .wait_for("#ooms .snapshot-device")
            .await
            .attr("data-peak-active-bytes")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            peak,
            json["analysis"]["devices"][0]["peak_active_bytes"].to_string()
        );
        assert_eq!(
            b.js("return document.body.dataset.snapshotWorker !== undefined")
                .await,
            Value::Bool(in_worker),
            "{}",
            pickle.display()
        );
        b.wait_for("#ooms canvas.snapshot-chart[data-scale]").await;
        b.wait_for("#ooms canvas.allocator-map[data-scale]").await;
    }
    // The trace's own sections are still the trace's.
    b.wait_for("#alive-at-oom tbody tr").await;
    b.quit().await;
}

#[tokio::test]
async fn a_kernel_oom_kill_reads_in_the_report_as_in_the_terminal() {
    // The v1.4 golden trace: a program with forked workers killed by the kernel's OOM killer in
    // a memory cgroup. The report's overview and findings say what the terminal says.
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("oom-kill");
    let trace = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_4_oom_kill.oomt");
    let html = s.path("kill.html");
    report(&trace, &html, &[]);
    let text =
        String::from_utf8(run_collector(&["summary", trace.to_str().unwrap()]).stdout).unwrap();
    assert!(
        text.contains("killed by signal 9: the kernel's OOM killer"),
        "{text}"
    );

    let b = Browser::start("oom-kill").await;
    b.open(&html).await;
    b.wait_for("#findings article").await;
    let overview = b
        .d()
        .find(By::Id("overview"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        overview.contains("killed by signal 9: the kernel's OOM killer"),
        "{overview}"
    );
    assert!(
        overview.contains("The kernel's OOM killer killed python (pid 4242, the program)"),
        "{overview}"
    );
    let first = b.d().find(By::Css("#findings article")).await.unwrap();
    assert_eq!(
        first.attr("data-id").await.unwrap().as_deref(),
        Some("host-memory-pressure")
    );
    let words = first.text().await.unwrap();
    assert!(
        words.contains("The program was killed by the kernel's OOM killer"),
        "{words}"
    );
    assert!(text.contains("The program was killed by the kernel's OOM killer"));
    b.quit().await;
}

#[tokio::test]
async fn the_breakdown_beside_its_estimate_reads_in_the_report_as_in_the_terminal() {
    // The H200 GPU proof's diffusion loop (format 1.10, the hooks' parameter counts): the
    // terminal summary ends with the breakdown beside `collector estimate` for the same model;
    // the report's breakdown section shows the same parts and numbers.
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("against-estimate");
    let trace = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/gpu/h200_v1_10_breakdown.oomt");
    let html = s.path("breakdown.html");
    report(&trace, &html, &[]);
    let summary = summary_json(&trace);
    let against = &summary["analysis"]["against_estimate"];
    let want: Vec<(String, u64, u64)> = against["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["part"].as_str().unwrap().to_owned(),
                p["measured_bytes"].as_u64().unwrap(),
                p["estimated_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(want.len(), 3, "{against}");
    let text = collapsed(&String::from_utf8_lossy(
        &run_collector(&["summary", trace.to_str().unwrap()]).stdout,
    ));

    let b = Browser::start("against-estimate").await;
    b.open(&html).await;
    b.wait_for("#against-estimate tr[data-part]").await;
    let rows = b
        .js("return [...document.querySelectorAll('#against-estimate tr[data-part]')].map(r => [r.dataset.part, +r.dataset.measured, +r.dataset.estimated])")
        .await;
    let got: Vec<(String, u64, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                r[1].as_u64().unwrap(),
                r[2].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
    let heading = words(&b, "#against-estimate p").await;
    assert!(
        heading.contains("collector estimate --params 67160064 --precision fp32 --optimizer adamw"),
        "{heading}"
    );
    assert!(
        text.contains(&heading),
        "`{heading}` is not in the terminal's summary"
    );
    b.quit().await;
}

/// The text of an element, its whitespace collapsed.
async fn words(b: &Browser, css: &str) -> String {
    let text = b.wait_for(css).await.text().await.unwrap();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The terminal's line starting with `prefix` (after its indent), whitespace collapsed; wrapped
/// continuation lines joined.
fn terminal_sentence(text: &str, prefix: &str) -> String {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(prefix));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no `{prefix}` in\n{text}"));
    let indent = first.len() - first.trim_start().len();
    let mut sentence = first.trim().to_owned();
    for l in lines {
        // `wrap` indents continuation lines two more than the sentence's first line.
        if l.len() - l.trim_start().len() != indent + 2 || l.trim().is_empty() {
            break;
        }
        sentence.push(' ');
        sentence.push_str(l.trim());
    }
    sentence.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each rank row's `(rank, marks, host peak)` as the page holds them in `data-` attributes (no
/// host peak when the rank's process ended before the tree's poller read it).
async fn rank_rows(b: &Browser, table: &str) -> Vec<(u64, u64, Option<u64>)> {
    let rows = b
        .js(&format!(
            "return [...document.querySelectorAll('#{table} tbody tr')].map(r => [r.dataset.rank, r.dataset.marks, r.dataset.peakHostBytes])"
        ))
        .await;
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |i: usize| as_f64(&r[i]).map(|v| v as u64);
            (n(0).unwrap(), n(1).unwrap(), n(2))
        })
        .collect()
}

/// The same rows from `collector summary --json`'s rank analysis.
fn summary_rank_rows(ranks: &Value) -> Vec<(u64, u64, Option<u64>)> {
    ranks["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["marks"].as_u64().unwrap(),
                r["peak_host_bytes"].as_u64(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_torchrun_trace_shows_its_ranks_and_one_rank_at_a_time() {
    // The v1.5 golden trace: torchrun's agent with two ranks, rank 1 running out of host memory.
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("ranks");
    let trace = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_5_ranks.oomt");
    let html = s.path("ranks.html");
    report(&trace, &html, &[]);
    let summary = summary_json(&trace);
    let ranks = &summary["analysis"]["ranks"];
    let text =
        String::from_utf8(run_collector(&["summary", trace.to_str().unwrap()]).stdout).unwrap();

    let b = Browser::start("ranks").await;
    b.open(&html).await;
    b.wait_for("#rank-table tbody tr").await;
    assert_eq!(
        rank_rows(&b, "rank-table").await,
        summary_rank_rows(ranks),
        "the rank table's numbers"
    );
    assert_eq!(
        words(&b, "#rank-highest").await,
        terminal_sentence(&text, "highest: rank")
    );
    // The drill-down opens on the highest rank; choosing the other shows its own stage table.
    for want in [1u64, 0] {
        b.js(&format!(
            "const s = document.getElementById('rank-select'); s.value = '{want}'; s.dispatchEvent(new Event('change')); return 1"
        ))
        .await;
        let counts = b
            .js("return [...document.querySelectorAll('#rank-stage-table tbody tr')].map(r => [r.dataset.stage, Number(r.dataset.count)])")
            .await;
        let rank = ranks["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rank"] == want)
            .unwrap();
        let expected: Vec<Value> = rank["stage_table"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| serde_json::json!([r["stage"], r["count"]]))
            .collect();
        assert!(!expected.is_empty(), "rank {want} has stages");
        assert_eq!(counts.as_array().unwrap(), &expected, "rank {want}");
    }

    // A small chart per rank on one scale: its peak is the rank table's, the highest rank (the
    // summary's worst) is the one drawn in red, and clicking a chart opens that rank below.
    let figures = b
        .js("return [...document.querySelectorAll('#rank-multiples figure')].map(f => [Number(f.dataset.rank), Number(f.dataset.peakBytes), f.classList.contains('worst')])")
        .await;
    let expected: Vec<Value> = ranks["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let rank = r["rank"].as_u64().unwrap();
            let highest = text.contains(&format!("highest: rank {rank} "));
            serde_json::json!([rank, r["peak_host_bytes"], highest])
        })
        .collect();
    assert_eq!(figures.as_array().unwrap(), &expected, "{text}");
    b.wait_for("#rank-multiples figure[data-rank='0'] canvas[data-scale]")
        .await;
    assert!(painted_pixels_in(&b, "#rank-multiples figure[data-rank='0'] canvas").await > 100);
    b.d()
        .find(By::Css("#rank-multiples figure[data-rank='1']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let picked = b
        .js("return document.getElementById('rank-select').value")
        .await;
    assert_eq!(picked, "1");
    assert_eq!(
        b.js("return document.querySelector('#rank-multiples figure.selected').dataset.rank")
            .await,
        "1"
    );
    b.screenshot_if_asked("#ranks", "ranks").await;
    b.quit().await;
}

#[tokio::test]
async fn a_report_of_a_job_directory_puts_every_node_s_ranks_together() {
    // Two ranks recorded the way `srun` runs one task per GPU: a collector each, the rank in
    // the program's environment; rank 1 keeps 8 MiB a step.
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("job");
    let script = s.write("train.py", TRAIN.as_bytes());
    let dir = s.path("job");
    std::fs::create_dir_all(&dir).unwrap();
    for (rank, leak) in [("0", "0"), ("1", "8")] {
        record_with(
            &script,
            &[leak, "ok"],
            &dir.join(format!("node-{rank}.oomt")),
            &[("RANK", rank), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "2")],
        );
    }
    let html = s.path("job.html");
    report(&dir, &html, &[]);
    let o = run_collector(&["summary", "--json", dir.to_str().unwrap()]);
    let job: Value = serde_json::from_slice(&o.stdout).unwrap();
    let text =
        String::from_utf8(run_collector(&["summary", dir.to_str().unwrap()]).stdout).unwrap();

    let b = Browser::start("job").await;
    b.open(&html).await;
    b.wait_for("#job-rank-table tbody tr").await;
    assert_eq!(
        rank_rows(&b, "job-rank-table").await,
        summary_rank_rows(&job["ranks"]),
        "the job's rank table"
    );
    assert_eq!(rank_rows(&b, "job-rank-table").await.len(), 2);
    assert_eq!(
        words(&b, "#job-rank-imbalance").await,
        terminal_sentence(&text, "imbalance at"),
        "the planted 240 MiB on rank 1, in the terminal's words"
    );
    let ids = b
        .js("return [...document.querySelectorAll('#job-findings article')].map(a => a.dataset.id)")
        .await;
    let want: Vec<Value> = job["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].clone())
        .collect();
    assert_eq!(ids.as_array().unwrap(), &want);
    assert!(want.iter().any(|id| id == "rank-imbalance"), "{want:?}");
    // One trace at a time below: the second node's own report.
    b.js("const s = document.getElementById('trace-select'); s.value = '1'; s.dispatchEvent(new Event('change')); return 1")
        .await;
    let title = b.js("return document.title").await;
    assert_eq!(title.as_str().unwrap(), "oomscope: a job of 2 traces");
    let overview = words(&b, "#overview").await;
    assert!(overview.contains("node-1.oomt"), "{overview}");
    b.wait_for("#stage-table tbody tr").await;
    b.quit().await;
}

#[tokio::test]
async fn the_verdict_is_in_the_first_screen_for_a_leak_an_oom_a_clean_run_and_no_marks() {
    use oomscope_testkit::synth::TrainingRun;
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("verdict");
    let leak = s.write(
        "leak.oomt",
        TrainingRun {
            steps: 60,
            leak_bytes_per_step: 64 << 20,
            ..TrainingRun::default()
        }
        .to_bytes(),
    );
    let clean = s.write("clean.oomt", TrainingRun::default().to_bytes());
    let oom = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_0_oom.oomt");
    // A real recording without stage marks.
    let unmarked = s.path("unmarked.oomt");
    let o = run_collector(&[
        "run",
        "-q",
        "-o",
        unmarked.to_str().unwrap(),
        "--",
        "sleep",
        "0.3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let b = Browser::start("verdict").await;
    b.d().set_window_rect(0, 0, 1400, 760).await.unwrap();
    for (trace, want) in [
        (&leak, "li[data-id=leak]"),
        (&oom, "li[data-id=oom]"),
        (&clean, "#verdict-clean"),
        (&unmarked, "#verdict-clean"),
    ] {
        let html = s.path("r.html");
        report(trace, &html, &[]);
        b.open(&html).await;
        let el = b.wait_for(&format!("#verdict {want}")).await;
        // Within the first screen, without scrolling.
        let bottom = b
            .js(&format!(
                "return document.querySelector('#verdict {want}').getBoundingClientRect().bottom <= window.innerHeight"
            ))
            .await;
        assert_eq!(bottom, Value::Bool(true), "{want} below the fold");
        let words = el.text().await.unwrap();
        let summary = summary_json(trace);
        let findings = summary["analysis"]["findings"].as_array().unwrap().clone();
        match want {
            "#verdict-clean" => {
                assert!(
                    findings.iter().all(|f| f["severity"] == "info"),
                    "clean only without problems: {findings:?}"
                );
                let no_marks = trace == &unmarked;
                assert_eq!(words.contains("without stage marks"), no_marks, "{words}");
            }
            _ => {
                // The line says the finding's own title, as the terminal does.
                let id = want.trim_start_matches("li[data-id=").trim_end_matches(']');
                let f = findings.iter().find(|f| f["id"] == id).unwrap();
                assert!(
                    words.contains(f["title"].as_str().unwrap()),
                    "{words} vs {f}"
                );
            }
        }
        // The verdict in the tab title.
        let short = el.attr("data-id").await.unwrap();
        let title = b.js("return document.title").await;
        let verdict_short = b
            .js("return document.getElementById('verdict').dataset.short")
            .await;
        assert!(
            title
                .as_str()
                .unwrap()
                .starts_with(verdict_short.as_str().unwrap()),
            "{title} / {verdict_short} / {short:?}"
        );
    }
    b.quit().await;
}

/// A leak, evals that keep memory, and allocator retries: the report's evidence to highlight.
fn leak_and_evals() -> Vec<u8> {
    oomscope_testkit::synth::TrainingRun {
        steps: 160,
        leak_bytes_per_step: 48 << 20,
        eval_every: Some(40),
        eval_steps: 3,
        eval_retained_bytes: 1 << 30,
        ..oomscope_testkit::synth::TrainingRun::default()
    }
    .to_bytes()
}

/// The text of every element matching `css`, whitespace collapsed.
async fn all_words(b: &Browser, css: &str) -> Vec<String> {
    let v = b
        .js(&format!(
            "return [...document.querySelectorAll('{css}')].map(e => e.textContent.split(/\\s+/).filter(Boolean).join(' '))"
        ))
        .await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn the_page_has_every_terminal_section_and_highlights_the_evidence_not_the_warm_up() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("sections");
    let trace = s.write("evidence.oomt", leak_and_evals());
    let summary = summary_json(&trace);
    let ids: Vec<&str> = summary["analysis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"leak") && ids.contains(&"eval-retains-memory"),
        "{ids:?}"
    );
    let o = run_collector(&["summary", trace.to_str().unwrap()]);
    let terminal = collapsed(&String::from_utf8_lossy(&o.stdout));
    let html = s.path("evidence.html");
    report(&trace, &html, &[]);

    let b = Browser::start("sections").await;
    b.open(&html).await;
    b.wait_for("#leak-fits li").await;
    // The terminal's lines, all of them (the terminal lists five evals; this run has four).
    for css in [
        "#leak-fits li",
        "#largest-rise li",
        "#evals li",
        "#allocator li",
    ] {
        let lines = all_words(&b, css).await;
        assert!(!lines.is_empty(), "{css} is empty");
        for line in lines {
            let line = line.trim_end_matches(" kept the most");
            assert!(
                terminal.contains(line),
                "{css}: `{line}` is not in the terminal's summary"
            );
        }
    }
    let leaking: Vec<String> = summary["analysis"]["leak_fits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["is_leak"] == true)
        .map(|f| f["stage"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(all_words(&b, "#leak-fits li").await.len(), {
        let mut stages = leaking.clone();
        stages.dedup();
        stages.len()
    });
    // Emphasis: the leaking stages and the eval that kept the most, in the warning colour; the
    // first step's warm-up only outlined and named.
    let evidence = b
        .js("return [...document.querySelectorAll('#stage-table tr.evidence')].map(r => r.dataset.stage)")
        .await;
    let evidence: Vec<&str> = evidence
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!evidence.is_empty());
    assert!(
        evidence.iter().all(|st| leaking.iter().any(|l| l == st)),
        "{evidence:?}"
    );
    let colours = b
        .js("const bg = (css) => { const e = document.querySelector(css); return e ? getComputedStyle(e).backgroundColor : null; };
             return [bg('#stage-table tr.evidence td'), bg('#stage-table tr:not(.evidence) td'), bg('#stage-table tr.largest-growth:not(.evidence) td')]")
        .await;
    let c = colours.as_array().unwrap();
    assert_ne!(c[0], c[1], "evidence rows stand out: {colours}");
    if !c[2].is_null() {
        assert_ne!(
            c[2], c[0],
            "the largest rise is not painted as evidence: {colours}"
        );
    }
    let growth = words(&b, "#largest-growth").await;
    let first_step = summary["analysis"]["largest_growth"]["step"]
        .as_u64()
        .unwrap()
        == 0;
    assert_eq!(growth.contains("warm-up"), first_step, "{growth}");
    let kept = b
        .js("return document.querySelector('#evals li.evidence').dataset.step")
        .await;
    let worst = summary["analysis"]["phase_transitions"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|t| {
            (
                t["retained_bytes"].as_i64().unwrap_or(0),
                -t["entry_step"].as_i64().unwrap(),
            )
        })
        .unwrap()["entry_step"]
        .to_string();
    assert_eq!(kept.as_str().unwrap(), worst);
    // The step table: deltas since the previous mark (the stage table's max delta is a cell),
    // jump to a step.
    b.js("const i = document.getElementById('step-jump'); i.value = '123'; i.dispatchEvent(new Event('change')); return 1")
        .await;
    let focused = b.wait_for("#step-table tr.focused").await;
    assert_eq!(
        focused.attr("data-step").await.unwrap().as_deref(),
        Some("123")
    );
    // The per-step chart reaches the leak's projected step.
    let full = b
        .wait_for("#step-chart")
        .await
        .attr("data-full-at-step")
        .await
        .unwrap();
    let projected = summary["analysis"]["leak_fits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["is_leak"] == true)
        .unwrap()["projection"]["full_at_step"]
        .to_string();
    assert_eq!(full.as_deref(), Some(projected.as_str()));
    assert!(painted_pixels(&b, "step-chart").await > 1_000);
    b.quit().await;

    // An OOM: its details and the program's own error line.
    let oom = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/format/tests/data/v1_0_oom.oomt");
    let summary = summary_json(&oom);
    let html = s.path("oom.html");
    report(&oom, &html, &[]);
    let b = Browser::start("sections-oom").await;
    b.open(&html).await;
    let line = words(&b, "#ooms pre.error-line").await;
    let message = summary["analysis"]["ooms"][0]["message"].as_str().unwrap();
    assert_eq!(line, collapsed(message.lines().next().unwrap()));
    let o = run_collector(&["summary", oom.to_str().unwrap()]);
    let terminal = collapsed(&String::from_utf8_lossy(&o.stdout));
    let said = words(&b, "#ooms li.oom-line").await;
    let first = said.split(" torch.").next().unwrap();
    assert!(terminal.contains(first), "`{first}`");
    // The OOM's step is marked in the step table, and the table opens on it.
    b.wait_for("#step-table tr.oom-step[data-step='12']").await;
    b.quit().await;
}

#[tokio::test]
async fn the_timeline_follows_the_screen_the_keyboard_and_dark_mode() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("screen");
    let trace = s.write("screen.oomt", leak_and_evals());
    let html = s.path("screen.html");
    report(&trace, &html, &[]);
    let b = Browser::start("screen").await;
    b.d().set_window_rect(0, 0, 1400, 900).await.unwrap();
    b.open(&html).await;
    b.wait_for("#findings").await;
    let size = || async {
        let v = b
            .js("const c = document.getElementById('timeline-canvas'); return [c.width, c.clientWidth, c.height, c.clientHeight, Number(c.dataset.scale)]")
            .await;
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect::<Vec<f64>>()
    };
    let wide = size().await;
    assert_eq!(
        wide[0], wide[1],
        "backing store = CSS width at ratio 1: {wide:?}"
    );
    // A narrower window redraws at the new width.
    b.d().set_window_rect(0, 0, 1000, 900).await.unwrap();
    let mut narrow = size().await;
    for _ in 0..40 {
        if narrow[0] < wide[0] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        narrow = size().await;
    }
    assert!(
        narrow[0] < wide[0] && narrow[0] == narrow[1],
        "{wide:?} → {narrow:?}"
    );
    // Device-pixel ratio 2: the canvas holds twice the pixels in each direction.
    let cdp = b.d().cdp();
    cdp.send_raw(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 1200, "height": 900, "deviceScaleFactor": 2, "mobile": false}),
    )
    .await
    .unwrap();
    b.open(&html).await;
    b.wait_for("#findings").await;
    let mut hi = size().await;
    for _ in 0..40 {
        if hi[4] == 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        hi = size().await;
    }
    assert_eq!(
        (hi[0], hi[2], hi[4]),
        (hi[1] * 2.0, hi[3] * 2.0, 2.0),
        "{hi:?}"
    );
    cdp.send_raw(
        "Emulation.clearDeviceMetricsOverride",
        serde_json::json!({}),
    )
    .await
    .unwrap();
    // The keyboard: + zooms in, 0 shows the whole run again.
    b.open(&html).await;
    b.wait_for("#findings").await;
    let picture = "return document.getElementById('timeline-canvas').toDataURL()";
    tokio::time::sleep(Duration::from_millis(300)).await;
    let whole = b.js(picture).await;
    let canvas = b.d().find(By::Id("timeline-canvas")).await.unwrap();
    canvas.click().await.unwrap();
    canvas.send_keys("+").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(b.js(picture).await, whole, "+ zooms in");
    canvas.send_keys("0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.js(picture).await, whole, "0 shows the whole run");
    // Dark mode: the page and the charts follow prefers-color-scheme.
    cdp.send_raw(
        "Emulation.setEmulatedMedia",
        serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    )
    .await
    .unwrap();
    b.open(&html).await;
    b.wait_for("#findings").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dark = b
        .js("const luma = (rgb) => { const [r, g, b] = rgb.match(/\\d+/g).map(Number); return (r + g + b) / 3; };
             const px = document.getElementById('timeline-canvas').getContext('2d').getImageData(2, 2, 1, 1).data;
             return [luma(getComputedStyle(document.body).backgroundColor), (px[0] + px[1] + px[2]) / 3, luma(getComputedStyle(document.body).color)]")
        .await;
    let d: Vec<f64> = dark
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        d[0] < 60.0 && d[1] < 60.0 && d[2] > 180.0,
        "dark page, dark chart, light text: {d:?}"
    );
    b.quit().await;
}

#[tokio::test]
async fn a_report_printed_to_pdf_by_headless_chromium_holds_the_findings_and_the_tables() {
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("pdf");
    let trace = s.write("print.oomt", leak_and_evals());
    let summary = summary_json(&trace);
    let html = s.path("print.html");
    report(&trace, &html, &[]);
    let profile = s.path("profile");
    let pdf = s.path("print.pdf");
    // What people run to attach a PDF to a ticket: no waiting flags.
    let o = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--print-to-pdf={}", pdf.display()),
        ])
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        pdf.exists(),
        "no PDF: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let python = std::path::PathBuf::from(std::env::var("OOMSCOPE_TORCH_VENV").expect(
        "OOMSCOPE_TORCH_VENV (source scripts/env.sh; scripts/setup-torch.sh installs pypdf)",
    ))
    .join("bin/python");
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import sys, pypdf; print('\\n'.join(p.extract_text() for p in pypdf.PdfReader(sys.argv[1]).pages))",
        ])
        .arg(&pdf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = collapsed(&String::from_utf8_lossy(&out.stdout));
    assert!(!text.contains("analysing…"), "printed before the analysis");
    for f in summary["analysis"]["findings"].as_array().unwrap() {
        let title = f["title"].as_str().unwrap();
        assert!(
            text.contains(&collapsed(title)),
            "finding `{title}` is not in the PDF"
        );
    }
    for section in [
        "Stages",
        "Steps (",
        "Leaks (memory at the same stage, across steps)",
        "Memory per step",
    ] {
        assert!(text.contains(section), "`{section}` is not in the PDF");
    }
    // The whole step table, not the page on screen: its last training step is printed.
    let last = summary["analysis"]["overview"]["last_step"]
        .as_u64()
        .unwrap_or(159);
    assert!(
        text.contains(&format!(" {last} ")),
        "step {last} is not in the PDF"
    );
    // Controls are not printed.
    assert!(
        !text.contains("Zoom in") && !text.contains("Open trace(s)"),
        "controls printed"
    );
}

#[tokio::test]
async fn a_memory_snapshot_opens_in_a_report_and_in_the_viewer_as_the_summary_reads() {
    // A pickle written by CPython in torch's structure (shared/snapshot/tests/data).
    let _one = ONE_BROWSER.lock().await;
    let s = Scratch::new("snapshot");
    let pickle = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../shared/snapshot/tests/data/small_p4.pickle");
    let html = s.path("snap.html");
    let out = report(&pickle, &html, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text =
        String::from_utf8(run_collector(&["summary", pickle.to_str().unwrap()]).stdout).unwrap();
    let json: Value = serde_json::from_slice(
        &run_collector(&["summary", "--json", pickle.to_str().unwrap()]).stdout,
    )
    .unwrap();
    let viewer = empty_viewer(&s);
    // A page whose policy forbids workers reads a picked snapshot itself, a slice at a time.
    let no_worker = s.path("no-worker.html");
    let page = std::fs::read_to_string(&viewer).unwrap();
    assert!(page.contains("worker-src blob:; "));
    std::fs::write(&no_worker, page.replace("worker-src blob:; ", "")).unwrap();

    let b = Browser::start("snapshot").await;
    // The report (a small snapshot is read at once), picked in the viewer (read in its worker),
    // picked where no worker may run.
    for (page, via_picker, in_worker) in [
        (&html, false, false),
        (&viewer, true, true),
        (&no_worker, true, false),
    ] {
        b.open(page).await;
        if via_picker {
            b.wait_for("#open-input")
                .await
                .send_keys(pickle.canonicalize().unwrap().display().to_string())
                .await
                .unwrap();
        }
        b.wait_for("section.snapshot-device").await;
        let worker = b
            .js("return document.body.dataset.snapshotWorker !== undefined")
            .await;
        assert_eq!(worker, Value::Bool(in_worker), "{}", page.display());
        // Where the page read a picked file itself, it says why: the policy refused the worker.
        let refused = b
            .js("return document.body.dataset.snapshotWorkerFailed || null")
            .await;
        assert_eq!(
            refused.is_string(),
            via_picker && !in_worker,
            "{}: {refused}",
            page.display()
        );
        assert!(
            b.d().find(By::Css(".banner.error")).await.is_err(),
            "{}",
            page.display()
        );
        // Findings: the summary's titles, in its order.
        let titles = b
            .js("return [...document.querySelectorAll('#findings h3')].map(e => e.textContent)")
            .await;
        let findings = json["analysis"]["findings"].as_array().unwrap();
        let page_text = b
            .js("return document.getElementById('findings').textContent")
            .await;
        for f in findings {
            let title = f["title"].as_str().unwrap();
            assert!(
                page_text.as_str().unwrap().contains(title),
                "{title} in {titles}"
            );
        }
        let expected = assert_snapshot_reads_as_the_summary(
            &b,
            &text,
            &json,
            "site-packages/torch/nn/modules",
        )
        .await;
        b.wait_for("canvas.snapshot-chart[data-scale]").await;
        assert!(painted_pixels_in(&b, "canvas.snapshot-chart").await > 1_000);
        // Active memory stacked by site: the site holding the most at the peak has its band,
        // with its whole stack on hover of the legend.
        let bands = b
            .js("return [...document.querySelectorAll('.snapshot-legend li')].map(l => [l.dataset.band, l.title])")
            .await;
        let bands = bands.as_array().unwrap();
        assert!(bands.len() >= 2, "{bands:?}");
        let top_site = &expected[0]["site"];
        let band = bands
            .iter()
            .find(|b| &b[0] == top_site)
            .unwrap_or_else(|| panic!("{top_site} among the bands {bands:?}"));
        assert!(band[1].as_str().unwrap().contains("train.py"), "{band}");
        assert_eq!(
            bands.last().unwrap()[0],
            "(allocated before the recorded window)"
        );
        // Hovering the chart names what is there; clicking lists what was alive then, adding up
        // to the active bytes `collector export` gives after that entry.
        let canvas = b.wait_for("canvas.snapshot-chart[data-plot-x]").await;
        let plot = b
            .js("return document.querySelector('canvas.snapshot-chart').dataset.plotX.split(',').map(Number).concat([document.querySelector('canvas.snapshot-chart').clientWidth])")
            .await;
        let (x0, x1, width) = (
            plot[0].as_f64().unwrap(),
            plot[1].as_f64().unwrap(),
            plot[2].as_f64().unwrap(),
        );
        // Two thirds of the way along, low in the plot: inside the stacked bands.
        let x = x0 + (x1 - x0) * 2.0 / 3.0 - width / 2.0;
        canvas.scroll_into_view().await.unwrap();
        b.d()
            .action_chain()
            .move_to_element_with_offset(&canvas, x as i64, 60)
            .perform()
            .await
            .unwrap();
        let tip = b
            .wait_for(".snapshot-device .tooltip")
            .await
            .text()
            .await
            .unwrap();
        assert!(tip.contains("active "), "{tip}");
        b.d()
            .action_chain()
            .move_to_element_with_offset(&canvas, x as i64, 60)
            .click()
            .perform()
            .await
            .unwrap();
        let alive = b.wait_for(".alive-at").await;
        let entry: usize = alive
            .attr("data-entry")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        let total: u64 = alive
            .attr("data-bytes")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        let csv = String::from_utf8(
            run_collector(&["export", pickle.to_str().unwrap(), "--format", "csv"]).stdout,
        )
        .unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let active = header.iter().position(|c| *c == "active_bytes").unwrap();
        let row: Vec<&str> = csv.lines().nth(entry + 1).unwrap().split(',').collect();
        assert_eq!(row[active].parse::<u64>().unwrap(), total, "entry {entry}");
        let listed = b
            .js("return [...document.querySelectorAll('table.alive-blocks tbody tr')].reduce((s, r) => s + Number(r.dataset.bytes), 0)")
            .await;
        let before: u64 = alive
            .attr("data-before-bytes")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(listed.as_u64().unwrap() + before, total);
        let line = b.wait_for(".alive-line").await.text().await.unwrap();
        assert!(
            line.starts_with(&format!("Alive after entry {} (+", entry + 1)),
            "{line}"
        );
        // The allocator's state at the dump: the device's segment drawn, its first block named
        // on hover with its state and, when held, its site.
        let map = b.wait_for("canvas.allocator-map[data-scale]").await;
        assert_eq!(
            map.attr("data-segments").await.unwrap().as_deref(),
            Some("1")
        );
        assert!(painted_pixels_in(&b, "canvas.allocator-map").await > 500);
        map.scroll_into_view().await.unwrap();
        let size = b
            .js("const c = document.querySelector('canvas.allocator-map'); return [c.clientWidth, c.clientHeight]")
            .await;
        let (w, h) = (size[0].as_f64().unwrap(), size[1].as_f64().unwrap());
        b.d()
            .action_chain()
            .move_to_element_with_offset(
                &map,
                (78.0 + 5.0 - w / 2.0) as i64,
                (11.0 - h / 2.0) as i64,
            )
            .perform()
            .await
            .unwrap();
        let tip = b
            .wait_for(".snapshot-device .chart-wrap:has(canvas.allocator-map) .tooltip")
            .await
            .text()
            .await
            .unwrap();
        assert!(tip.contains("· allocated"), "{tip}");
        assert!(tip.contains("train.py:30 (build_model)"), "{tip}");
        let title = b.js("return document.title").await;
        assert!(
            title
                .as_str()
                .unwrap()
                .starts_with("Out of memory on GPU 1"),
            "{title}"
        );
    }
    b.screenshot_if_asked("section.snapshot-device", "snapshot")
        .await;
    b.quit().await;
}

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
