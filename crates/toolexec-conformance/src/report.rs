//! The suite's table: runtime × case.

use std::fmt::Write;

use crate::{CaseResult, Verdict};

/// A table with a column per runtime and a row per case, then the detail
/// of every failure, known failure and case that does not apply.
pub fn table(results: &[(String, Vec<CaseResult>)]) -> String {
    let mut cases: Vec<&str> = Vec::new();
    for (_, rows) in results {
        for r in rows {
            if !cases.contains(&r.case) {
                cases.push(r.case);
            }
        }
    }
    let width = cases.iter().map(|c| c.len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let _ = write!(out, "{:width$}", "case");
    for (runtime, _) in results {
        let _ = write!(out, " | {runtime:^10}");
    }
    out.push('\n');
    for case in &cases {
        let _ = write!(out, "{case:width$}");
        for (_, rows) in results {
            let cell = match rows.iter().find(|r| r.case == *case).map(|r| &r.verdict) {
                Some(Verdict::Pass) => "ok",
                Some(Verdict::Fail(_)) => "FAIL",
                Some(Verdict::NotApplicable(_)) => "n/a",
                Some(Verdict::KnownFailure(..)) => "known",
                Some(Verdict::FixedKnownFailure(_)) => "FIXED",
                None => "-",
            };
            let _ = write!(out, " | {cell:^10}");
        }
        out.push('\n');
    }
    for (runtime, rows) in results {
        let total: f64 = rows.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        let _ = writeln!(out, "{runtime}: {} cases in {total:.1} s", rows.len());
        for r in rows {
            let line = match &r.verdict {
                Verdict::Pass => continue,
                Verdict::Fail(why) => format!("FAIL {}: {why}", r.case),
                Verdict::NotApplicable(why) => format!("n/a {}: {why}", r.case),
                Verdict::KnownFailure(reason, why) => {
                    format!("known failure {} ({reason}): {why}", r.case)
                }
                Verdict::FixedKnownFailure(reason) => format!(
                    "FIXED {}: listed as a known failure ({reason}) but passes: remove the entry",
                    r.case
                ),
            };
            let _ = writeln!(out, "  {runtime}/{line}");
        }
    }
    out
}
