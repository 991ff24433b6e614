//! Output for people (tables, text) and machines (JSON).

use std::io::{self, Write};

use serde::Serialize;
use serde_json::Value;
use toolexec::{ErrorBody, StreamEvent};

/// Prints `value` as pretty JSON.
pub(crate) fn json<T: Serialize>(out: &mut impl Write, value: &T) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// Prints a table: a header row, then rows, columns padded; the last column
/// is cut to keep lines under `width` characters.
pub(crate) fn table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
    width: usize,
) -> io::Result<()> {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols.saturating_sub(1)) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let lead: usize = widths[..cols - 1].iter().map(|w| w + 2).sum();
    let last_width = width.saturating_sub(lead).max(20);
    let line = |out: &mut dyn Write, cells: &[&str]| -> io::Result<()> {
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cols {
                writeln!(out, "{}", cut(cell, last_width))?;
            } else {
                write!(out, "{:<w$}  ", cell, w = widths[i])?;
            }
        }
        Ok(())
    };
    line(out, header)?;
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(out, &cells)?;
    }
    Ok(())
}

fn cut(s: &str, max: usize) -> String {
    let s = s.replace(['\n', '\r', '\t'], " ");
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Prints a tool's structured value for people: strings raw, the rest as pretty JSON.
pub(crate) fn value(out: &mut impl Write, v: &Value) -> io::Result<()> {
    match v {
        Value::String(s) => writeln!(out, "{s}"),
        v => json(out, v),
    }
}

/// Prints an error for people, with schema violations one per line.
pub(crate) fn error(out: &mut impl Write, e: &ErrorBody) -> io::Result<()> {
    writeln!(out, "error: {}", e.message)
}

/// Prints one stream event for people.
pub(crate) fn event(out: &mut impl Write, ev: &StreamEvent) -> io::Result<()> {
    match ev {
        StreamEvent::Progress {
            step,
            progress,
            total,
            message,
        } => {
            let step = step.map(|s| format!("[step {s}] ")).unwrap_or_default();
            let total = total.map(|t| format!("/{t}")).unwrap_or_default();
            let msg = message.as_deref().unwrap_or("");
            writeln!(out, "progress {step}{progress}{total} {msg}")
        }
        StreamEvent::Chunk { step, data } => {
            let step = step.map(|s| format!("[step {s}] ")).unwrap_or_default();
            writeln!(out, "chunk {step}{data}")
        }
        StreamEvent::Done { result } => {
            writeln!(out, "done")?;
            json(out, result)
        }
        StreamEvent::Error { error: e } => error(out, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_and_cuts() {
        let mut buf = Vec::new();
        table(
            &mut buf,
            &["ID", "SUMMARY"],
            &[vec!["a:b".into(), "x".repeat(50)]],
            30,
        )
        .unwrap();
        let s = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "ID   SUMMARY");
        assert!(lines[1].starts_with("a:b  xxx"));
        assert!(lines[1].ends_with('…'));
        assert!(lines[1].chars().count() <= 30);
    }
}
