//! The figures of `cadre bench vs-slurm` and their three renderings: the terminal table, the
//! Markdown table of BENCHMARKS.md and the JSON object (keys `submit`, `latency`, `replay`,
//! `scale`, each with a `cadre` and a `slurm` object). Pure: figures in, text out.
//!
//! The ratio column is always cadre's figure over Slurm's; the goal column says which ratio
//! the issue asks for and whether the run met it (a throughput of at least 5x, a latency of
//! at most 0.1x, a mean wait of at most 0.7x at a GPU utilization of at least 1x, no partial
//! gang start).

use serde::Serialize;
use std::fmt::Write as _;

/// `submit`: submissions per second.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SubmitFigures {
    /// Through the command line: `sbatch --wrap true` from concurrent shells.
    pub submit_per_s: f64,
    /// Through the API (cadre only): the same job, one per request, from as many clients.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_submit_per_s: Option<f64>,
    pub jobs: u32,
    /// Submissions that did not print a job id.
    pub failed: u32,
}

/// `latency`: submit to the job's first instruction, jobs one after another.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyFigures {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub jobs: u32,
}

/// `replay`: the trace window as each system ran it, from its own records.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayFigures {
    /// GPU-seconds allocated (start to end of each run, as recorded) over the cluster's
    /// GPUs x makespan.
    pub gpu_utilization: f64,
    /// GPU-seconds of the jobs' own work (their `sleep`) over the cluster's GPUs x
    /// makespan: the same numerator on both systems, so that a system holding GPUs longer
    /// per job (launch and clean-up) does not look busier.
    pub work_utilization: f64,
    pub mean_wait_s: f64,
    pub p95_wait_s: f64,
    pub makespan_s: f64,
    pub mean_bounded_slowdown: f64,
    pub partial_gang_starts: usize,
    pub jobs: usize,
    /// Jobs with no record of a start and an end (never ran, or the run was cut off).
    pub missing: usize,
}

/// One step of `scale`: the pending backlog and the probes' submit-to-start at it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleStep {
    pub pending: u32,
    /// Median of the probes' submit-to-first-instruction, in ms (`None`: a probe did not
    /// start within the probe timeout).
    pub probe_ms: Option<f64>,
}

/// `scale`: the largest backlog at which a probe still started within the bound.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScaleFigures {
    pub max_pending: u32,
    /// The bound was still met at the largest step tried (the real limit is higher).
    pub reached_cap: bool,
    pub steps: Vec<ScaleStep>,
}

/// Both systems' figures for one workload.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Pair<T> {
    pub cadre: T,
    pub slurm: T,
}

/// Everything one run measured; a workload left out (`--only`) is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Results {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit: Option<Pair<SubmitFigures>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Pair<LatencyFigures>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<Pair<ReplayFigures>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<Pair<ScaleFigures>>,
}

/// What the table's header says about the run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunHeader {
    pub slurm_version: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cadre_cpus_per_node: u32,
    pub slurm_cpus_per_node: u32,
    pub quick: bool,
    /// One line each: the workloads' sizes as run (window, compression, steps).
    pub notes: Vec<String>,
}

/// Which way a goal goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Goal {
    /// The ratio must be at least this.
    AtLeast(f64),
    /// The ratio must be at most this.
    AtMost(f64),
    /// cadre's figure must be exactly zero.
    Zero,
    None,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    workload: &'static str,
    figure: &'static str,
    cadre: Option<f64>,
    slurm: Option<f64>,
    decimals: usize,
    goal: Goal,
    /// Text instead of the numbers (a figure that is a bound, e.g. `>= 32000`).
    cadre_text: Option<String>,
    slurm_text: Option<String>,
}

impl Row {
    fn new(workload: &'static str, figure: &'static str, cadre: f64, slurm: f64) -> Row {
        Row {
            workload,
            figure,
            cadre: Some(cadre),
            slurm: Some(slurm),
            decimals: 1,
            goal: Goal::None,
            cadre_text: None,
            slurm_text: None,
        }
    }
    fn decimals(mut self, d: usize) -> Row {
        self.decimals = d;
        self
    }
    fn goal(mut self, g: Goal) -> Row {
        self.goal = g;
        self
    }

    /// cadre's figure over Slurm's; infinite when Slurm's is 0 and cadre's is not (a
    /// backlog Slurm could not take at all), none when both are 0.
    fn ratio(&self) -> Option<f64> {
        match (self.cadre, self.slurm) {
            (Some(c), Some(s)) if s != 0.0 => Some(c / s),
            (Some(c), Some(_)) if c > 0.0 => Some(f64::INFINITY),
            _ => None,
        }
    }

    fn cells(&self) -> [String; 5] {
        let num = |v: Option<f64>, text: &Option<String>| match (text, v) {
            (Some(t), _) => t.clone(),
            (None, Some(v)) => format!("{v:.*}", self.decimals),
            (None, None) => "-".into(),
        };
        let ratio = match self.ratio() {
            Some(r) if r.is_infinite() => "∞".into(),
            Some(r) if r >= 100.0 => format!("{r:.0}x"),
            Some(r) if r >= 10.0 => format!("{r:.1}x"),
            Some(r) => format!("{r:.2}x"),
            None => "-".into(),
        };
        let goal = match self.goal {
            Goal::AtLeast(g) => {
                let met = self.ratio().is_some_and(|r| r >= g);
                format!("≥ {g}x: {}", if met { "met" } else { "not met" })
            }
            Goal::AtMost(g) => {
                let met = self.ratio().is_some_and(|r| r <= g);
                format!("≤ {g}x: {}", if met { "met" } else { "not met" })
            }
            Goal::Zero => {
                let met = self.cadre == Some(0.0);
                format!("0: {}", if met { "met" } else { "not met" })
            }
            Goal::None => String::new(),
        };
        [
            format!("{} {}", self.workload, self.figure),
            num(self.cadre, &self.cadre_text),
            num(self.slurm, &self.slurm_text),
            ratio,
            goal,
        ]
    }
}

fn rows(r: &Results) -> Vec<Row> {
    let mut out = Vec::new();
    if let Some(p) = &r.submit {
        out.push(
            Row::new(
                "submit",
                "sbatch/s (8 shells)",
                p.cadre.submit_per_s,
                p.slurm.submit_per_s,
            )
            .decimals(0)
            .goal(Goal::AtLeast(5.0)),
        );
        if let Some(api) = p.cadre.api_submit_per_s {
            let mut row = Row::new(
                "submit",
                "API jobs/s (8 clients)",
                api,
                p.slurm.submit_per_s,
            )
            .decimals(0)
            .goal(Goal::AtLeast(5.0));
            // Slurm has no API here: the ratio is to its command line.
            row.slurm_text = Some(format!("({:.0} sbatch/s)", p.slurm.submit_per_s));
            out.push(row);
        }
    }
    if let Some(p) = &r.latency {
        out.push(
            Row::new("latency", "p50 ms", p.cadre.p50_ms, p.slurm.p50_ms).goal(Goal::AtMost(0.1)),
        );
        out.push(
            Row::new("latency", "p99 ms", p.cadre.p99_ms, p.slurm.p99_ms).goal(Goal::AtMost(0.1)),
        );
    }
    if let Some(p) = &r.replay {
        let (c, s) = (&p.cadre, &p.slurm);
        out.push(
            Row::new(
                "replay",
                "GPU utilization",
                c.gpu_utilization,
                s.gpu_utilization,
            )
            .decimals(3)
            .goal(Goal::AtLeast(1.0)),
        );
        out.push(
            Row::new(
                "replay",
                "GPU work / capacity",
                c.work_utilization,
                s.work_utilization,
            )
            .decimals(3),
        );
        out.push(
            Row::new("replay", "mean wait s", c.mean_wait_s, s.mean_wait_s)
                .decimals(2)
                .goal(Goal::AtMost(0.7)),
        );
        out.push(Row::new("replay", "p95 wait s", c.p95_wait_s, s.p95_wait_s).decimals(2));
        out.push(Row::new("replay", "makespan s", c.makespan_s, s.makespan_s).decimals(0));
        out.push(
            Row::new(
                "replay",
                "mean bounded slowdown",
                c.mean_bounded_slowdown,
                s.mean_bounded_slowdown,
            )
            .decimals(2),
        );
        let gang = Row::new(
            "replay",
            "partial gang starts",
            c.partial_gang_starts as f64,
            s.partial_gang_starts as f64,
        )
        .decimals(0)
        .goal(Goal::Zero);
        out.push(gang);
    }
    if let Some(p) = &r.scale {
        let mut row = Row::new(
            "scale",
            "max pending, start < 1 s",
            f64::from(p.cadre.max_pending),
            f64::from(p.slurm.max_pending),
        )
        .decimals(0)
        .goal(Goal::AtLeast(1.0));
        let bound = |f: &ScaleFigures| f.reached_cap.then(|| format!("≥ {}", f.max_pending));
        row.cadre_text = bound(&p.cadre);
        row.slurm_text = bound(&p.slurm);
        out.push(row);
    }
    out
}

const HEADINGS: [&str; 5] = ["workload, figure", "cadre", "Slurm", "cadre/Slurm", "goal"];

fn header_lines(h: &RunHeader) -> Vec<String> {
    let mut lines = vec![format!(
        "cadre vs Slurm {}: {} nodes x {} GPUs (cadre: {} CPUs per node; Slurm: {}){}",
        h.slurm_version,
        h.nodes,
        h.gpus_per_node,
        h.cadre_cpus_per_node,
        h.slurm_cpus_per_node,
        if h.quick { ", --quick" } else { "" }
    )];
    lines.extend(h.notes.iter().cloned());
    lines
}

/// The terminal table: aligned columns, one line per figure.
pub fn render_table(h: &RunHeader, r: &Results) -> String {
    let rows: Vec<[String; 5]> = rows(r).iter().map(Row::cells).collect();
    let mut width = [0usize; 5];
    for (i, head) in HEADINGS.iter().enumerate() {
        width[i] = head.chars().count();
    }
    for row in &rows {
        for i in 0..5 {
            width[i] = width[i].max(row[i].chars().count());
        }
    }
    let mut out = String::new();
    for line in header_lines(h) {
        let _ = writeln!(out, "{line}");
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i == 0 || i == 4 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            if i < 4 {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(HEADINGS));
    for row in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([&row[0], &row[1], &row[2], &row[3], &row[4]])
        );
    }
    if let Some(s) = &r.scale {
        for (name, f) in [("cadre", &s.cadre), ("Slurm", &s.slurm)] {
            let _ = writeln!(out, "scale steps, {name}: {}", steps_text(f));
        }
    }
    out
}

fn steps_text(f: &ScaleFigures) -> String {
    f.steps
        .iter()
        .map(|s| match s.probe_ms {
            Some(ms) => format!("{} pending: {ms:.0} ms", s.pending),
            None => format!("{} pending: no start", s.pending),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Markdown table for BENCHMARKS.md.
pub fn render_markdown(h: &RunHeader, r: &Results) -> String {
    let mut out = String::new();
    for line in header_lines(h) {
        let _ = writeln!(out, "{line}  ");
    }
    out.push('\n');
    let _ = writeln!(out, "| {} |", HEADINGS.join(" | "));
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for row in rows(r) {
        let c = row.cells();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            c[0], c[1], c[2], c[3], c[4]
        );
    }
    if let Some(s) = &r.scale {
        out.push('\n');
        for (name, f) in [("cadre", &s.cadre), ("Slurm", &s.slurm)] {
            let _ = writeln!(out, "Scale steps, {name}: {}.  ", steps_text(f));
        }
    }
    out
}

/// The JSON object: the workloads' names as keys, each with `cadre` and `slurm`.
pub fn render_json(r: &Results) -> serde_json::Result<String> {
    serde_json::to_string_pretty(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RunHeader {
        RunHeader {
            slurm_version: "22.05.8".into(),
            nodes: 16,
            gpus_per_node: 8,
            cadre_cpus_per_node: 2,
            slurm_cpus_per_node: 2,
            quick: false,
            notes: vec!["replay: 500 Philly jobs".into()],
        }
    }

    fn results() -> Results {
        Results {
            submit: Some(Pair {
                cadre: SubmitFigures {
                    submit_per_s: 400.0,
                    api_submit_per_s: Some(5000.0),
                    jobs: 5000,
                    failed: 0,
                },
                slurm: SubmitFigures {
                    submit_per_s: 100.0,
                    api_submit_per_s: None,
                    jobs: 5000,
                    failed: 0,
                },
            }),
            latency: Some(Pair {
                cadre: LatencyFigures {
                    p50_ms: 20.0,
                    p99_ms: 50.0,
                    max_ms: 60.0,
                    jobs: 200,
                },
                slurm: LatencyFigures {
                    p50_ms: 1000.0,
                    p99_ms: 1200.0,
                    max_ms: 1300.0,
                    jobs: 200,
                },
            }),
            replay: Some(Pair {
                cadre: ReplayFigures {
                    gpu_utilization: 0.5,
                    work_utilization: 0.45,
                    mean_wait_s: 2.0,
                    p95_wait_s: 10.0,
                    makespan_s: 300.0,
                    mean_bounded_slowdown: 1.5,
                    partial_gang_starts: 0,
                    jobs: 500,
                    missing: 0,
                },
                slurm: ReplayFigures {
                    gpu_utilization: 0.48,
                    work_utilization: 0.44,
                    mean_wait_s: 4.0,
                    p95_wait_s: 12.0,
                    makespan_s: 310.0,
                    mean_bounded_slowdown: 2.0,
                    partial_gang_starts: 0,
                    jobs: 500,
                    missing: 0,
                },
            }),
            scale: Some(Pair {
                cadre: ScaleFigures {
                    max_pending: 32000,
                    reached_cap: true,
                    steps: vec![ScaleStep {
                        pending: 32000,
                        probe_ms: Some(30.0),
                    }],
                },
                slurm: ScaleFigures {
                    max_pending: 0,
                    reached_cap: false,
                    steps: vec![
                        ScaleStep {
                            pending: 0,
                            probe_ms: Some(980.0),
                        },
                        ScaleStep {
                            pending: 500,
                            probe_ms: None,
                        },
                    ],
                },
            }),
        }
    }

    #[test]
    fn the_table_shows_both_figures_the_ratio_and_the_goal() {
        let text = render_table(&header(), &results());
        assert!(text.starts_with("cadre vs Slurm 22.05.8: 16 nodes x 8 GPUs"));
        let submit = text
            .lines()
            .find(|l| l.starts_with("submit sbatch/s"))
            .unwrap();
        assert!(submit.contains("400") && submit.contains("100") && submit.contains("4.00x"));
        assert!(submit.ends_with("≥ 5x: not met"), "{submit}");
        let p50 = text.lines().find(|l| l.starts_with("latency p50")).unwrap();
        assert!(
            p50.contains("0.02x") && p50.ends_with("≤ 0.1x: met"),
            "{p50}"
        );
        let wait = text
            .lines()
            .find(|l| l.starts_with("replay mean wait"))
            .unwrap();
        assert!(wait.contains("0.50x") && wait.ends_with("met"), "{wait}");
        let scale = text.lines().find(|l| l.starts_with("scale max")).unwrap();
        assert!(scale.contains("≥ 32000"), "{scale}");
        // Slurm took no backlog at all: the ratio is infinite, and the goal met.
        assert!(
            scale.contains('∞') && scale.ends_with("≥ 1x: met"),
            "{scale}"
        );
        assert!(text.contains("scale steps, Slurm: 0 pending: 980 ms, 500 pending: no start"));
    }

    #[test]
    fn the_table_aligns_its_columns() {
        let text = render_table(&header(), &results());
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("workload"))
            .take_while(|l| !l.starts_with("scale steps"))
            .collect();
        // Every row's Slurm column ends where the heading's does.
        let end = lines[0].find("Slurm").unwrap() + "Slurm".len();
        for l in &lines[1..] {
            let before: String = l.chars().take(end).collect();
            assert!(!before.ends_with(' '), "misaligned: {l}");
        }
    }

    #[test]
    fn markdown_is_a_table_with_one_row_per_figure() {
        let md = render_markdown(&header(), &results());
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(
            table[0],
            "| workload, figure | cadre | Slurm | cadre/Slurm | goal |"
        );
        assert_eq!(table[1], "|---|---:|---:|---:|---|");
        // 2 submit + 2 latency + 7 replay + 1 scale.
        assert_eq!(table.len(), 2 + 12);
        assert!(table.iter().all(|l| l.matches('|').count() == 6), "{md}");
        assert!(md.contains("| replay partial gang starts | 0 | 0 | - | 0: met |"));
    }

    #[test]
    fn json_keys_are_the_workloads_each_with_cadre_and_slurm() {
        let v: serde_json::Value = serde_json::from_str(&render_json(&results()).unwrap()).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["latency", "replay", "scale", "submit"]);
        assert_eq!(v["submit"]["cadre"]["submit_per_s"], 400.0);
        assert_eq!(v["submit"]["cadre"]["api_submit_per_s"], 5000.0);
        assert!(v["submit"]["slurm"].get("api_submit_per_s").is_none());
        assert_eq!(v["latency"]["slurm"]["p99_ms"], 1200.0);
        for k in [
            "gpu_utilization",
            "mean_wait_s",
            "p95_wait_s",
            "makespan_s",
            "mean_bounded_slowdown",
            "partial_gang_starts",
        ] {
            assert!(v["replay"]["cadre"].get(k).is_some(), "{k}");
            assert!(v["replay"]["slurm"].get(k).is_some(), "{k}");
        }
        assert_eq!(v["scale"]["cadre"]["max_pending"], 32000);
    }

    #[test]
    fn workloads_left_out_are_absent() {
        let r = Results {
            latency: results().latency,
            ..Results::default()
        };
        let v: serde_json::Value = serde_json::from_str(&render_json(&r).unwrap()).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
        let text = render_table(&header(), &r);
        assert!(!text.lines().any(|l| l.starts_with("replay ")), "{text}");
    }
}
