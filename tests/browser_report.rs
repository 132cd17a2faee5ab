//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
//!
//! Here: a report reads as `collector summary` and compares a second trace, two traces dropped on
//! the empty viewer are compared, and damaged, foreign or hostile files show a message or text,
//! never a blank page or running markup. One of the `browser_*` targets, split by what they test
//! so that each reads in one sitting; their shared helpers are in `support.rs` and `page.rs`.

use std::time::Duration;

use oomscope_e2e::page::{as_f64, assert_stage_table_matches, painted_pixels};
use oomscope_e2e::{
    Browser, ONE_BROWSER, Scratch, TRAIN, empty_viewer, record, report, run_collector, summary_json,
};
use serde_json::Value;
use thirtyfour::prelude::*;

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
