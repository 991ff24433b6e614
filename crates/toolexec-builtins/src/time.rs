//! `time:*`: the current time and time zone conversion (jiff, with a bundled
//! time zone database so zones work on any machine).

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

fn utc() -> String {
    "UTC".into()
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NowArgs {
    /// IANA time zone name such as "Europe/Paris" or "America/New_York"
    /// (default "UTC").
    #[serde(default = "utc")]
    timezone: String,
}

/// A point in time: text or a Unix timestamp.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum TimeInput {
    /// Seconds since 1970-01-01T00:00:00Z (may be fractional).
    Unix(f64),
    /// An RFC 3339 / ISO 8601 date-time.
    Text(String),
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConvertArgs {
    /// The time to convert: an RFC 3339 / ISO 8601 date-time with an offset
    /// ("2024-03-10T14:30:00Z", "2024-03-10T14:30:00+05:30"), a date-time
    /// without offset ("2024-03-10T14:30:00" or "2024-03-10 14:30", which
    /// needs from_timezone), or Unix seconds (1710081000).
    time: TimeInput,
    /// IANA time zone to express the time in, e.g. "Asia/Tokyo" or "UTC".
    to_timezone: String,
    /// IANA time zone of a time given without offset. Ignored when the time
    /// has an offset or is a Unix timestamp.
    from_timezone: Option<String>,
}

/// The current time.
#[derive(Serialize, JsonSchema)]
struct NowResult {
    /// RFC 3339 date-time in the time zone, with its offset and milliseconds.
    iso8601: String,
    /// Seconds since the Unix epoch.
    unix_seconds: i64,
    /// Milliseconds since the Unix epoch.
    unix_millis: i64,
    /// The time zone.
    timezone: String,
    /// The zone's UTC offset at this time, e.g. "+02:00".
    offset: String,
}

/// A converted time.
#[derive(Serialize, JsonSchema)]
struct ConvertResult {
    /// RFC 3339 date-time in the target time zone, with its offset.
    iso8601: String,
    /// The target time zone.
    timezone: String,
    /// The target zone's UTC offset at that time, e.g. "-04:00".
    offset: String,
    /// Seconds since the Unix epoch (rounded down).
    unix_seconds: i64,
}

fn zone(name: &str) -> Result<TimeZone, ToolError> {
    TimeZone::get(name.trim()).map_err(|_| {
        ToolError::new(format!(
            "unknown time zone {name:?}: use an IANA name such as \"UTC\", \"Europe/London\" or \
             \"America/New_York\""
        ))
    })
}

fn offset(zdt: &Zoned) -> String {
    let secs = zdt.offset().seconds();
    let sign = if secs < 0 { '-' } else { '+' };
    let secs = secs.unsigned_abs();
    if secs.is_multiple_of(60) {
        format!("{sign}{:02}:{:02}", secs / 3600, secs / 60 % 60)
    } else {
        format!(
            "{sign}{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

fn now(args: &NowArgs) -> Result<NowResult, ToolError> {
    let tz = zone(&args.timezone)?;
    let zdt = Timestamp::now().to_zoned(tz);
    let ts = zdt.timestamp();
    Ok(NowResult {
        iso8601: zdt.strftime("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string(),
        unix_seconds: ts.as_second(),
        unix_millis: ts.as_millisecond(),
        timezone: args.timezone.trim().to_owned(),
        offset: offset(&zdt),
    })
}

fn instant(args: &ConvertArgs) -> Result<Timestamp, ToolError> {
    let text = match &args.time {
        TimeInput::Unix(secs) => return unix(*secs),
        TimeInput::Text(t) => t.trim(),
    };
    if let Ok(secs) = text.parse::<i64>() {
        return unix(secs as f64);
    }
    if let Ok(zdt) = text.parse::<Zoned>() {
        return Ok(zdt.timestamp());
    }
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Ok(ts);
    }
    let civil = text.parse::<DateTime>().map_err(|e| {
        ToolError::new(format!(
            "cannot read {text:?} as a date-time: {e}. Use RFC 3339 such as \
             \"2024-03-10T14:30:00Z\" or \"2024-03-10T14:30:00+01:00\", or Unix seconds"
        ))
    })?;
    let Some(from) = &args.from_timezone else {
        return Err(ToolError::new(format!(
            "{text:?} has no UTC offset: add one (\"Z\", \"+02:00\") or pass from_timezone to \
             say which time zone it is in"
        )));
    };
    let zdt = civil
        .to_zoned(zone(from)?)
        .map_err(|e| ToolError::new(format!("cannot place {text:?} in {from}: {e}")))?;
    Ok(zdt.timestamp())
}

fn unix(secs: f64) -> Result<Timestamp, ToolError> {
    let out_of_range = || ToolError::new(format!("Unix time {secs} is out of range"));
    if !secs.is_finite() {
        return Err(out_of_range());
    }
    let nanos = (secs * 1e9).round();
    if nanos.abs() > 1e30 {
        return Err(out_of_range());
    }
    Timestamp::from_nanosecond(nanos as i128).map_err(|_| out_of_range())
}

fn convert(args: &ConvertArgs) -> Result<ConvertResult, ToolError> {
    let ts = instant(args)?;
    let tz = zone(&args.to_timezone)?;
    let zdt = ts.to_zoned(tz);
    Ok(ConvertResult {
        iso8601: zdt.strftime("%Y-%m-%dT%H:%M:%S%.f%:z").to_string(),
        timezone: args.to_timezone.trim().to_owned(),
        offset: offset(&zdt),
        unix_seconds: ts.as_second(),
    })
}

/// The `time:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        LocalTool::new("time:now", |a: NowArgs| async move { now(&a) })
            .title("Current time")
            .description(
                "Returns the current date and time in a time zone (IANA name, default UTC): an \
                 RFC 3339 string with the zone's UTC offset and milliseconds, Unix seconds and \
                 milliseconds, and the offset. Use it whenever you need today's date or the time.",
            )
            .tags(["time", "date", "clock", "now", "timezone"])
            .annotations(ToolAnnotations {
                idempotent_hint: Some(false),
                ..ToolAnnotations::pure()
            })
            .docs(
                ToolDocs::new("The current date and time in a time zone")
                    .note("Time zones come from a bundled IANA database: names like \"Europe/Paris\", not abbreviations like \"CET\" or \"PST\".")
                    .example(ToolExample::new("Now in UTC", json!({})))
                    .example(ToolExample::new("Now in Tokyo", json!({"timezone": "Asia/Tokyo"}))),
            ),
        LocalTool::new("time:convert", |a: ConvertArgs| async move { convert(&a) })
            .title("Convert time zone")
            .description(
                "Converts a point in time to another time zone. time is an RFC 3339 / ISO 8601 \
                 date-time with offset (\"2024-03-10T14:30:00Z\"), a date-time without offset plus \
                 from_timezone saying where it was (\"2024-03-10 09:00\" in \"America/New_York\"), \
                 or Unix seconds. Returns the time in to_timezone as RFC 3339, the zone's offset at \
                 that moment (daylight saving time included) and Unix seconds.",
            )
            .tags(["time", "date", "timezone", "convert", "dst"])
            .annotations(ToolAnnotations::pure())
            .docs(
                ToolDocs::new("Converts a time between time zones")
                    .note(
                        "For a local time that does not exist (skipped by a daylight saving jump) \
                         the later valid time is used; for one that happens twice, the earlier.",
                    )
                    .note("Time zone names are IANA names (\"Europe/Berlin\"); an unknown name is an error.")
                    .example(
                        ToolExample::new(
                            "UTC to New York (daylight saving time)",
                            json!({"time": "2024-07-01T12:00:00Z", "to_timezone": "America/New_York"}),
                        )
                        .result(json!({
                            "iso8601": "2024-07-01T08:00:00-04:00",
                            "timezone": "America/New_York",
                            "offset": "-04:00",
                            "unix_seconds": 1719835200
                        })),
                    )
                    .example(
                        ToolExample::new(
                            "A Paris meeting time in Tokyo",
                            json!({"time": "2024-01-15 09:30", "from_timezone": "Europe/Paris", "to_timezone": "Asia/Tokyo"}),
                        )
                        .result(json!({
                            "iso8601": "2024-01-15T17:30:00+09:00",
                            "timezone": "Asia/Tokyo",
                            "offset": "+09:00",
                            "unix_seconds": 1705307400
                        })),
                    )
                    .example(
                        ToolExample::new("Unix seconds to UTC", json!({"time": 0, "to_timezone": "UTC"}))
                            .result(json!({
                                "iso8601": "1970-01-01T00:00:00+00:00",
                                "timezone": "UTC",
                                "offset": "+00:00",
                                "unix_seconds": 0
                            })),
                    ),
            ),
    ]
}
