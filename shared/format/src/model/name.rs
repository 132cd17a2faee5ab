//! The one type of every name a record carries.

use std::sync::Arc;

/// A name in a record (a stage, a tensor, a dtype, a component): shared, so a name used by a
/// hundred thousand marks is stored once. In the file names are interned in a string table; that
/// table is a detail of [`crate::codec`] and never reaches the analysis.
pub type Name = Arc<str>;
