//! Texts written as the original's JavaScript writes them: sizes (`formatSize`), dates
//! (`Date.prototype.toString` in UTC, the only time zone a sandbox has), `file://` URLs
//! (`pathToFileURL`), and padding counted in UTF-16 units (`padEnd`, `padStart`).

use std::time::{SystemTime, UNIX_EPOCH};

/// A size as the original's `formatSize`: `0 B`, `512 B`, `1.50 KB`, … `TB`.
#[must_use]
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes == 0 {
        return "0 B".into();
    }
    // As the original: the unit from floating-point logarithms.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let exponent = ((bytes as f64).ln() / 1024f64.ln()).floor() as i64;
    if exponent <= 0 {
        return format!("{bytes} B");
    }
    let unit = usize::try_from(exponent).map_or(UNITS.len() - 1, |e| e.min(UNITS.len() - 1));
    // `toFixed(2)` of bytes / 1024^unit, rounding half up on the exact quotient (a division
    // by a power of two is exact in a double).
    let divisor = 1u128 << (10 * unit);
    let hundredths = (u128::from(bytes) * 200 + divisor) / (2 * divisor);
    format!(
        "{}.{:02} {}",
        hundredths / 100,
        hundredths % 100,
        UNITS[unit]
    )
}

/// A time as JavaScript's `Date.prototype.toString` writes it in UTC:
/// `Tue Dec 01 2026 23:00:23 GMT+0000 (Coordinated Universal Time)`.
#[must_use]
pub fn date(time: SystemTime) -> String {
    let seconds = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            // A fraction of a second before a whole one is in the second before it.
            -whole - i64::from(before.subsec_nanos() > 0)
        }
    };
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // 1970-01-01 was a Thursday.
    let weekday = WEEKDAYS[usize::try_from((days + 4).rem_euclid(7)).unwrap_or(0)];
    let month = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    format!(
        "{weekday} {month} {day:02} {year:04} {:02}:{:02}:{:02} GMT+0000 (Coordinated Universal \
         Time)",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): year, month 1–12, day 1–31.
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A `file://` URL of an absolute path, percent-encoding what `pathToFileURL` does.
#[must_use]
pub fn file_url(path: &str) -> String {
    let mut url = String::from("file://");
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

/// `text` padded with spaces on the right to `width` UTF-16 units (`padEnd`).
#[must_use]
pub fn pad_end(text: &str, width: usize) -> String {
    let units = text.encode_utf16().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(units)))
}

/// `text` padded with spaces on the left to `width` UTF-16 units (`padStart`).
#[must_use]
pub fn pad_start(text: &str, width: usize) -> String {
    let units = text.encode_utf16().count();
    format!("{}{text}", " ".repeat(width.saturating_sub(units)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn sizes_read_as_the_originals() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.00 KB");
        assert_eq!(size(1152), "1.13 KB");
        assert_eq!(size(1536), "1.50 KB");
        assert_eq!(size(4 << 30), "4.00 GB");
        assert_eq!(size(u64::MAX), "16777216.00 TB");
    }

    #[test]
    fn dates_read_as_javascripts() {
        assert_eq!(
            date(UNIX_EPOCH),
            "Thu Jan 01 1970 00:00:00 GMT+0000 (Coordinated Universal Time)"
        );
        assert_eq!(
            date(UNIX_EPOCH + Duration::from_secs(1_796_166_023)),
            "Tue Dec 01 2026 23:00:23 GMT+0000 (Coordinated Universal Time)"
        );
        assert_eq!(
            date(UNIX_EPOCH - Duration::from_millis(1)),
            "Wed Dec 31 1969 23:59:59 GMT+0000 (Coordinated Universal Time)"
        );
    }

    #[test]
    fn urls_and_padding() {
        assert_eq!(file_url("/data/a b#c.bin"), "file:///data/a%20b%23c.bin");
        assert_eq!(file_url("/é"), "file:///%C3%A9");
        assert_eq!(pad_end("ab", 4), "ab  ");
        assert_eq!(pad_start("ab", 4), "  ab");
        assert_eq!(pad_end("abcde", 4), "abcde");
    }
}
