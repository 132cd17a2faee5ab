//! A finding in words ([`FindingText`]): what every rule's words make, and what the summary,
//! the verdict and the page show of a finding.

/// A finding in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingText {
    /// One line.
    pub title: String,
    /// What was measured and what it means, quoting the numbers.
    pub explanation: String,
    /// The changes to try, the first first.
    pub changes: Vec<String>,
}

impl FindingText {
    pub(crate) fn new(title: String, explanation: String, changes: Vec<String>) -> FindingText {
        FindingText {
            title,
            explanation,
            changes,
        }
    }

    /// The changes in one line, as the summary and `summary --json` write them.
    pub fn change(&self) -> String {
        self.changes.join("; ")
    }
}
