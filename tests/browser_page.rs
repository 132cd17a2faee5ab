//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
//!
//! Here: the page as a reader meets it. The verdict in the first screen, every section the
//! terminal prints (a kernel OOM kill, the breakdown beside its estimate) with the evidence
//! highlighted, the timeline following the screen, the keyboard and dark mode, and the report
//! printed to PDF. One of the `browser_*` targets, split by what they test so that each reads in
//! one sitting.

use std::time::Duration;

use oomscope_e2e::page::{all_words, collapsed, painted_pixels, words};
use oomscope_e2e::{Browser, ONE_BROWSER, Scratch, report, run_collector, summary_json};
use serde_json::Value;
use thirtyfour::prelude::*;

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
