//! Draws the scheduler's pass times from `cadre bench scheduler --json` runs, one JSON
//! object per line (see BENCHMARKS.md):
//!
//! ```sh
//! cargo run -p cadre-sim --example pass_times_plot -- docs/bench-scheduler.jsonl docs/bench-scheduler.svg
//! ```

use cadre_sim::plot::{PassBench, plot_pass_times};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [runs, out] = args.as_slice() else {
        eprintln!("usage: pass_times_plot RUNS.jsonl OUT.svg");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(runs) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("failed to read {runs}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut points = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str::<PassBench>(line) {
            Ok(p) => points.push(p),
            Err(e) => {
                eprintln!("{runs}:{}: not a bench run: {e}", i + 1);
                return ExitCode::FAILURE;
            }
        }
    }
    match plot_pass_times(&points, Path::new(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
