//! The profile as a stacked horizontal bar chart in SVG (`hetero train --profile-chart`): one bar
//! per conv layer and phase, split into upload, kernel, download and CPU time.

use burn_hetero::profile::{Profile, phase_name};
use std::fmt::Write;

const SEGMENTS: [(&str, &str); 4] = [
    ("upload", "#4e79a7"),
    ("kernel", "#f28e2b"),
    ("download", "#59a14f"),
    ("cpu", "#e15759"),
];
const LABEL_WIDTH: f64 = 330.0;
const BAR_WIDTH: f64 = 520.0;
const ROW: f64 = 18.0;
const TOP: f64 = 50.0;

/// The SVG document of `profile`'s conv phases (milliseconds summed over the run).
pub fn profile_svg(profile: &Profile) -> String {
    let rows: Vec<(String, [f64; 4])> = profile
        .layers
        .iter()
        .map(|l| {
            let c = &l.counters;
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            (
                format!(
                    "L{} {} {} ({})",
                    l.layer + 1,
                    phase_name(l.op),
                    l.signature,
                    l.ran
                ),
                [ms(c.upload), ms(c.compute), ms(c.download), ms(c.cpu)],
            )
        })
        .collect();
    let longest = rows
        .iter()
        .map(|(_, t)| t.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9);
    let height = TOP + ROW * rows.len() as f64 + 40.0;
    let width = LABEL_WIDTH + BAR_WIDTH + 90.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="18" font-size="14">Conv phases by layer: time summed over the run (ms)</text>"#
    );
    for (i, (name, color)) in SEGMENTS.iter().enumerate() {
        let x = 10.0 + 110.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="28" width="10" height="10" fill="{color}"/><text x="{}" y="37">{name}</text>"#,
            x + 14.0
        );
    }
    for (row, (label, times)) in rows.iter().enumerate() {
        let y = TOP + ROW * row as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LABEL_WIDTH - 6.0,
            y + 12.0,
            escape(label)
        );
        let mut x = LABEL_WIDTH;
        for ((name, color), t) in SEGMENTS.iter().zip(times) {
            let w = BAR_WIDTH * t / longest;
            if w > 0.0 {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.2}" y="{y}" width="{w:.2}" height="{}" fill="{color}"><title>{name} {t:.2} ms</title></rect>"#,
                    ROW - 4.0
                );
            }
            x += w;
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.2}" y="{}">{:.1}</text>"#,
            x + 4.0,
            y + 12.0,
            times.iter().sum::<f64>()
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
