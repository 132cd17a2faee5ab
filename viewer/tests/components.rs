//! Components in a real browser (wasm-bindgen-test in headless chromium): the app mounted on a
//! trace shows the analysis's stage table, draws the timeline, shows recorded markup as text,
//! and turns a foreign file into a message.
//!
//! `CHROMEDRIVER=/usr/bin/chromedriver cargo test -p oomscope-viewer --target wasm32-unknown-unknown`
#![cfg(target_arch = "wasm32")]

use leptos::prelude::*;
use oomscope_testkit::synth::TrainingRun;
use oomscope_viewer::App;
use oomscope_viewer::load::{Loaded, analyse};
use wasm_bindgen::JsCast as _;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn document() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

/// Lets timers (the deferred analysis) and effects run.
async fn settle(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
}

/// Waits (up to 3 s) until `css` matches inside `c`: the tables come a frame after the analysis,
/// which itself waits for a frame (or a 100 ms timer where frames are throttled).
async fn until(c: &web_sys::HtmlElement, css: &str) {
    for _ in 0..300 {
        if c.query_selector(css).ok().flatten().is_some() {
            return;
        }
        settle(10).await;
    }
    panic!("`{css}` never appeared");
}

/// Mounts the app on a fresh container; returns the container.
fn mount(id: &str, loaded: Loaded) -> web_sys::HtmlElement {
    let doc = document();
    let div: web_sys::HtmlElement = doc.create_element("div").unwrap().unchecked_into();
    div.set_id(id);
    doc.body().unwrap().append_child(&div).unwrap();
    let handle = mount_to(div.clone(), move || view! { <App initial=vec![loaded]/> });
    handle.forget();
    div
}

fn rows(container: &web_sys::HtmlElement, css: &str) -> Vec<web_sys::Element> {
    let list = container.query_selector_all(css).unwrap();
    (0..list.length())
        .map(|i| list.item(i).unwrap().unchecked_into())
        .collect()
}

#[wasm_bindgen_test]
async fn stage_table_and_timeline_of_a_trace() {
    let run = TrainingRun {
        steps: 60,
        leak_bytes_per_step: 32 << 20,
        eval_every: Some(20),
        eval_steps: 2,
        ..TrainingRun::default()
    };
    let bytes = run.to_bytes();
    let loaded = Loaded::decode("run.oomt".into(), &bytes, None);
    let expected = analyse(loaded.trace.as_ref().unwrap());
    let c = mount("app-stage", loaded);
    until(&c, "#stage-table tbody tr").await;

    let table = rows(&c, "#stage-table tbody tr");
    assert_eq!(table.len(), expected.stage_table.rows.len());
    let m = expected
        .stage_table
        .metric_index(expected.stage_table.primary_metric.unwrap())
        .unwrap();
    for (tr, want) in table.iter().zip(&expected.stage_table.rows) {
        assert_eq!(
            tr.get_attribute("data-stage").as_deref(),
            Some(want.stage.as_str())
        );
        assert_eq!(
            tr.get_attribute("data-max-bytes"),
            want.metrics[m].max_bytes.map(|v| v.to_string())
        );
    }
    // The leak is a finding, and the largest growth is highlighted.
    assert!(!rows(&c, "article.finding[data-id=leak]").is_empty());
    assert_eq!(rows(&c, "#stage-table tr.largest-growth").len(), 1);
    // The timeline drew and recorded when.
    assert!(
        document()
            .body()
            .unwrap()
            .get_attribute("data-first-chart-ms")
            .is_some()
    );
    assert_eq!(rows(&c, "#timeline-canvas").len(), 1);
}

#[wasm_bindgen_test]
async fn zoom_buttons_redraw_and_whole_run_restores_the_chart() {
    let bytes = TrainingRun {
        steps: 30,
        ..TrainingRun::default()
    }
    .to_bytes();
    let c = mount("app-zoom", Loaded::decode("z.oomt".into(), &bytes, None));
    settle(60).await;
    let canvas: web_sys::HtmlCanvasElement = c
        .query_selector("#timeline-canvas")
        .unwrap()
        .unwrap()
        .unchecked_into();
    let picture = || canvas.to_data_url().unwrap();
    let click = |id: &str| {
        let b: web_sys::HtmlElement = c
            .query_selector(&format!("#{id}"))
            .unwrap()
            .unwrap()
            .unchecked_into();
        b.click();
    };
    let whole = picture();
    click("zoom-in");
    settle(60).await;
    let zoomed = picture();
    assert_ne!(zoomed, whole, "zooming in redraws");
    click("zoom-in");
    settle(60).await;
    assert_ne!(picture(), zoomed, "zooming further redraws again");
    click("zoom-reset");
    settle(60).await;
    assert_eq!(picture(), whole, "the whole run looks as it did");
}

#[wasm_bindgen_test]
async fn recorded_markup_is_text() {
    use oomscope_format::{Metadata, Note, Phase, Record, StageMark, TraceWriter};
    let meta = Metadata {
        command: vec!["<b>bold</b>".into(), "<img src=x onerror=alert(1)>".into()],
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &meta).unwrap();
    let rss = w
        .declare_counter(oomscope_format::CounterKind::HostRss, None)
        .unwrap();
    for step in 0..3 {
        w.sample(step * 1000 + 1, &[(rss, 100 << 20)]).unwrap();
        w.write(&Record::Mark(StageMark {
            t_us: step * 1000 + 2,
            name: "<i>stage</i>".into(),
            step,
            phase: Phase::Train,
            ..StageMark::default()
        }))
        .unwrap();
    }
    w.write(&Record::Note(Note {
        t_us: 3500,
        text: "<script>alert(2)</script>".into(),
    }))
    .unwrap();
    let bytes = w.finish(4000).unwrap();
    let c = mount("app-markup", Loaded::decode("m.oomt".into(), &bytes, None));
    until(&c, "#stage-table tbody td").await;
    assert!(
        rows(&c, "b, i, img, script").is_empty(),
        "markup became elements"
    );
    let cmd = c
        .query_selector("#command")
        .unwrap()
        .unwrap()
        .text_content()
        .unwrap();
    assert!(cmd.contains("<b>bold</b>"), "{cmd}");
    let first = rows(&c, "#stage-table tbody td")[0].text_content().unwrap();
    assert_eq!(first, "<i>stage</i>");
}

#[wasm_bindgen_test]
async fn a_foreign_file_is_a_message() {
    let c = mount(
        "app-junk",
        Loaded::decode("junk.bin".into(), b"GIF89a....", None),
    );
    settle(5).await;
    let msg = c
        .query_selector("#load-error")
        .unwrap()
        .unwrap()
        .text_content()
        .unwrap();
    assert!(
        msg.contains("junk.bin") && msg.contains("not a readable oomscope trace"),
        "{msg}"
    );
}

#[wasm_bindgen_test]
async fn non_finite_gradients_are_highlighted_from_where_they_start() {
    let run = TrainingRun {
        steps: 120,
        nan_at_step: Some(30),
        ..TrainingRun::default()
    };
    let bytes = run.to_bytes();
    let c = mount("app-nan", Loaded::decode("nan.oomt".into(), &bytes, None));
    until(&c, "#gradient-table tbody tr").await;
    let bad = rows(&c, "#gradient-table tbody tr.nonfinite");
    let all = rows(&c, "#gradient-table tbody tr");
    assert!(!bad.is_empty(), "NaN rows are highlighted");
    assert!(all.len() <= 45, "the table stays short: {} rows", all.len());
    let first_step = bad[0]
        .query_selector("td")
        .unwrap()
        .unwrap()
        .text_content()
        .unwrap();
    assert_eq!(first_step, "30", "the first non-finite step is listed");
    assert!(!rows(&c, "article.finding[data-id=non-finite-gradients]").is_empty());
}
