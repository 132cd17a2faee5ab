//! FORMAT.md describes the version this crate writes: its title and the header's minor field say
//! the writer's version, and its history lists it.

use oomscope_format::codec::{FORMAT_MAJOR, FORMAT_MINOR};

const DOC: &str = include_str!("../FORMAT.md");

#[test]
fn the_title_names_the_writer_s_version() {
    let title = DOC.lines().next().unwrap_or_default();
    assert_eq!(
        title,
        format!("# The oomscope trace format, v{FORMAT_MAJOR}.{FORMAT_MINOR}")
    );
}

#[test]
fn the_header_table_gives_the_writer_s_major_and_minor() {
    assert!(
        DOC.contains(&format!("| 8 | 2 | major | `u16` = {FORMAT_MAJOR}.")),
        "FORMAT.md's header table must give major = {FORMAT_MAJOR}"
    );
    assert!(
        DOC.contains(&format!("| 10 | 2 | minor | `u16` = {FORMAT_MINOR}.")),
        "FORMAT.md's header table must give minor = {FORMAT_MINOR}"
    );
}

#[test]
fn the_history_lists_every_minor_up_to_the_writer_s() {
    for minor in 0..=FORMAT_MINOR {
        let row = format!("| {FORMAT_MAJOR}.{minor} | ");
        assert!(DOC.contains(&row), "FORMAT.md's Versions table lacks {row}");
    }
    let next = format!("| {FORMAT_MAJOR}.{} | ", FORMAT_MINOR + 1);
    assert!(
        !DOC.contains(&next),
        "FORMAT.md lists {next} the writer does not write"
    );
}
