//! The viewer in a real browser: traces recorded by the collector from real child processes,
//! written into self-contained reports by `collector report`, opened from `file://` in headless
//! Debian chromium through chromedriver.
//!
//! Here: distributed runs. A torchrun trace shows its ranks and one rank at a time, and a job
//! directory's report puts every node's ranks together, as `collector summary` counts them. One
//! of the `browser_*` targets, split by what they test so that each reads in one sitting.

use oomscope_e2e::page::{as_f64, painted_pixels_in, terminal_sentence, words};
use oomscope_e2e::{
    Browser, ONE_BROWSER, Scratch, TRAIN, record_with, report, run_collector, summary_json,
};
use serde_json::Value;
use thirtyfour::prelude::*;

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
