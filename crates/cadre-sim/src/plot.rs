//! Plots of replays: one picture that shows which policy is better.
//!
//! Three panels, one line per policy: GPU utilization over time, queued jobs over time, and
//! the CDF of wait times (log scale). SVG or PNG, by the file's extension. Text needs a
//! TrueType font: the first found of `$CADRE_PLOT_FONT` and the usual system paths of
//! DejaVu Sans and Liberation Sans (Debian: `fonts-dejavu-core`).

use crate::report::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Errors of drawing a plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("plot {path}: the file name must end in .svg or .png")]
    Format { path: String },
    #[error(
        "plot {path}: no TrueType font found (set CADRE_PLOT_FONT to a .ttf file, or install fonts-dejavu-core)"
    )]
    NoFont { path: String },
    #[error("plot {path}: nothing to plot")]
    Empty { path: String },
    #[error("plot {path}: {what}")]
    Draw { path: String, what: String },
}

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
];

/// Registers a font for plotters once; false if none was found.
fn ensure_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let candidates = std::env::var_os("CADRE_PLOT_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONT_PATHS.iter().map(PathBuf::from));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // plotters keeps fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws the comparison of `reports` (one per policy) into `path` (.svg or .png).
pub fn plot(reports: &[Report], path: &Path) -> Result<(), PlotError> {
    let shown = path.display().to_string();
    if reports.is_empty() || reports.iter().all(|r| r.series.is_empty()) {
        return Err(PlotError::Empty { path: shown });
    }
    if !ensure_font() {
        return Err(PlotError::NoFont { path: shown });
    }
    let size = (1400, 1000);
    let draw_err = |e: String| PlotError::Draw {
        path: shown.clone(),
        what: e,
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            draw(SVGBackend::new(path, size).into_drawing_area(), reports).map_err(draw_err)
        }
        Some("png") => {
            draw(BitMapBackend::new(path, size).into_drawing_area(), reports).map_err(draw_err)
        }
        _ => Err(PlotError::Format { path: shown }),
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    reports: &[Report],
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled("cadre sim: policies compared", ("sans-serif", 28))
        .map_err(e)?;
    let (top, bottom) = root.split_vertically(500);
    let (util_area, queue_area) = top.split_horizontally(700);
    let t_max = reports
        .iter()
        .flat_map(|r| r.series.last())
        .map(|p| p.t)
        .max()
        .unwrap_or(1)
        .max(1) as f64
        / 3600.0;
    let label = |r: &Report| {
        format!(
            "{}: util {:.1}%, mean wait {:.0} s, p95 {:.0} s",
            r.policy,
            r.gpu_utilization * 100.0,
            r.mean_wait_s,
            r.p95_wait_s
        )
    };

    // GPU utilization over time.
    let mut chart = ChartBuilder::on(&util_area)
        .caption("GPU utilization", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..t_max, 0f64..1.05f64)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("allocated / total")
        .draw()
        .map_err(e)?;
    for (i, r) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let gpus = r.gpus.max(1) as f64;
        chart
            .draw_series(LineSeries::new(
                r.series
                    .iter()
                    .map(|p| (p.t as f64 / 3600.0, p.allocated_gpus / gpus)),
                color.stroke_width(1),
            ))
            .map_err(e)?
            .label(label(r))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)?;

    // Queued jobs over time.
    let q_max = reports
        .iter()
        .flat_map(|r| r.series.iter().map(|p| p.queued))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut chart = ChartBuilder::on(&queue_area)
        .caption("queued jobs", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max, 0f64..q_max * 1.05)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("jobs waiting")
        .draw()
        .map_err(e)?;
    for (i, r) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                r.series
                    .iter()
                    .map(|p| (p.t as f64 / 3600.0, p.queued as f64)),
                color.stroke_width(1),
            ))
            .map_err(e)?;
    }

    // Wait-time CDF, log scale (waits below 1 s drawn at 1 s).
    let w_max = reports
        .iter()
        .flat_map(|r| r.waits.last())
        .copied()
        .fold(10.0f64, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .caption("wait time CDF (log scale)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1f64..w_max * 1.1).log_scale(), 0f64..1.0f64)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("wait (s)")
        .y_desc("fraction of jobs")
        .draw()
        .map_err(e)?;
    for (i, r) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = r.waits.len().max(1) as f64;
        let step = (r.waits.len() / 4000).max(1);
        let points = r
            .waits
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(k, w)| (w.max(1.0), (k + 1) as f64 / n))
            .chain(r.waits.last().map(|w| (w.max(1.0), 1.0)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(e)?
            .label(label(r))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// One run of `cadre bench scheduler --json`: the figures [`plot_pass_times`] draws.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct PassBench {
    pub nodes: u32,
    pub pending: u32,
    pub cycle_ms_p50: f64,
    pub cycle_ms_p99: f64,
    pub fill_cycle_ms: f64,
}

/// Draws scheduling pass times against cluster size, one line per queue depth: the steady
/// pass (p50, p99 dashed) and the fill pass, on log scales, into `path` (.svg or .png).
pub fn plot_pass_times(runs: &[PassBench], path: &Path) -> Result<(), PlotError> {
    let shown = path.display().to_string();
    if runs.is_empty() {
        return Err(PlotError::Empty { path: shown });
    }
    if !ensure_font() {
        return Err(PlotError::NoFont { path: shown });
    }
    let size = (1200, 520);
    let draw_err = |e: String| PlotError::Draw {
        path: shown.clone(),
        what: e,
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            draw_pass_times(SVGBackend::new(path, size).into_drawing_area(), runs).map_err(draw_err)
        }
        Some("png") => draw_pass_times(BitMapBackend::new(path, size).into_drawing_area(), runs)
            .map_err(draw_err),
        _ => Err(PlotError::Format { path: shown }),
    }
}

fn draw_pass_times<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    runs: &[PassBench],
) -> Result<(), String> {
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(
            "cadre bench scheduler: pass time by cluster size and queue depth",
            ("sans-serif", 24),
        )
        .map_err(e)?;
    let (steady_area, fill_area) = root.split_horizontally(600);
    let mut depths: Vec<u32> = runs.iter().map(|r| r.pending).collect();
    depths.sort_unstable();
    depths.dedup();
    let nodes_max = runs.iter().map(|r| r.nodes).max().unwrap_or(1) as f64;
    let nodes_min = runs.iter().map(|r| r.nodes).min().unwrap_or(1) as f64;
    let x_range = (nodes_min * 0.8..nodes_max * 1.25).log_scale();
    let panels: [(&DrawingArea<DB, Shift>, &str, bool); 2] = [
        (
            &steady_area,
            "steady pass, ms (p50 solid, p99 dashed)",
            true,
        ),
        (&fill_area, "fill pass (half the cluster idle), ms", false),
    ];
    for (area, caption, steady) in panels {
        let ys = runs.iter().flat_map(|r| match steady {
            true => [r.cycle_ms_p50, r.cycle_ms_p99],
            false => [r.fill_cycle_ms, r.fill_cycle_ms],
        });
        let y_max = ys.clone().fold(1.0f64, f64::max) * 1.5;
        let y_min = ys.fold(f64::INFINITY, f64::min).max(0.1) * 0.5;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x_range.clone(), (y_min..y_max).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("nodes (8 GPUs each)")
            .y_desc("ms")
            .x_labels(6)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(e)?;
        for (i, &depth) in depths.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut line: Vec<&PassBench> = runs.iter().filter(|r| r.pending == depth).collect();
            line.sort_by_key(|r| r.nodes);
            let main = |r: &&PassBench| match steady {
                true => (f64::from(r.nodes), r.cycle_ms_p50),
                false => (f64::from(r.nodes), r.fill_cycle_ms),
            };
            chart
                .draw_series(LineSeries::new(
                    line.iter().map(main),
                    color.stroke_width(2),
                ))
                .map_err(e)?
                .label(format!("{depth} pending"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                });
            chart
                .draw_series(line.iter().map(|r| Circle::new(main(r), 4, color.filled())))
                .map_err(e)?;
            if steady {
                chart
                    .draw_series(DashedLineSeries::new(
                        line.iter().map(|r| (f64::from(r.nodes), r.cycle_ms_p99)),
                        6,
                        4,
                        color.stroke_width(1),
                    ))
                    .map_err(e)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}
