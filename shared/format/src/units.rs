//! Human-readable bytes, durations and counts.
//!
//! Every number a person reads (the terminal summary, the viewer, the explanations of findings)
//! goes through these functions, so "12.4 MiB" means the same thing everywhere. Memory uses binary
//! units (KiB = 1024 B), because that is what allocators and `nvidia-smi` deal in, with three
//! significant digits: enough to compare two numbers, few enough to read at a glance.

/// A kibibyte.
pub const KIB: u64 = 1 << 10;
/// A mebibyte.
pub const MIB: u64 = 1 << 20;
/// A gibibyte.
pub const GIB: u64 = 1 << 30;
/// A tebibyte.
pub const TIB: u64 = 1 << 40;

/// Binary unit names, each 1024 times the previous one.
const BYTE_UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// Parses a size as people and PyTorch write it: `12.34 GiB`, `80GiB`, `512 B`, `1073741824`
/// (B, KiB, MiB, GiB, TiB, and `bytes`; KB/MB/GB read as binary, as PyTorch means them). Text
/// after the unit is ignored (`2 GiB.` is 2 GiB), so it reads sizes inside sentences too.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let unit = unit.trim_start();
    if unit.is_empty() {
        return (number.fract() == 0.0 && number >= 0.0).then_some(number as u64);
    }
    let scale = [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("TB", 1 << 40),
        ("GB", 1 << 30),
        ("MB", 1 << 20),
        ("KB", 1 << 10),
        ("bytes", 1),
        ("B", 1),
    ]
    .into_iter()
    .find(|(name, _)| unit.starts_with(name))?
    .1;
    Some((number * scale as f64).round() as u64)
}

/// Formats a byte count with binary units and three significant digits: `512 B`, `1.50 KiB`,
/// `12.4 MiB`, `9.80 GiB`, `1.20 TiB`.
pub fn format_bytes(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut unit = 0;
    let mut scaled = bytes as f64;
    while scaled >= 1024.0 && unit + 1 < BYTE_UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    let mut text = three_significant(scaled);
    // Rounding can carry into the next unit (1023.9 KiB reads "1024 KiB"): say "1.00 MiB".
    if text == "1024" && unit + 1 < BYTE_UNITS.len() {
        unit += 1;
        text = three_significant(scaled / 1024.0);
    }
    format!("{text} {}", BYTE_UNITS[unit])
}

/// Formats a signed byte difference with an explicit sign: `+12.4 MiB`, `-3.20 GiB`, `0 B`.
pub fn format_signed_bytes(bytes: i64) -> String {
    match bytes {
        0 => "0 B".to_owned(),
        b if b > 0 => format!("+{}", format_bytes(b.unsigned_abs())),
        b => format!("-{}", format_bytes(b.unsigned_abs())),
    }
}

/// Formats a fractional byte count (a mean, a slope) like [`format_bytes`], keeping its sign.
pub fn format_bytes_f64(bytes: f64) -> String {
    if !bytes.is_finite() {
        return format!("{bytes} B");
    }
    let magnitude = format_bytes(bytes.abs().round() as u64);
    if bytes <= -0.5 {
        format!("-{magnitude}")
    } else {
        magnitude
    }
}

/// Formats a fractional byte difference (a mean delta) with its sign: `+12.4 MiB`, `-3.20 GiB`,
/// `0 B`.
pub fn format_signed_bytes_f64(bytes: f64) -> String {
    let text = format_bytes_f64(bytes);
    if bytes >= 0.5 {
        format!("+{text}")
    } else {
        text
    }
}

/// Formats a duration: `850 us`, `12.3 ms`, `12.3 s`, `4 min 05 s`, `1 h 02 min`.
pub fn format_duration_us(us: u64) -> String {
    const MS: u64 = 1_000;
    const S: u64 = 1_000_000;
    if us < MS {
        return format!("{us} us");
    }
    if us < S {
        let text = three_significant(us as f64 / MS as f64);
        if text != "1000" {
            return format!("{text} ms");
        }
    }
    if us < 60 * S {
        let text = three_significant(us as f64 / S as f64);
        if text.parse::<f64>().is_ok_and(|s| s < 60.0) {
            return format!("{text} s");
        }
    }
    let secs = (us + S / 2) / S;
    if secs < 3600 {
        return format!("{} min {:02} s", secs / 60, secs % 60);
    }
    let mins = (secs + 30) / 60;
    format!("{} h {:02} min", mins / 60, mins % 60)
}

/// Formats a count with thin groups of three digits separated by spaces: `1 840`, `3 600 000`.
pub fn format_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Formats a fraction (0.71) as a whole percentage (`71%`); below 1% keeps one decimal.
pub fn format_percent(fraction: f64) -> String {
    let percent = fraction * 100.0;
    if percent.abs() < 1.0 && percent != 0.0 {
        format!("{percent:.1}%")
    } else {
        format!("{percent:.0}%")
    }
}

/// `x` (≥ 1, < 1024) with three significant digits: `1.50`, `12.4`, `980`.
fn three_significant(x: f64) -> String {
    let two = format!("{x:.2}");
    if two.parse::<f64>().is_ok_and(|v| v < 10.0) {
        return two;
    }
    let one = format!("{x:.1}");
    if one.parse::<f64>().is_ok_and(|v| v < 100.0) {
        return one;
    }
    format!("{x:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("512 B"), Some(512));
        assert_eq!(parse_bytes("1.5 KiB"), Some(1536));
        assert_eq!(parse_bytes("2 GiB."), Some(2 << 30));
        assert_eq!(parse_bytes("80GiB"), Some(80 << 30));
        assert_eq!(parse_bytes("1073741824"), Some(1 << 30));
        assert_eq!(parse_bytes("34359738368 bytes with"), Some(32 << 30));
        assert_eq!(parse_bytes("GiB"), None);
        assert_eq!(parse_bytes("1.5"), None);
        assert_eq!(parse_bytes("12 apples"), None);
    }

    #[test]
    fn bytes_use_binary_units_and_three_significant_digits() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(12 * MIB + 400 * KIB), "12.4 MiB");
        assert_eq!(format_bytes(GIB * 98 / 10), "9.80 GiB");
        assert_eq!(format_bytes(TIB * 12 / 10), "1.20 TiB");
        assert_eq!(format_bytes(980 * MIB), "980 MiB");
        assert_eq!(format_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn rounding_carries_into_the_next_digit_count_and_unit() {
        // 9.996 KiB would print "10.00" with two decimals: three digits means "10.0".
        assert_eq!(format_bytes(10_236), "10.0 KiB");
        // 99.96 MiB → "100 MiB", not "100.0 MiB".
        assert_eq!(format_bytes(99 * MIB + 983 * KIB), "100 MiB");
        // 1023.9 KiB → "1.00 MiB", not "1024 KiB".
        assert_eq!(format_bytes(MIB - 100), "1.00 MiB");
    }

    #[test]
    fn signed_bytes_carry_their_sign() {
        assert_eq!(format_signed_bytes(0), "0 B");
        assert_eq!(
            format_signed_bytes((12 * MIB + 400 * KIB) as i64),
            "+12.4 MiB"
        );
        assert_eq!(format_signed_bytes(-((GIB * 32 / 10) as i64)), "-3.20 GiB");
        assert_eq!(format_signed_bytes(i64::MIN), "-8.00 EiB");
    }

    #[test]
    fn fractional_bytes_round_and_keep_the_sign() {
        assert_eq!(format_bytes_f64(1536.4), "1.50 KiB");
        assert_eq!(format_bytes_f64(-1536.0), "-1.50 KiB");
        assert_eq!(format_bytes_f64(-0.2), "0 B");
        assert_eq!(format_bytes_f64(f64::NAN), "NaN B");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(format_duration_us(0), "0 us");
        assert_eq!(format_duration_us(850), "850 us");
        assert_eq!(format_duration_us(1_000), "1.00 ms");
        assert_eq!(format_duration_us(12_340), "12.3 ms");
        assert_eq!(format_duration_us(999_999), "1.00 s");
        assert_eq!(format_duration_us(12_300_000), "12.3 s");
        assert_eq!(format_duration_us(59_990_000), "1 min 00 s");
        assert_eq!(format_duration_us(245_000_000), "4 min 05 s");
        assert_eq!(format_duration_us(3_720_000_000), "1 h 02 min");
        assert_eq!(format_duration_us(3_599_900_000), "1 h 00 min");
        assert_eq!(format_duration_us(100 * 3_600_000_000), "100 h 00 min");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(1_840), "1 840");
        assert_eq!(format_count(3_600_000), "3 600 000");
    }

    #[test]
    fn percentages_are_whole_unless_tiny() {
        assert_eq!(format_percent(0.71), "71%");
        assert_eq!(format_percent(1.0), "100%");
        assert_eq!(format_percent(0.004), "0.4%");
        assert_eq!(format_percent(0.0), "0%");
    }
}
