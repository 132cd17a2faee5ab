//! The Parquet export's schema is written for people once, in `docs/fleet-schema.md` between
//! the `fleet-schema` markers, and it must be exactly what `fleet::schema_markdown` prints from the
//! declaration the writer uses. `OOMSCOPE_BLESS=1` rewrites the section after a deliberate change.

use oomscope_collector::fleet::schema_markdown;

const START: &str = "<!-- fleet-schema:start (generated from collector/src/fleet/schema.rs; OOMSCOPE_BLESS=1 cargo test -p oomscope-collector --test fleet_schema_doc) -->\n";
const END: &str = "<!-- fleet-schema:end -->";

#[test]
fn the_fleet_schema_doc_documents_exactly_the_declared_schema() {
    let path = format!(
        "{}/../docs/fleet-schema.md",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(START)
        .expect("docs/fleet-schema.md has the fleet-schema start marker")
        + START.len();
    let end = start + text[start..].find(END).expect("and its end marker");
    let wanted = format!("\n{}", schema_markdown());
    if std::env::var_os("OOMSCOPE_BLESS").is_some() {
        std::fs::write(path, format!("{}{wanted}{}", &text[..start], &text[end..])).unwrap();
        return;
    }
    assert!(
        text[start..end] == wanted,
        "docs/fleet-schema.md differs from collector/src/fleet/schema.rs: run OOMSCOPE_BLESS=1 cargo test -p oomscope-collector --test fleet_schema_doc"
    );
}
