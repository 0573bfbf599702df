//! The soak's chart: success per minute and attempts per source, as SVG.

use crate::run::RunResult;
use gateway_core::telemetry::CallResult;
use plotters::prelude::*;
use std::path::Path;

/// A chart that cannot be drawn, with the file it was for.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot draw the chart: {problem}", path.display())]
pub struct ChartError {
    /// The chart's file.
    pub path: std::path::PathBuf,
    /// What the drawing library said.
    pub problem: String,
}

/// Per-minute success rate and attempts per source of `run`, drawn to `path` as SVG.
pub fn chart(run: &RunResult, title: &str, path: &Path) -> Result<(), ChartError> {
    let fail = |e: &dyn std::fmt::Display| ChartError { path: path.to_path_buf(), problem: e.to_string() };
    let minutes = (run.duration.as_secs_f64() / 60.0).ceil().max(1.0) as usize;
    let minute_of = |t: gateway_core::Timestamp| ((t.saturating_since(run.start).as_secs_f64() / 60.0) as usize).min(minutes - 1);
    let mut ok = vec![0u32; minutes];
    let mut ended = vec![0u32; minutes];
    for c in &run.call_events {
        let m = minute_of(c.started.saturating_add(c.elapsed));
        ended[m] += 1;
        ok[m] += u32::from(c.result == CallResult::Ok);
    }
    let sources: Vec<String> = run.policy.sources.iter().map(|s| s.name.clone()).collect();
    let mut per_source = vec![vec![0u32; minutes]; sources.len()];
    for a in &run.attempt_events {
        if let Some(i) = sources.iter().position(|s| **s == *a.key.source) {
            per_source[i][minute_of(a.started)] += 1;
        }
    }
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (top, bottom) = root.split_vertically(300);
    let mut success = ChartBuilder::on(&top)
        .caption(format!("{title}: success rate per minute"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..minutes as f64, 0f64..100f64)
        .map_err(|e| fail(&e))?;
    success.configure_mesh().x_desc("scenario minute").y_desc("% ok").draw().map_err(|e| fail(&e))?;
    let points: Vec<(f64, f64)> =
        (0..minutes).filter(|&m| ended[m] > 0).map(|m| (m as f64 + 0.5, 100.0 * f64::from(ok[m]) / f64::from(ended[m]))).collect();
    success.draw_series(LineSeries::new(points, &BLUE)).map_err(|e| fail(&e))?;
    let peak = per_source.iter().flatten().copied().max().unwrap_or(1).max(1);
    let mut attempts = ChartBuilder::on(&bottom)
        .caption("attempts per source per minute", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..minutes as f64, 0f64..f64::from(peak) * 1.1)
        .map_err(|e| fail(&e))?;
    attempts.configure_mesh().x_desc("scenario minute").y_desc("attempts").draw().map_err(|e| fail(&e))?;
    for (i, source) in sources.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series: Vec<(f64, f64)> = per_source[i].iter().enumerate().map(|(m, n)| (m as f64 + 0.5, f64::from(*n))).collect();
        attempts
            .draw_series(LineSeries::new(series, color))
            .map_err(|e| fail(&e))?
            .label(source.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    attempts.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw().map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
