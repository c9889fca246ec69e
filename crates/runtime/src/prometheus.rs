//! The Prometheus text exposition format (version 0.0.4), as every daemon renders its status
//! document for `/metrics`: families, their HELP and TYPE lines, escaped label values.
//! Each role (tunnel client and server, racing gateway, relay) builds its own families
//! from its own document with these helpers; the names are listed in docs/API.md.
//!
//! Invariants: a family is written as one contiguous group led by its `# HELP` and
//! `# TYPE` lines, or not at all when it has no samples; counters end in `_total`
//! (checked in debug builds); label values are escaped as the format requires.

use serde_json::Value;
use std::fmt::Write as _;

/// A label value with `\`, `"` and newlines escaped.
pub fn esc(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One sample: its labels (already formatted, `a="x",b="y"`) and its value.
pub type Sample = (String, String);

/// Writes one family: its HELP and TYPE lines, then every sample.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[Sample]) {
    debug_assert_eq!(kind == "counter", name.ends_with("_total"), "{name}");
    if samples.is_empty() {
        return;
    }
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A document field as a sample value: integers as they are, other numbers as floats,
/// `true`/`false` as 1/0, anything else (absent, null) as 0.
pub fn value(v: &Value) -> String {
    match v {
        Value::Bool(b) => u8::from(*b).to_string(),
        Value::Number(n) => n.to_string(),
        _ => "0".into(),
    }
}

/// One family with one sample per row: `rows` pairs each row's labels with its document
/// object, and `field` is read from each; a row where it is null or absent (not known
/// yet, e.g. no probe answered) gives no sample rather than a made-up 0.
pub fn per_row(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    rows: &[(String, &Value)],
    field: &str,
) {
    let samples: Vec<Sample> = rows
        .iter()
        .filter(|(_, row)| !row[field].is_null())
        .map(|(labels, row)| (labels.clone(), value(&row[field])))
        .collect();
    family(out, name, kind, help, &samples);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_family_is_one_group_and_empty_families_are_left_out() {
        let mut out = String::new();
        family(&mut out, "x_total", "counter", "X.", &[]);
        assert!(out.is_empty());
        let rows = [
            ("l=\"a\"".to_string(), &json!({"v": 3})),
            (format!("l=\"{}\"", esc("b\"\n")), &json!({"v": 1.5})),
            ("l=\"c\"".to_string(), &json!({"v": null})),
        ];
        let rows: Vec<(String, &Value)> = rows.iter().map(|(l, v)| (l.clone(), *v)).collect();
        per_row(&mut out, "x_total", "counter", "X.", &rows, "v");
        assert_eq!(
            out,
            "# HELP x_total X.\n# TYPE x_total counter\nx_total{l=\"a\"} 3\n\
             x_total{l=\"b\\\"\\n\"} 1.5\n"
        );
    }

    #[test]
    fn values_of_every_json_kind() {
        assert_eq!(value(&json!(true)), "1");
        assert_eq!(value(&json!(false)), "0");
        assert_eq!(value(&json!(null)), "0");
        assert_eq!(value(&json!("7")), "0");
        assert_eq!(value(&json!(12)), "12");
        assert_eq!(value(&json!(0.25)), "0.25");
    }
}
