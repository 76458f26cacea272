//! The terminal table, the JSON report and the SVG chart.
//!
//! The chart is a few SVG elements written by hand: a plotting crate would
//! cost more build time on a small machine than the 60 lines it replaces.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use super::accounting::Results;
use super::run::Options;

fn pct(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[((v.len() as f64 - 1.0) * p).round() as usize])
}

fn fmt_ms(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

/// Prints the side-by-side table.
pub fn print_table(results: &[Results]) {
    println!();
    println!(
        "{:<28}{}",
        "",
        results
            .iter()
            .map(|r| format!("{:>14}", r.mode))
            .collect::<String>()
    );
    let row = |name: &str, f: &dyn Fn(&Results) -> String| {
        println!(
            "{name:<28}{}",
            results
                .iter()
                .map(|r| format!("{:>14}", f(r)))
                .collect::<String>()
        );
    };
    row("iterations", &|r| r.iterations.to_string());
    row("  judged in full", &|r| r.judged_iterations.to_string());
    row("  ended loudly (allowed)", &|r| {
        r.loud_iterations.to_string()
    });
    row("  not judged (harness err)", &|r| r.errors.to_string());
    row("silent gaps (events)", &|r| r.silent_gaps.to_string());
    row("  seq holes", &|r| r.seq_holes.to_string());
    row("  emitted, never delivered", &|r| {
        r.missing_events.to_string()
    });
    row("iterations with a gap", &|r| r.gap_iterations.to_string());
    row("duplicates", &|r| r.duplicates.to_string());
    row("reorders", &|r| r.reorders.to_string());
    row("content mismatches", &|r| r.mismatches.to_string());
    row("loud failures (allowed)", &|r| r.loud_failures.to_string());
    row("undelivered, loudly", &|r| r.loud_undelivered.to_string());
    row("empty 200s (rmcp, not loud)", &|r| r.empty_200s.to_string());
    row("101 p50 ms", &|r| fmt_ms(pct(&r.t_101, 0.5)));
    row("replay done p50 ms", &|r| fmt_ms(pct(&r.t_replay, 0.5)));
    row("first live frame p50 ms", &|r| fmt_ms(pct(&r.t_live, 0.5)));
    row("first live frame p99 ms", &|r| fmt_ms(pct(&r.t_live, 0.99)));
    if results.len() >= 2 && results[0].mode == "safe" && results[1].mode == "legacy" {
        let d = |p| {
            pct(&results[0].t_live, p)
                .zip(pct(&results[1].t_live, p))
                .map(|(a, b)| a - b)
        };
        println!(
            "safe - legacy, first live frame: p50 {:+.2} ms, p99 {:+.2} ms",
            d(0.5).unwrap_or(f64::NAN),
            d(0.99).unwrap_or(f64::NAN)
        );
    }
    for r in results {
        if !r.loud_kinds.is_empty() {
            println!("{} loud failures: {:?}", r.mode, r.loud_kinds);
        }
        println!("{} faults injected: {:?}", r.mode, r.faults);
        if !r.error_kinds.is_empty() {
            println!(
                "{} harness errors (not judged): {:?}",
                r.mode, r.error_kinds
            );
        }
    }
}

/// Writes the JSON report.
pub fn write_json(path: &Path, results: &[Results], opts: &Options) -> std::io::Result<()> {
    let modes: Vec<_> = results
        .iter()
        .map(|r| {
            json!({
                "mode": r.mode,
                "iterations": r.iterations,
                "judged_iterations": r.judged_iterations,
                "loud_iterations": r.loud_iterations,
                "silent_gaps": r.silent_gaps,
                "seq_holes": r.seq_holes,
                "missing_events": r.missing_events,
                "loud_undelivered": r.loud_undelivered,
                "gap_iterations": r.gap_iterations,
                "duplicates": r.duplicates,
                "reorders": r.reorders,
                "content_mismatches": r.mismatches,
                "loud_failures": r.loud_failures,
                "loud_kinds": r.loud_kinds,
                "empty_200s": r.empty_200s,
                "faults": r.faults,
                "harness_errors": r.errors,
                "harness_error_kinds": r.error_kinds,
                "elapsed_s": r.elapsed.as_secs_f64(),
                "upgrade_ms": {
                    "p50": pct(&r.t_live, 0.5),
                    "p99": pct(&r.t_live, 0.99),
                    "response_101": {"p50": pct(&r.t_101, 0.5), "p99": pct(&r.t_101, 0.99)},
                    "replay_done": {"p50": pct(&r.t_replay, 0.5), "p99": pct(&r.t_replay, 0.99)},
                    "first_live_frame": {"p50": pct(&r.t_live, 0.5), "p99": pct(&r.t_live, 0.99)},
                },
            })
        })
        .collect();
    let doc = json!({
        "seed": opts.seed,
        "iterations_per_mode": opts.iterations,
        "store": opts.store,
        "truth": "emit numbering (each call's own count, k = 1..=count)",
        "instances": opts.instances,
        "sse_only": opts.sse_only,
        "listen_streams": opts.listen,
        "modes": modes,
    });
    std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap_or_default())
}

/// Writes an SVG: upgrade latency distributions (histograms of time to the
/// first live frame) per mode, and the silent gap counts.
pub fn write_svg(path: &Path, results: &[Results]) -> std::io::Result<()> {
    let (w, h, pad) = (760.0, 420.0, 50.0);
    let colors = ["#2a7ab0", "#d0452f", "#3c9a4a"];
    let max_ms = results
        .iter()
        .flat_map(|r| pct(&r.t_live, 0.99))
        .fold(1.0f64, f64::max);
    let bins = 40usize;
    let hist: Vec<Vec<usize>> = results
        .iter()
        .map(|r| {
            let mut b = vec![0; bins];
            for t in &r.t_live {
                b[((t / max_ms * bins as f64) as usize).min(bins - 1)] += 1;
            }
            b
        })
        .collect();
    let top = hist.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let plot_w = w * 0.68 - pad;
    let plot_h = h - 2.0 * pad;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{pad}" y="24" font-size="15">Upgrade to first live frame (ms), and silent gaps</text>"#
    );
    let _ = write!(
        s,
        r#"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        h - pad,
        pad + plot_w,
        h - pad
    );
    let _ = write!(
        s,
        r#"<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/>"#,
        h - pad
    );
    for k in 0..=4 {
        let x = pad + plot_w * k as f64 / 4.0;
        let _ = write!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle">{:.1}</text>"#,
            h - pad + 16.0,
            max_ms * k as f64 / 4.0
        );
    }
    let bw = plot_w / bins as f64;
    for (m, b) in hist.iter().enumerate() {
        for (i, n) in b.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let bh = plot_h * *n as f64 / top;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" fill-opacity="0.55"/>"#,
                pad + bw * i as f64,
                h - pad - bh,
                bw,
                bh,
                colors[m % colors.len()]
            );
        }
    }
    // Gap counts, one bar per mode.
    let gx = w * 0.74;
    let gmax = results
        .iter()
        .map(|r| r.silent_gaps)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let _ = write!(s, r#"<text x="{gx}" y="{pad}">silent gaps (events)</text>"#);
    for (m, r) in results.iter().enumerate() {
        let x = gx + 20.0 + 70.0 * m as f64;
        let bh = (plot_h - 30.0) * r.silent_gaps as f64 / gmax;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{:.1}" width="40" height="{bh:.1}" fill="{}"/>"#,
            h - pad - bh,
            colors[m % colors.len()]
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x + 20.0,
            h - pad - bh - 4.0,
            r.silent_gaps
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x + 20.0,
            h - pad + 16.0,
            r.mode
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" fill="{}">{}: p50 {} ms, p99 {} ms, n={}</text>"#,
            pad + 10.0,
            pad + 16.0 * (m as f64 + 1.0),
            colors[m % colors.len()],
            r.mode,
            fmt_ms(pct(&r.t_live, 0.5)),
            fmt_ms(pct(&r.t_live, 0.99)),
            r.t_live.len()
        );
    }
    s.push_str("</svg>\n");
    std::fs::write(path, s)
}
