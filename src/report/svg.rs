//! Small building blocks for inline SVG charts: XML escaping, a logarithmic percent axis
//! with decade ticks, log-bin assignment, bars and lines. Everything returns plain strings
//! with coordinates rounded to 0.1 px, so the same input always gives the same bytes.

use std::fmt::Write as _;

/// The SVG namespace, the only URL a report contains.
pub const SVG_NS: &str = "http://www.w3.org/2000/svg";

/// Escapes `s` for XML/HTML text and attribute values (`&`, `<`, `>`, `"`, `'`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A coordinate with one decimal; non-finite values (never expected) become 0 so that the
/// output stays valid SVG.
pub fn num(x: f64) -> String {
    if x.is_finite() {
        let r = format!("{x:.1}");
        if r == "-0.0" {
            "0.0".into()
        } else {
            r
        }
    } else {
        "0.0".into()
    }
}

/// The label of the decade `10^exp` percent: `0.01 %`, `1 %`, `1000 %` for exponents −3 to 4,
/// `1e-5 %` / `1e6 %` beyond.
pub fn decade_label(exp: i32) -> String {
    if (0..=4).contains(&exp) {
        format!("{} %", 10u64.pow(exp as u32))
    } else if (-3..0).contains(&exp) {
        format!("0.{}1 %", "0".repeat((-exp - 1) as usize))
    } else {
        format!("1e{exp} %")
    }
}

/// A usage in percent for labels and tooltips: `0 %`, `inf`, three significant digits
/// between 0.01 % and 1000 % (`0.523 %`, `23.4 %`, `147 %`), scientific outside
/// (`3.84e5 %`, `1.2e-5 %`).
pub fn pct(x: f64) -> String {
    if x.is_nan() || x == f64::INFINITY {
        return "inf".into();
    }
    if x == 0.0 {
        return "0 %".into();
    }
    let a = x.abs();
    if !(0.01..1000.0).contains(&a) {
        let s = format!("{x:.2e}");
        // `3.84e5`, trimming trailing zeros of the mantissa: `1.00e6` -> `1e6`.
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e} %");
    }
    let digits = if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else if a >= 0.1 {
        3
    } else {
        4
    };
    format!("{x:.digits$} %")
}

/// A logarithmic x-axis over whole decades `10^lo ..= 10^hi` (percent), mapped to pixels
/// `x0 ..= x1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogAxis {
    /// Lowest decade exponent (the left edge is `10^lo`).
    pub lo: i32,
    /// Highest decade exponent (the right edge is `10^hi`), `> lo`.
    pub hi: i32,
    /// Left pixel.
    pub x0: f64,
    /// Right pixel.
    pub x1: f64,
}

impl LogAxis {
    /// The smallest whole-decade axis containing every positive finite value of `values`
    /// and 1 % … 1000 % (so the 100 % limit is never at an edge), at most `max_decades` wide:
    /// when the data span more, the low end is cut (smaller values are drawn at the left
    /// edge). Zero, infinite and NaN values are ignored (they get slots of their own).
    pub fn spanning(values: &[f64], max_decades: i32, x0: f64, x1: f64) -> Self {
        let mut lo = 0;
        let mut hi = 3;
        for &v in values {
            if v > 0.0 && v.is_finite() {
                let e = v.log10();
                lo = lo.min(e.floor() as i32);
                // A value exactly on a decade still gets room to its right.
                hi = hi.max(e.floor() as i32 + 1);
            }
        }
        let max_decades = max_decades.max(4);
        if hi - lo > max_decades {
            lo = hi - max_decades;
        }
        Self { lo, hi, x0, x1 }
    }

    /// Number of decades.
    pub fn decades(&self) -> i32 {
        self.hi - self.lo
    }

    /// The pixel of the positive value `v` (clamped to the axis; 0 and NaN map to the left
    /// edge, +∞ to the right edge).
    pub fn x(&self, v: f64) -> f64 {
        if v.is_nan() || v <= 0.0 {
            return self.x0;
        }
        if v == f64::INFINITY {
            return self.x1;
        }
        let t = ((v.log10() - self.lo as f64) / self.decades() as f64).clamp(0.0, 1.0);
        self.x0 + t * (self.x1 - self.x0)
    }

    /// The decade ticks: `(pixel, exponent, label)`, labels thinned (empty) so that at most
    /// about eight are shown, always including the 100 % decade when it is on the axis.
    pub fn ticks(&self) -> Vec<(f64, i32, String)> {
        let step = (self.decades() + 7) / 8;
        (self.lo..=self.hi)
            .map(|e| {
                let label = if (e - 2).rem_euclid(step.max(1)) == 0 {
                    decade_label(e)
                } else {
                    String::new()
                };
                (self.x(10f64.powi(e)), e, label)
            })
            .collect()
    }

    /// Number of bins with `per_decade` bins per decade.
    pub fn bins(&self, per_decade: u32) -> usize {
        self.decades() as usize * per_decade as usize
    }

    /// The value range `[lo, hi)` of bin `i` with `per_decade` bins per decade.
    pub fn bin_edges(&self, i: usize, per_decade: u32) -> (f64, f64) {
        let edge = |k: usize| 10f64.powf(self.lo as f64 + k as f64 / per_decade as f64);
        (edge(i), edge(i + 1))
    }

    /// The bin of `v` ([`log_bin`] on this axis).
    pub fn bin(&self, v: f64, per_decade: u32) -> Option<usize> {
        log_bin(v, self.lo, per_decade, self.bins(per_decade))
    }
}

/// The log bin of `v` among `nbins` bins of `per_decade` bins per decade starting at
/// `10^lo`: bin `i` holds `[10^(lo + i/per_decade), 10^(lo + (i+1)/per_decade))`. Values
/// below the first bin go to bin 0, values at or above the last edge to the last bin.
/// `None` for zero, negative, infinite or NaN values (drawn in their own slots), or when
/// there are no bins.
pub fn log_bin(v: f64, lo: i32, per_decade: u32, nbins: usize) -> Option<usize> {
    if v.is_nan() || v <= 0.0 || v == f64::INFINITY || nbins == 0 || per_decade == 0 {
        return None;
    }
    let pd = per_decade as f64;
    let edge = |k: i64| 10f64.powf(lo as f64 + k as f64 / pd);
    let mut k = ((v.log10() - lo as f64) * pd).floor() as i64;
    // log10 rounding can put a value on the wrong side of an edge: settle it on the edges
    // themselves, computed the same way as `LogAxis::bin_edges`.
    if k >= 0 && (k as usize) < nbins {
        if v < edge(k) {
            k -= 1;
        } else if v >= edge(k + 1) {
            k += 1;
        }
    }
    Some(k.clamp(0, nbins as i64 - 1) as usize)
}

/// A `nice` upper end for a count axis: the smallest integer of the form m × 10^k with
/// m in {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8} that is ≥ `max` (at least 1).
pub fn nice_ceil(max: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m10 in [10u64, 15, 20, 25, 30, 40, 50, 60, 80] {
            match m10.checked_mul(p) {
                Some(v) if v % 10 == 0 && v / 10 >= max => return v / 10,
                Some(_) => {}
                None => return max,
            }
        }
        match p.checked_mul(10) {
            Some(q) => p = q,
            None => return max,
        }
    }
}

/// One bar: `x0 .. x1` wide, from `y` down to the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Left pixel.
    pub x0: f64,
    /// Right pixel.
    pub x1: f64,
    /// Top pixel.
    pub y: f64,
}

/// The `d` attribute of a path drawing `bars` as closed rectangles on the baseline `base`
/// (one path per series keeps the SVG small).
pub fn bars_path(bars: &[Bar], base: f64) -> String {
    let mut d = String::new();
    for b in bars {
        if !d.is_empty() {
            d.push(' ');
        }
        let _ = write!(
            d,
            "M{} {}V{}H{}V{}Z",
            num(b.x0),
            num(base),
            num(b.y),
            num(b.x1),
            num(base)
        );
    }
    d
}

/// A `<line>` element with the given extra attributes (already escaped).
pub fn line(x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) -> String {
    format!(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {attrs}/>",
        num(x1),
        num(y1),
        num(x2),
        num(y2)
    )
}

/// A `<text>` element; `content` is escaped here, `attrs` must already be.
pub fn text(x: f64, y: f64, content: &str, attrs: &str) -> String {
    format!(
        "<text x=\"{}\" y=\"{}\" {attrs}>{}</text>",
        num(x),
        num(y),
        escape(content)
    )
}

/// A `<title>` tooltip element (escaped).
pub fn title(content: &str) -> String {
    format!("<title>{}</title>", escape(content))
}

/// The opening tag of an inline SVG of `w` × `h` px with a matching `viewBox`; `attrs` must
/// already be escaped.
pub fn open(w: f64, h: f64, attrs: &str) -> String {
    format!(
        "<svg xmlns=\"{SVG_NS}\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" {attrs}>",
        num(w),
        num(h),
        num(w),
        num(h)
    )
}

/// A downward triangle of half-width `r` whose tip is at (`x`, `y`), as a path `d`.
pub fn down_triangle(x: f64, y: f64, r: f64) -> String {
    format!(
        "M{} {}L{} {}L{} {}Z",
        num(x),
        num(y),
        num(x - r),
        num(y - 1.6 * r),
        num(x + r),
        num(y - 1.6 * r)
    )
}

/// Draws a panel's extra lines, given the panel's x (K) and y (value) pixel maps.
type PanelExtra<'a> = dyn Fn(&mut String, &dyn Fn(f64) -> f64, &dyn Fn(f64) -> f64) + 'a;

/// The `scale` plot as a standalone SVG document: two log-log panels over the reduction
/// length K. Left, the 95th-percentile error against float64 in units of u·Σ|x·w| for every
/// TP degree (and the unsharded matmul), with √K and K drawn through the first unsharded
/// point as the probabilistic and deterministic bound shapes. Right, the worst usage of the
/// sharded-vs-unsharded comparison under `policy` (percent), with the 100 % limit.
pub fn scale_plot(
    points: &[crate::results::scale::ScalePoint],
    policy: &str,
    policy_index: usize,
) -> String {
    const W: f64 = 460.0;
    const H: f64 = 350.0;
    const PAD_L: f64 = 60.0;
    const PAD_R: f64 = 15.0;
    // Titles at y 16, the shared legend row at y 34, the plots below it.
    const PAD_T: f64 = 50.0;
    const PAD_B: f64 = 45.0;
    let colours = [
        "#444444", "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442",
    ];
    let mut ks: Vec<usize> = points.iter().map(|p| p.k).collect();
    ks.sort_unstable();
    ks.dedup();
    let mut tps: Vec<usize> = points.iter().map(|p| p.tp).collect();
    tps.sort_unstable();
    tps.dedup();
    if ks.is_empty() {
        return format!("{}</svg>\n", open(W, H, ""));
    }
    let (kmin, kmax) = (ks[0] as f64, *ks.last().expect("non-empty") as f64);
    let lx = |k: f64, x0: f64| {
        let span = (kmax.log10() - kmin.log10()).max(1e-9);
        x0 + PAD_L + (k.log10() - kmin.log10()) / span * (W - PAD_L - PAD_R)
    };
    let mut out = open(2.0 * W, H, "font-family=\"sans-serif\" font-size=\"11\"");
    out.push('\n');
    // One legend row for both panels, above the plots (inside them it covered the lines).
    let mut x = 8.0;
    for (ti, &tp) in tps.iter().enumerate() {
        let colour = colours[ti % colours.len()];
        let label = if tp == 1 {
            "unsharded".to_string()
        } else {
            format!("TP {tp}")
        };
        out.push_str(&line(
            x,
            30.0,
            x + 16.0,
            30.0,
            &format!("stroke=\"{colour}\" stroke-width=\"2\""),
        ));
        out.push_str(&text(x + 20.0, 34.0, &label, ""));
        x += 20.0 + 6.5 * label.len() as f64 + 14.0;
    }
    for (shape, label) in [("4 3", "sqrt(K) shape"), ("1 3", "K shape")] {
        out.push_str(&line(
            x,
            30.0,
            x + 16.0,
            30.0,
            &format!("stroke=\"#999\" stroke-dasharray=\"{shape}\""),
        ));
        out.push_str(&text(x + 20.0, 34.0, label, "fill=\"#777\""));
        x += 20.0 + 6.5 * label.len() as f64 + 14.0;
    }
    out.push_str(&line(
        x,
        30.0,
        x + 16.0,
        30.0,
        "stroke=\"#c00\" stroke-dasharray=\"6 3\"",
    ));
    out.push_str(&text(x + 20.0, 34.0, "limit 100 %", "fill=\"#c00\""));
    let base = points
        .iter()
        .find(|p| p.tp == 1 && p.k == ks[0])
        .map(|p| p.p95_err)
        .unwrap_or(1.0);
    let panel = |out: &mut String,
                 x0: f64,
                 title_text: &str,
                 ylabel: &str,
                 series: &dyn Fn(&crate::results::scale::ScalePoint) -> f64,
                 also: &[f64],
                 extra: &PanelExtra<'_>| {
        // The axis spans the data and `also` (the guide lines' ends), so nothing is drawn
        // outside the plot.
        let vals: Vec<f64> = points
            .iter()
            .map(series)
            .chain(also.iter().copied())
            .filter(|v| *v > 0.0 && v.is_finite())
            .collect();
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in &vals {
            lo = lo.min(*v);
            hi = hi.max(*v);
        }
        if !lo.is_finite() {
            lo = 0.1;
            hi = 10.0;
        }
        let (elo, ehi) = (
            (lo.log10().floor() as i32).min(-1),
            (hi.log10().ceil() as i32).max(elo_min(lo) + 1),
        );
        let ehi = ehi.max(elo + 1);
        let ly = move |v: f64| {
            let t = ((v.max(1e-300).log10() - elo as f64) / (ehi - elo) as f64).clamp(0.0, 1.0);
            H - PAD_B - t * (H - PAD_T - PAD_B)
        };
        out.push_str(&text(
            x0 + W / 2.0,
            16.0,
            title_text,
            "text-anchor=\"middle\" font-weight=\"bold\"",
        ));
        out.push_str(&line(
            x0 + PAD_L,
            H - PAD_B,
            x0 + W - PAD_R,
            H - PAD_B,
            "stroke=\"#000\"",
        ));
        out.push_str(&line(
            x0 + PAD_L,
            PAD_T,
            x0 + PAD_L,
            H - PAD_B,
            "stroke=\"#000\"",
        ));
        for e in elo..=ehi {
            let y = ly(10f64.powi(e));
            out.push_str(&line(
                x0 + PAD_L - 4.0,
                y,
                x0 + W - PAD_R,
                y,
                "stroke=\"#ddd\"",
            ));
            out.push_str(&text(
                x0 + PAD_L - 6.0,
                y + 4.0,
                &format!("1e{e}"),
                "text-anchor=\"end\"",
            ));
        }
        for &k in &ks {
            let x = lx(k as f64, x0);
            out.push_str(&line(x, H - PAD_B, x, H - PAD_B + 4.0, "stroke=\"#000\""));
            out.push_str(&text(
                x,
                H - PAD_B + 16.0,
                &k.to_string(),
                "text-anchor=\"middle\"",
            ));
        }
        out.push_str(&text(
            x0 + W / 2.0,
            H - 8.0,
            "K (reduction length)",
            "text-anchor=\"middle\"",
        ));
        out.push_str(&text(
            14.0 + x0,
            H / 2.0,
            ylabel,
            &format!(
                "text-anchor=\"middle\" transform=\"rotate(-90 {} {})\"",
                num(14.0 + x0),
                num(H / 2.0)
            ),
        ));
        let lxf = |k: f64| lx(k, x0);
        extra(out, &lxf, &ly);
        for (ti, &tp) in tps.iter().enumerate() {
            let colour = colours[ti % colours.len()];
            if points.iter().all(|p| p.tp != tp || series(p) <= 0.0) {
                continue;
            }
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.tp == tp && series(p) > 0.0 && series(p).is_finite())
                .map(|p| (lx(p.k as f64, x0), ly(series(p))))
                .collect();
            let d: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
                .collect();
            out.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\">{}</polyline>",
                d.join(" "),
                title(&if tp == 1 { "unsharded".to_string() } else { format!("TP {tp}") })
            ));
        }
    };
    fn elo_min(lo: f64) -> i32 {
        lo.log10().floor() as i32
    }
    let guide_ends = [base * (kmax / kmin).sqrt(), base * (kmax / kmin)];
    panel(
        &mut out,
        0.0,
        "error vs float64, p95 over seeds",
        "|y - y64| / (u * sum|x w|)",
        &|p| p.p95_err,
        &guide_ends,
        &|out, lxf, ly| {
            for (shape, label, f) in [("4 3", "sqrt(K)", 0.5f64), ("1 3", "K", 1.0f64)] {
                let y0 = base;
                let at = |k: f64| y0 * (k / kmin).powf(f);
                // The y axis clamps values above its top: end each line where it leaves the
                // panel (found by bisection in log K), so the √K and K lines keep their own
                // slopes and end points instead of both running to the same clamped corner.
                let top = ly(f64::MAX);
                if ly(y0) <= top + 0.01 {
                    continue;
                }
                let kend = if ly(at(kmax)) > top + 0.01 {
                    kmax
                } else {
                    let (mut lo, mut hi) = (kmin.ln(), kmax.ln());
                    for _ in 0..60 {
                        let mid = 0.5 * (lo + hi);
                        if ly(at(mid.exp())) > top + 0.01 {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    lo.exp()
                };
                let a = (lxf(kmin), ly(y0));
                let b = (lxf(kend), ly(at(kend)));
                out.push_str(&line(
                    a.0,
                    a.1,
                    b.0,
                    b.1,
                    &format!("stroke=\"#999\" stroke-dasharray=\"{shape}\""),
                ));
                // Labels below the line's end (the end may be at the panel top).
                out.push_str(&text(
                    b.0 - 4.0,
                    b.1 + 12.0,
                    label,
                    "text-anchor=\"end\" fill=\"#777\"",
                ));
            }
        },
    );
    panel(
        &mut out,
        W,
        &format!("worst usage of sharded vs unsharded, {policy}"),
        "usage (%)",
        &|p| p.worst_usage_pct[policy_index],
        &[100.0],
        &|out, lxf, ly| {
            let y = ly(100.0);
            out.push_str(&line(
                lxf(kmin),
                y,
                lxf(kmax),
                y,
                "stroke=\"#c00\" stroke-dasharray=\"6 3\"",
            ));
            out.push_str(&text(
                lxf(kmax) - 2.0,
                y - 4.0,
                "limit 100 %",
                "text-anchor=\"end\" fill=\"#c00\"",
            ));
        },
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scale.svg`: the legend sits in its own row above both plots, its labels do not
    /// overlap, and the √K and K guide lines stay inside the left plot.
    #[test]
    fn scale_legend_and_guides_stay_in_their_places() {
        use crate::results::scale::ScalePoint;
        let mut points = Vec::new();
        for (i, k) in [32usize, 256, 2048, 16384].into_iter().enumerate() {
            for tp in [1usize, 2, 4, 8, 16, 32, 64] {
                points.push(ScalePoint {
                    k,
                    tp,
                    seeds: 10,
                    p50_err: 1.0,
                    p95_err: 3.0 / (1 + i) as f64,
                    max_err: 4.0,
                    sqrt_k: (k as f64).sqrt(),
                    worst_usage_pct: vec![20.0 * (1 + i) as f64],
                    p95_usage_pct: vec![10.0],
                    max_abs_diff: 1e-6,
                    max_abs_y: 10.0,
                });
            }
        }
        let svg = scale_plot(&points, "torch-default", 0);
        let attr = |el: &str, name: &str| -> f64 {
            let i = el.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            el[i..i + el[i..].find('"').unwrap()].parse().unwrap()
        };
        // Legend labels: one row at y = 34, left to right, no two overlapping (at most 6.5
        // px per character at font-size 11 sans-serif).
        let mut end = f64::NEG_INFINITY;
        let mut labels = 0;
        for el in svg.split("<text").skip(1) {
            if attr(el, "y") == 34.0 {
                let x = attr(el, "x");
                let label = &el[el.find('>').unwrap() + 1..el.find("</text>").unwrap()];
                assert!(
                    x >= end,
                    "legend label {label} at {x} overlaps the one before ({end})"
                );
                end = x + 6.5 * label.len() as f64;
                labels += 1;
            }
        }
        assert_eq!(labels, 7 + 3, "7 TP degrees, 2 guide shapes, the limit");
        assert!(end <= 920.0, "legend fits the 920 px width: {end}");
        // Guide lines (dash patterns 4 3 and 1 3) outside the legend row: inside the plot,
        // y from PAD_T = 50 to H - PAD_B = 305.
        let mut guides = 0;
        for el in svg.split("<line").skip(1) {
            if (el.contains("stroke-dasharray=\"4 3\"") || el.contains("stroke-dasharray=\"1 3\""))
                && attr(el, "y1") != 30.0
            {
                guides += 1;
                for y in [attr(el, "y1"), attr(el, "y2")] {
                    assert!(
                        (50.0..=305.0).contains(&y),
                        "guide line leaves the plot: {el}"
                    );
                }
            }
        }
        assert_eq!(guides, 2);
    }

    #[test]
    fn escapes_xml_special_characters() {
        assert_eq!(escape("a<b&c"), "a&lt;b&amp;c");
        assert_eq!(escape("\"x\" 'y' >"), "&quot;x&quot; &#39;y&#39; &gt;");
        assert_eq!(escape("plain-name_1.0"), "plain-name_1.0");
        assert_eq!(
            text(1.0, 2.0, "a<b&c", "class=\"t\""),
            "<text x=\"1.0\" y=\"2.0\" class=\"t\">a&lt;b&amp;c</text>"
        );
        assert_eq!(title("<&>"), "<title>&lt;&amp;&gt;</title>");
    }

    #[test]
    fn decade_labels_read_as_percentages() {
        let labels: Vec<String> = (-5..=6).map(decade_label).collect();
        assert_eq!(
            labels,
            [
                "1e-5 %", "1e-4 %", "0.001 %", "0.01 %", "0.1 %", "1 %", "10 %", "100 %", "1000 %",
                "10000 %", "1e5 %", "1e6 %"
            ]
        );
    }

    #[test]
    fn axis_spans_the_data_and_the_limit() {
        let a = LogAxis::spanning(&[], 12, 0.0, 300.0);
        assert_eq!((a.lo, a.hi), (0, 3));
        let a = LogAxis::spanning(&[0.0, f64::INFINITY, f64::NAN, 5.0], 12, 0.0, 300.0);
        assert_eq!((a.lo, a.hi), (0, 3));
        let a = LogAxis::spanning(&[0.0123, 384243.0], 12, 0.0, 800.0);
        assert_eq!((a.lo, a.hi), (-2, 6));
        // Exactly on a decade: 1000 % still gets the decade to its right.
        let a = LogAxis::spanning(&[1000.0], 12, 0.0, 800.0);
        assert_eq!(a.hi, 4);
        // Capped width: the low end is cut.
        let a = LogAxis::spanning(&[1e-30, 50.0], 8, 0.0, 800.0);
        assert_eq!((a.lo, a.hi), (-5, 3));
    }

    #[test]
    fn ticks_sit_on_decades() {
        let a = LogAxis::spanning(&[0.05, 200.0], 12, 100.0, 500.0);
        assert_eq!((a.lo, a.hi), (-2, 3));
        let t = a.ticks();
        assert_eq!(t.len(), 6);
        assert_eq!(t[0].0, 100.0);
        assert_eq!(t[5].0, 500.0);
        // Evenly spaced: 80 px per decade; 100 % at 100 + 4·80.
        for (i, (x, e, label)) in t.iter().enumerate() {
            assert!((x - (100.0 + 80.0 * i as f64)).abs() < 1e-9, "{x}");
            assert_eq!(*e, -2 + i as i32);
            assert_eq!(label, &decade_label(*e));
        }
        assert!((a.x(100.0) - 420.0).abs() < 1e-9);
        assert_eq!(a.x(0.0), 100.0);
        assert_eq!(a.x(f64::INFINITY), 500.0);
        assert_eq!(a.x(1e-9), 100.0);
        // Many decades: labels thinned but 100 % kept.
        let a = LogAxis::spanning(&[1e-12, 1e6], 30, 0.0, 1000.0);
        let labelled: Vec<i32> = a
            .ticks()
            .into_iter()
            .filter(|t| !t.2.is_empty())
            .map(|t| t.1)
            .collect();
        assert!(labelled.len() <= 9, "{labelled:?}");
        assert!(labelled.contains(&2));
    }

    #[test]
    fn log_bins_are_assigned_by_their_edges() {
        // 5 bins per decade from 10^-1, 20 bins (4 decades).
        let b = |v| log_bin(v, -1, 5, 20);
        assert_eq!(b(0.1), Some(0));
        assert_eq!(b(0.15), Some(0)); // < 10^-0.8 = 0.158
        assert_eq!(b(0.16), Some(1));
        assert_eq!(b(1.0), Some(5));
        assert_eq!(b(0.999_999), Some(4));
        assert_eq!(b(100.0), Some(15));
        assert_eq!(b(99.999), Some(14));
        assert_eq!(b(1e-5), Some(0)); // below: first bin
        assert_eq!(b(1e9), Some(19)); // above: last bin
        assert_eq!(b(0.0), None);
        assert_eq!(b(-1.0), None);
        assert_eq!(b(f64::INFINITY), None);
        assert_eq!(b(f64::NAN), None);
        assert_eq!(log_bin(1.0, 0, 5, 0), None);
        // Every bin's own lower edge lands in that bin.
        let a = LogAxis {
            lo: -3,
            hi: 4,
            x0: 0.0,
            x1: 1.0,
        };
        for i in 0..a.bins(10) {
            let (lo, hi) = a.bin_edges(i, 10);
            assert_eq!(a.bin(lo, 10), Some(i), "edge of bin {i}");
            assert_eq!(a.bin((lo * hi).sqrt(), 10), Some(i), "centre of bin {i}");
        }
    }

    #[test]
    fn percent_labels() {
        assert_eq!(pct(0.0), "0 %");
        assert_eq!(pct(f64::INFINITY), "inf");
        assert_eq!(pct(146.538), "147 %");
        assert_eq!(pct(23.44), "23.4 %");
        assert_eq!(pct(1.5), "1.50 %");
        assert_eq!(pct(0.5234), "0.523 %");
        assert_eq!(pct(0.01234), "0.0123 %");
        assert_eq!(pct(384243.0), "3.84e5 %");
        assert_eq!(pct(1e6), "1e6 %");
        assert_eq!(pct(1.2e-5), "1.2e-5 %");
    }

    #[test]
    fn shapes_and_nice_numbers() {
        assert_eq!(
            bars_path(
                &[
                    Bar {
                        x0: 1.0,
                        x1: 2.0,
                        y: 3.0
                    },
                    Bar {
                        x0: 2.0,
                        x1: 3.0,
                        y: 4.25
                    }
                ],
                10.0
            ),
            "M1.0 10.0V3.0H2.0V10.0Z M2.0 10.0V4.2H3.0V10.0Z"
        );
        assert_eq!(bars_path(&[], 1.0), "");
        assert_eq!(num(f64::NAN), "0.0");
        assert_eq!(num(-0.01), "0.0");
        assert!(open(10.0, 20.0, "class=\"c\"").contains("viewBox=\"0 0 10.0 20.0\""));
        assert_eq!(
            [0, 1, 2, 3, 7, 11, 218, 300, 301, u64::MAX].map(nice_ceil),
            [1, 1, 2, 3, 8, 15, 250, 300, 400, u64::MAX]
        );
        assert_eq!(
            line(0.0, 1.0, 2.0, 3.0, "class=\"l\""),
            "<line x1=\"0.0\" y1=\"1.0\" x2=\"2.0\" y2=\"3.0\" class=\"l\"/>"
        );
    }
}
