//! The bar chart beside BENCHMARKS.md: one panel per table, one bar per
//! contender (the median), a whisker for min–max. Plain SVG text, no library.
//! Input: the `value` lines that `record_value` appends to the results file.

use std::fmt::Write;

/// One table row of the results file.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub section: String,
    pub contender: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// The `value` rows of a results file, in order; other lines are skipped.
pub fn parse(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 8 || f[0] != "value" {
                return None;
            }
            Some(Row {
                section: f[1].to_owned(),
                contender: f[2].to_owned(),
                unit: f[3].to_owned(),
                higher_is_better: f[4] == "higher",
                median: f[5].parse().ok()?,
                min: f[6].parse().ok()?,
                max: f[7].parse().ok()?,
            })
        })
        .collect()
}

const WIDTH: f64 = 980.0;
const LABEL_END: f64 = 330.0;
const BAR_START: f64 = 340.0;
const BAR_WIDTH: f64 = 500.0;
const ROW: f64 = 20.0;

fn colour(contender: &str) -> &'static str {
    let c = contender.to_ascii_lowercase();
    if c.contains("coroutine") {
        "#6baed6"
    } else if c.starts_with("deferloop") {
        "#08519c"
    } else if c.starts_with("tokio") {
        "#e6550d"
    } else if c.starts_with("mio") {
        "#636363"
    } else if c.contains("uvloop") {
        "#31a354"
    } else if c.contains("asyncio") {
        "#a1d99b"
    } else if c.contains("twisted") {
        "#9e9ac8"
    } else {
        "#bdbdbd"
    }
}

/// `v` with about three significant digits.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "n/a".to_owned()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The whole chart: `title`, then one panel per section in order of appearance.
pub fn chart(title: &str, rows: &[Row]) -> String {
    let mut sections: Vec<&str> = Vec::new();
    for r in rows {
        if !sections.contains(&r.section.as_str()) {
            sections.push(&r.section);
        }
    }
    let mut body = String::new();
    let mut y = 50.0;
    for sec in &sections {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.section == *sec).collect();
        let top = rs
            .iter()
            .map(|r| r.max.max(r.median))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let scale = if top > 0.0 { BAR_WIDTH / top } else { 0.0 };
        let better = if rs[0].higher_is_better {
            "higher is better"
        } else {
            "lower is better"
        };
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-weight="bold">{} — {}, {better}</text>"#,
            escape(sec),
            escape(&rs[0].unit)
        );
        y += 8.0;
        for r in rs {
            let fin = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
            let (w, lo, hi) = (
                fin(r.median) * scale,
                fin(r.min) * scale,
                fin(r.max) * scale,
            );
            let mid = y + ROW / 2.0;
            let _ = writeln!(
                body,
                r#"<text x="{LABEL_END}" y="{:.1}" text-anchor="end">{}</text>"#,
                mid + 4.0,
                escape(&r.contender)
            );
            let _ = writeln!(
                body,
                r#"<rect x="{BAR_START}" y="{:.1}" width="{w:.1}" height="14" fill="{}"/>"#,
                y + 3.0,
                colour(&r.contender)
            );
            let (x0, x1) = (BAR_START + lo, BAR_START + hi);
            let _ = writeln!(
                body,
                r#"<path d="M{x0:.1} {mid:.1}H{x1:.1}M{x0:.1} {:.1}V{:.1}M{x1:.1} {:.1}V{:.1}" stroke="black" fill="none"/>"#,
                mid - 4.0,
                mid + 4.0,
                mid - 4.0,
                mid + 4.0
            );
            let _ = writeln!(
                body,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                BAR_START + w.max(hi) + 6.0,
                mid + 4.0,
                escape(&number(r.median))
            );
            y += ROW;
        }
        y += 26.0;
    }
    let height = y;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// Checks that a chart is well-formed XML as far as tags go (every element
/// closed, in order) and holds what it was given; run by the echo bench's
/// smoke (`cargo test`).
pub fn selftest() {
    let rows = parse(
        "value\ta & <b>\tdeferloop callbacks\treq/s\thigher\t100\t90\t110\n\
         target\tsomething\t1.00\t1.00\tmet\n\
         value\ta & <b>\ttokio\treq/s\thigher\t50\t40\t60\n\
         value\tns\tmio \"floor\"\tns/op\tlower\tNaN\tinf\t3\n\
         value\tbroken line\n",
    );
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1].median, 50.0);
    assert!(rows[0].higher_is_better && !rows[2].higher_is_better);
    let svg = chart("t < 1", &rows);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.ends_with("</svg>\n"));
    assert!(svg.contains("a &amp; &lt;b&gt;"), "text is escaped");
    assert!(svg.contains("mio &quot;floor&quot;"));
    assert!(
        !svg.contains("NaN") && !svg.contains("inf"),
        "no number the viewer cannot draw"
    );
    assert_eq!(
        svg.matches("<rect ").count(),
        4,
        "a background and one bar per row"
    );
    check_tags(&svg);
}

/// Panics unless every `<tag>` has its `</tag>` in order, and `&` only starts entities.
pub fn check_tags(xml: &str) {
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        let text = &rest[..i];
        for (j, _) in text.match_indices('&') {
            let ent = &text[j..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| ent.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        let end = rest[i..].find('>').expect("unterminated tag") + i;
        let tag = &rest[i + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().expect("tag name");
            stack.push(name);
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}
