//! `math:*`: arithmetic on IEEE 754 double-precision numbers, and statistics.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

/// Two operands.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Binary {
    /// The left operand.
    a: f64,
    /// The right operand.
    b: f64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PowerArgs {
    /// The base.
    base: f64,
    /// The exponent (may be negative or fractional).
    exponent: f64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SqrtArgs {
    /// The number to take the square root of; must not be negative.
    value: f64,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RoundArgs {
    /// The number to round.
    value: f64,
    /// How many digits to keep after the decimal point (0 to 15, default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = 15))]
    decimals: u8,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StatsArgs {
    /// The numbers to summarize (at least one).
    #[schemars(length(min = 1))]
    values: Vec<f64>,
}

/// The result of an arithmetic tool.
#[derive(Debug, Serialize, JsonSchema)]
struct NumberResult {
    /// The result.
    result: f64,
}

/// Summary statistics.
#[derive(Debug, Serialize, JsonSchema)]
struct Stats {
    /// How many numbers there are.
    count: usize,
    /// Their sum.
    sum: f64,
    /// The smallest.
    min: f64,
    /// The largest.
    max: f64,
    /// The arithmetic mean (sum / count).
    mean: f64,
    /// The middle value once sorted (the mean of the two middle values when
    /// the count is even).
    median: f64,
}

fn finite(result: f64, what: &str) -> Result<NumberResult, ToolError> {
    if result.is_finite() {
        Ok(NumberResult { result })
    } else if result.is_nan() {
        Err(ToolError::new(format!(
            "{what} is not a number (undefined)"
        )))
    } else {
        Err(ToolError::new(format!(
            "{what} overflows: it is beyond ±1.8e308, the largest double-precision number"
        )))
    }
}

const PRECISION_NOTE: &str = "Numbers are IEEE 754 double-precision floats: integers are exact up to 2^53, \
     and decimal fractions may show binary rounding (0.1 + 0.2 = 0.30000000000000004; \
     use math:round to tidy results).";

fn binary(
    id: &str,
    title: &str,
    description: &str,
    op: fn(f64, f64) -> Result<NumberResult, ToolError>,
    example: (&str, f64, f64, f64),
) -> LocalTool {
    let (ex_title, a, b, result) = example;
    LocalTool::new(id, move |args: Binary| async move { op(args.a, args.b) })
        .title(title)
        .description(description)
        .tags(["math", "arithmetic", "calculator"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new(description.split(". ").next().unwrap_or(description))
                .note(PRECISION_NOTE)
                .note("A result that overflows (beyond ±1.8e308) is an error, never Infinity.")
                .example(
                    ToolExample::new(ex_title, json!({"a": a, "b": b}))
                        .result(json!({"result": result})),
                ),
        )
}

fn stats(values: &[f64]) -> Result<Stats, ToolError> {
    if values.is_empty() {
        return Err(ToolError::new(
            "values is empty: statistics need at least one number",
        ));
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let sum: f64 = sorted.iter().sum();
    let mid = n / 2;
    let median = if n % 2 == 1 {
        sorted[mid]
    } else {
        // Halve first so that two huge values do not overflow.
        sorted[mid - 1] / 2.0 + sorted[mid] / 2.0
    };
    let sum = finite(sum, "the sum")?.result;
    Ok(Stats {
        count: n,
        sum,
        min: sorted[0],
        max: sorted[n - 1],
        mean: finite(sum / n as f64, "the mean")?.result,
        median,
    })
}

fn round(value: f64, decimals: u8) -> Result<NumberResult, ToolError> {
    if decimals > 15 {
        return Err(ToolError::new("decimals must be between 0 and 15"));
    }
    let factor = 10f64.powi(i32::from(decimals));
    let scaled = value * factor;
    // Values this large have no fractional digits to round.
    let result = if scaled.is_finite() && scaled.abs() < 4.5e15 {
        scaled.round() / factor
    } else {
        value
    };
    finite(result, "the rounded value")
}

/// The `math:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        binary(
            "math:add",
            "Add",
            "Adds two numbers and returns a + b. Arguments: a and b, any JSON numbers.",
            |a, b| finite(a + b, "the sum"),
            ("Add 2 and 3", 2.0, 3.0, 5.0),
        ),
        binary(
            "math:subtract",
            "Subtract",
            "Subtracts b from a and returns a - b. Arguments: a (the minuend) and b (the subtrahend).",
            |a, b| finite(a - b, "the difference"),
            ("Subtract 3 from 10", 10.0, 3.0, 7.0),
        ),
        binary(
            "math:multiply",
            "Multiply",
            "Multiplies two numbers and returns a * b. Arguments: a and b, any JSON numbers.",
            |a, b| finite(a * b, "the product"),
            ("Multiply 6 by 7", 6.0, 7.0, 42.0),
        ),
        binary(
            "math:divide",
            "Divide",
            "Divides a by b and returns a / b. Arguments: a (the dividend) and b (the divisor). \
             Dividing by zero is an error, not Infinity.",
            |a, b| {
                if b == 0.0 {
                    Err(ToolError::new("division by zero: b must not be 0"))
                } else {
                    finite(a / b, "the quotient")
                }
            },
            ("Divide 1 by 4", 1.0, 4.0, 0.25),
        ),
        LocalTool::new("math:power", |a: PowerArgs| async move {
            finite(a.base.powf(a.exponent), "the power")
        })
        .title("Power")
        .description(
            "Raises base to exponent and returns base^exponent. The exponent may be negative \
             (2^-1 = 0.5) or fractional (9^0.5 = 3). A negative base with a fractional exponent \
             has no real result and is an error, as is 0 to a negative power.",
        )
        .tags(["math", "arithmetic", "exponent", "calculator"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Raises base to the power exponent")
                .note(PRECISION_NOTE)
                .note("Results that are undefined (NaN) or overflow are errors.")
                .example(
                    ToolExample::new("2 to the 10th", json!({"base": 2, "exponent": 10}))
                        .result(json!({"result": 1024.0})),
                )
                .example(
                    ToolExample::new("Square root as a power", json!({"base": 9, "exponent": 0.5}))
                        .result(json!({"result": 3.0})),
                ),
        ),
        LocalTool::new("math:sqrt", |a: SqrtArgs| async move {
            if a.value < 0.0 {
                return Err(ToolError::new(format!(
                    "cannot take the square root of a negative number ({})",
                    a.value
                )));
            }
            finite(a.value.sqrt(), "the square root")
        })
        .title("Square root")
        .description(
            "Returns the non-negative square root of value. A negative value is an error \
             (there are no complex numbers here).",
        )
        .tags(["math", "root", "calculator"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Square root of a non-negative number")
                .note(PRECISION_NOTE)
                .example(ToolExample::new("Square root of 16", json!({"value": 16})).result(json!({"result": 4.0})))
                .example(ToolExample::new("Square root of 2", json!({"value": 2})).result(json!({"result": std::f64::consts::SQRT_2}))),
        ),
        LocalTool::new("math:round", |a: RoundArgs| async move { round(a.value, a.decimals) })
            .title("Round")
            .description(
                "Rounds value to a number of decimal places (decimals, 0 to 15, default 0). \
                 Halves round away from zero: 2.5 becomes 3 and -2.5 becomes -3.",
            )
            .tags(["math", "rounding", "format", "calculator"])
            .annotations(ToolAnnotations::pure())
            .docs(
                ToolDocs::new("Rounds a number to a number of decimal places")
                    .note(
                        "Rounding works on the binary value: 2.675 is stored as 2.67499999... \
                         and rounds to 2.67 with decimals = 2.",
                    )
                    .example(
                        ToolExample::new("Two decimals", json!({"value": 12.3456, "decimals": 2}))
                            .result(json!({"result": 12.35})),
                    )
                    .example(
                        ToolExample::new("Nearest integer", json!({"value": -2.5}))
                            .result(json!({"result": -3.0})),
                    ),
            ),
        LocalTool::new("math:stats", |a: StatsArgs| async move { stats(&a.values) })
            .title("Statistics")
            .description(
                "Summarizes a list of numbers: count, sum, min, max, mean and median. \
                 values must hold at least one number.",
            )
            .tags(["math", "statistics", "average", "mean", "median"])
            .annotations(ToolAnnotations::pure())
            .docs(
                ToolDocs::new("Count, sum, min, max, mean and median of numbers")
                    .note("The median of an even count is the mean of the two middle values.")
                    .note(PRECISION_NOTE)
                    .example(
                        ToolExample::new("Five numbers", json!({"values": [3, 1, 4, 1, 5]})).result(json!({
                            "count": 5, "sum": 14.0, "min": 1.0, "max": 5.0, "mean": 2.8, "median": 3.0
                        })),
                    )
                    .example(
                        ToolExample::new("Even count", json!({"values": [1, 2, 3, 4]})).result(json!({
                            "count": 4, "sum": 10.0, "min": 1.0, "max": 4.0, "mean": 2.5, "median": 2.5
                        })),
                    ),
            ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round(12.3456, 2).unwrap().result, 12.35);
        assert_eq!(round(-2.5, 0).unwrap().result, -3.0);
        assert_eq!(round(0.1 + 0.2, 2).unwrap().result, 0.3);
        assert_eq!(round(1e300, 15).unwrap().result, 1e300);
        assert_eq!(round(123_456_789.123_4, 3).unwrap().result, 123_456_789.123);
    }

    #[test]
    fn statistics() {
        let s = stats(&[5.0]).unwrap();
        assert_eq!((s.count, s.median, s.mean), (1, 5.0, 5.0));
        assert!(stats(&[]).is_err());
        assert!(stats(&[f64::MAX, f64::MAX]).is_err());
        assert!(
            stats(&[f64::MAX, f64::MAX / 2.0])
                .unwrap_err()
                .message
                .contains("sum")
        );
    }
}
