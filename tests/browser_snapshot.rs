//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
//!
//! Here: PyTorch memory snapshots and what was alive at an OOM. A snapshot report (a large one
//! read in the page's worker), a snapshot picked in the empty viewer, and the OOM's live blocks
//! read as `collector summary` prints them. One of the `browser_*` targets, split by what they
//! test so that each reads in one sitting.

use oomscope_e2e::page::{painted_pixels_in, terminal_sentence};
use oomscope_e2e::{Browser, ONE_BROWSER, Scratch, empty_viewer, report, run_collector};
use serde_json::Value;
use thirtyfour::prelude::*;

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
        oomscope_report::reduce::encode(&decoded).unwrap(),
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
