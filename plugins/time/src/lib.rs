//! Time: the current time in an IANA timezone, and a time of day converted between two, as
//! the MCP reference server `mcp-server-time` offers them (same tools, arguments, results and
//! error texts), with the timezone database compiled in and the clock read through WASI.
//!
//! The local timezone, which the original detects from the system (or takes from
//! `--local-timezone`) and names in its argument descriptions, is always `UTC` here: the host
//! reads a plugin's tool list with none of its grants (no environment), so nothing the policy
//! grants can reach the descriptions, and a plugin sees no system timezone.

use jiff::civil::{Date, Weekday};
use jiff::tz::{self, AmbiguousOffset, TimeZone};
use jiff::{Timestamp, ZonedDateTime};
use llm_worker_guest::{tool, tool_registry};
use schemars::JsonSchema;
use serde::Serialize;

/// The time tools.
#[derive(Clone, Default)]
pub struct Time;

/// A moment in one timezone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct TimeResult {
    /// The timezone, as given.
    pub timezone: String,
    /// ISO 8601 with the offset, to the second: `2026-12-02T16:30:00+05:45`.
    pub datetime: String,
    /// The day's English name: `Wednesday`.
    pub day_of_week: String,
    /// Whether daylight saving time is in effect.
    pub is_dst: bool,
}

/// A time of day today in one timezone, and the same moment in another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct TimeConversionResult {
    /// The time in the source timezone.
    pub source: TimeResult,
    /// The same moment in the target timezone.
    pub target: TimeResult,
    /// The target's offset minus the source's, in hours: `+9.0h`, `-10.75h`.
    pub time_difference: String,
}

#[tool_registry]
impl Time {
    /// Get current time in a specific timezone
    #[tool(read_only, idempotent, destructive = false, open_world = false)]
    fn get_current_time(
        &self,
        #[description = "IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'UTC' as local timezone if no timezone provided by the user."]
        timezone: String,
    ) -> Result<TimeResult, String> {
        require("timezone", &timezone)?;
        let zone = zone(&timezone)?;
        Ok(described(
            timezone,
            &Timestamp::now().to_zoned_datetime(zone),
        ))
    }

    /// Convert time between timezones
    #[tool(read_only, idempotent, destructive = false, open_world = false)]
    fn convert_time(
        &self,
        #[description = "Source IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'UTC' as local timezone if no source timezone provided by the user."]
        source_timezone: String,
        #[description = "Time to convert in 24-hour format (HH:MM)"] time: String,
        #[description = "Target IANA timezone name (e.g., 'Asia/Tokyo', 'America/San_Francisco'). Use 'UTC' as local timezone if no target timezone provided by the user."]
        target_timezone: String,
    ) -> Result<TimeConversionResult, String> {
        require("source_timezone", &source_timezone)?;
        require("target_timezone", &target_timezone)?;
        let today = Timestamp::now()
            .to_zoned_datetime(zone(&source_timezone)?)
            .date();
        convert(today, source_timezone, &time, target_timezone)
    }
}

/// `time` (HH:MM) on `day` in `source_timezone`, and the same moment in `target_timezone`.
fn convert(
    day: Date,
    source_timezone: String,
    time: &str,
    target_timezone: String,
) -> Result<TimeConversionResult, String> {
    let source_zone = zone(&source_timezone)?;
    let target_zone = zone(&target_timezone)?;
    let (hour, minute) =
        hour_minute(time).ok_or("Invalid time format. Expected HH:MM [24-hour format]")?;
    let wall = day.at(hour, minute, 0, 0);
    let ambiguous = source_zone.to_ambiguous_zoned_datetime(wall);
    if let AmbiguousOffset::Gap { .. } = ambiguous.offset() {
        return Err(format!(
            "Invalid time: {time} does not exist in {source_timezone} on {} (skipped by a clock \
             change)",
            iso_date(day)
        ));
    }
    // A time that occurs twice (a clock set back) is its first occurrence.
    let source = ambiguous.earlier().map_err(|e| e.to_string())?;
    let target = source.with_time_zone(target_zone);
    let difference = target.offset().seconds() - source.offset().seconds();
    Ok(TimeConversionResult {
        source: described(source_timezone, &source),
        target: described(target_timezone, &target),
        time_difference: hours(difference),
    })
}

/// `zoned` as the result shows it, under the name `timezone`.
fn described(timezone: String, zoned: &ZonedDateTime) -> TimeResult {
    let is_dst = zoned
        .time_zone()
        .to_offset_info(zoned.timestamp())
        .dst()
        .is_dst();
    TimeResult {
        timezone,
        datetime: iso_seconds(zoned),
        day_of_week: weekday_name(zoned.weekday()).to_owned(),
        is_dst,
    }
}

/// `2026-12-02T16:30:00+05:45`, as Python's `isoformat(timespec="seconds")` writes it (an
/// offset with seconds, as some historic ones have, gets `:SS`).
fn iso_seconds(zoned: &ZonedDateTime) -> String {
    let offset = zoned.offset().seconds();
    let sign = if offset < 0 { '-' } else { '+' };
    let offset = offset.unsigned_abs();
    let mut text = format!(
        "{}T{:02}:{:02}:{:02}{sign}{:02}:{:02}",
        iso_date(zoned.date()),
        zoned.hour(),
        zoned.minute(),
        zoned.second(),
        offset / 3600,
        offset / 60 % 60
    );
    if !offset.is_multiple_of(60) {
        text.push_str(&format!(":{:02}", offset % 60));
    }
    text
}

/// `2026-03-29`.
fn iso_date(day: Date) -> String {
    format!("{:04}-{:02}-{:02}", day.year(), day.month(), day.day())
}

/// The day's English name, as `strftime("%A")` writes it.
fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Monday",
        Weekday::Tuesday => "Tuesday",
        Weekday::Wednesday => "Wednesday",
        Weekday::Thursday => "Thursday",
        Weekday::Friday => "Friday",
        Weekday::Saturday => "Saturday",
        Weekday::Sunday => "Sunday",
    }
}

/// An empty timezone is reported as missing, as the original does.
fn require(name: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("Missing required argument: {name}"));
    }
    Ok(())
}

/// The timezone with exactly this IANA name (the database's own lookup ignores case; the
/// original accepts only the exact key).
fn zone(name: &str) -> Result<TimeZone, String> {
    let database = tz::db();
    let missing = || format!("Invalid timezone: 'No time zone found with key {name}'");
    if !database.available().any(|known| known.as_str() == name) {
        return Err(missing());
    }
    database.get(name).map_err(|_| missing())
}

/// `H:MM`, `HH:M`… as Python's `strptime(time, "%H:%M")` reads it: one or two digits each,
/// hours 0–23, minutes 0–59, nothing else.
fn hour_minute(time: &str) -> Option<(i8, i8)> {
    let (hour, minute) = time.split_once(':')?;
    let number = |digits: &str, below: i8| -> Option<i8> {
        if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<i8>().ok().filter(|n| *n < below)
    };
    Some((number(hour, 24)?, number(minute, 60)?))
}

/// A difference of offsets in hours: `+9.0h` when whole, else up to two decimals (`+5.5h`,
/// `-10.75h`), as the original writes it.
fn hours(seconds: i32) -> String {
    let hours = f64::from(seconds) / 3600.0;
    if seconds % 3600 == 0 {
        return format!("{hours:+.1}h");
    }
    let text = format!("{hours:+.2}");
    format!("{}h", text.trim_end_matches('0').trim_end_matches('.'))
}

llm_worker_guest::export_plugin!(Time);

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> Date {
        text.parse().expect("a date")
    }

    #[test]
    fn converts_with_fractional_offsets() {
        let converted = convert(
            day("2026-12-02"),
            "Asia/Kathmandu".into(),
            "16:30",
            "America/New_York".into(),
        )
        .expect("converts");
        assert_eq!(converted.source.datetime, "2026-12-02T16:30:00+05:45");
        assert_eq!(converted.target.datetime, "2026-12-02T05:45:00-05:00");
        assert_eq!(converted.target.day_of_week, "Wednesday");
        assert_eq!(converted.time_difference, "-10.75h");
    }

    #[test]
    fn writes_differences_as_the_original() {
        assert_eq!(hours(0), "+0.0h");
        assert_eq!(hours(9 * 3600), "+9.0h");
        assert_eq!(hours(-5 * 3600), "-5.0h");
        assert_eq!(hours(5 * 3600 + 1800), "+5.5h");
        assert_eq!(hours(-(10 * 3600 + 2700)), "-10.75h");
    }

    #[test]
    fn summer_time_and_its_gaps() {
        let summer = convert(
            day("2026-07-01"),
            "Europe/Warsaw".into(),
            "12:00",
            "UTC".into(),
        )
        .expect("converts");
        assert!(summer.source.is_dst);
        assert!(!summer.target.is_dst);
        assert_eq!(summer.time_difference, "-2.0h");
        let skipped = convert(
            day("2026-03-29"),
            "Europe/Warsaw".into(),
            "2:30",
            "UTC".into(),
        );
        assert_eq!(
            skipped,
            Err(
                "Invalid time: 2:30 does not exist in Europe/Warsaw on 2026-03-29 (skipped by \
                 a clock change)"
                    .into()
            )
        );
        // Set back: 02:30 happens twice, and the first (summer time) is taken.
        let twice = convert(
            day("2026-10-25"),
            "Europe/Warsaw".into(),
            "02:30",
            "UTC".into(),
        )
        .expect("converts");
        assert_eq!(twice.source.datetime, "2026-10-25T02:30:00+02:00");
    }

    #[test]
    fn refuses_what_the_original_refuses() {
        assert_eq!(
            zone("europe/warsaw").err().as_deref(),
            Some("Invalid timezone: 'No time zone found with key europe/warsaw'")
        );
        assert!(zone("Europe/Warsaw").is_ok());
        for bad in [
            "24:00", "12:60", "123:00", "12:345", "1200", "12:", ":30", " 1:00", "١:00",
        ] {
            assert_eq!(hour_minute(bad), None, "{bad}");
        }
        assert_eq!(hour_minute("9:5"), Some((9, 5)));
        assert_eq!(hour_minute("23:59"), Some((23, 59)));
    }

    #[test]
    fn descriptions_name_utc_as_the_local_timezone() {
        use llm_worker_guest::ToolRegistry;
        let definitions = Time.tool_definitions();
        let (meta, _) = definitions[0]();
        let description = meta.input_schema["properties"]["timezone"]["description"]
            .as_str()
            .expect("a description");
        assert!(
            description.contains("Use 'UTC' as local timezone"),
            "{description}"
        );
        assert!(meta.output_schema.is_some());
    }
}
