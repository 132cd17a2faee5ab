//! Where an allocation comes from: each stack's *site*, its first user frame (the innermost frame
//! outside torch, site- or dist-packages, Python's own `<…>` frames and C++ sources; frames are
//! innermost first), falling back to the innermost frame. The replay, the analysis and the
//! exports all name blocks this way, so one table of sites is built per snapshot.

use crate::model::{Snapshot, StackId};

/// The site of an allocation whose stack was not recorded (a snapshot taken without stacks, or
/// a stack with no frames): what the analysis tells apart from a real site.
pub const NO_STACK: &str = "(no stack recorded)";

/// A sum that stops at `u64::MAX` (a damaged snapshot can hold any sizes).
pub fn total(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// A stack as text, one `file:line (function)` per line, innermost first (the page shows it on
/// hover).
pub fn stack_text(snap: &Snapshot, stack: Option<StackId>) -> String {
    let Some(stack) = stack else {
        return NO_STACK.to_owned();
    };
    let lines: Vec<String> = snap
        .frames_of(stack)
        .map(|f| format!("{}:{} ({})", f.filename, f.line, f.name))
        .collect();
    if lines.is_empty() {
        return NO_STACK.to_owned();
    }
    lines.join("\n")
}

/// `file:line (function)` of a stack's site (see the module docs).
pub fn site_of(snap: &Snapshot, stack: Option<StackId>) -> String {
    let Some(stack) = stack else {
        return NO_STACK.to_owned();
    };
    let mut frames = snap.frames_of(stack).peekable();
    let Some(first) = frames.peek().copied() else {
        return NO_STACK.to_owned();
    };
    let user = snap.frames_of(stack).find(|f| is_user_frame(&f.filename));
    let f = user.unwrap_or(first);
    let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
    format!("{file}:{} ({})", f.line, f.name)
}

fn is_user_frame(filename: &str) -> bool {
    !(filename.is_empty()
        || filename == "??"
        || filename.starts_with('<')
        || filename.contains("/torch/")
        || filename.contains("site-packages/")
        || filename.contains("dist-packages/")
        || [".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh"]
            .iter()
            .any(|ext| filename.ends_with(ext)))
}

/// Each stack's site, computed once: stacks are few, entries millions.
#[derive(Debug)]
pub struct Sites {
    of_stack: Vec<String>,
    none: String,
}

impl Sites {
    pub fn new(snap: &Snapshot) -> Sites {
        Sites {
            of_stack: (0..snap.stacks.len() as StackId)
                .map(|s| site_of(snap, Some(s)))
                .collect(),
            none: site_of(snap, None),
        }
    }

    pub fn of(&self, stack: Option<StackId>) -> &str {
        stack
            .and_then(|s| self.of_stack.get(s as usize))
            .unwrap_or(&self.none)
    }
}
