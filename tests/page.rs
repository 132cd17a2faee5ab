//! What the browser tests read off the viewer's page, and the comparisons several of them make
//! with `collector summary` and the terminal: the stage table, painted pixels, an element's words,
//! a terminal's sentence. In the library because more than one `browser_*` test target uses each.

use serde_json::Value;

use crate::Browser;

/// A JSON number, or a number written as a non-empty string (the page's `data-` attributes).
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if !s.is_empty() => s.parse().ok(),
        _ => None,
    }
}

/// The DOM's stage table equals `collector summary --json`'s for the primary metric.
pub async fn assert_stage_table_matches(b: &Browser, summary: &Value) {
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

/// Pixels drawn darker than light grey on the canvas with the id `canvas_id`.
pub async fn painted_pixels(b: &Browser, canvas_id: &str) -> u64 {
    painted_pixels_in(b, &format!("#{canvas_id}")).await
}

/// Pixels drawn darker than light grey on the canvas `css` selects.
pub async fn painted_pixels_in(b: &Browser, css: &str) -> u64 {
    let script = format!(
        "const c = document.querySelector(\"{css}\");
         const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
         let n = 0;
         for (let i = 0; i < d.length; i += 4) {{ if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) n++; }}
         return n;"
    );
    b.js(&script).await.as_u64().unwrap()
}

/// The text of an element, its whitespace collapsed.
pub async fn words(b: &Browser, css: &str) -> String {
    let text = b.wait_for(css).await.text().await.unwrap();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of every element matching `css`, whitespace collapsed.
pub async fn all_words(b: &Browser, css: &str) -> Vec<String> {
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

/// `text` with its whitespace collapsed to single spaces.
pub fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The terminal's line starting with `prefix` (after its indent), whitespace collapsed; wrapped
/// continuation lines joined.
pub fn terminal_sentence(text: &str, prefix: &str) -> String {
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
