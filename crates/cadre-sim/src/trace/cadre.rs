//! cadre's own trace format: JSON lines, one job per line, able to express everything the
//! core's [`JobSpec`] can (task groups, elastic minimums, topology, dependencies, QOS,
//! partitions, ...):
//!
//! ```json
//! {"submit": 30, "duration": 600, "spec": { ...a JobSpec as serde JSON... }}
//! ```
//!
//! - `submit`: seconds; the trace is sorted and shifted so that the first submit is 0.
//! - `duration`: the actual run time in seconds, positive.
//! - `spec`: a [`JobSpec`]; unknown keys are refused. `spec.submit_time` may be left out
//!   (it is set to `submit`); if given it must equal `submit`. `spec.time_limit` may be
//!   left out or 0: it is then filled from the duration by
//!   [`ImportOptions::time_limit`].
//!
//! Blank lines are skipped; any other line that is not such an object is an error naming
//! the line. [`write_jsonl`] writes this format, so any trace can be converted to it.

use super::rows::{self, RawJob};
use super::{ImportOptions, TraceError, TraceJob};
use cadre_core::job::JobSpec;
use cadre_core::time::Dur;
use serde::Deserialize;
use std::io::Write;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    submit: u64,
    duration: u64,
    spec: serde_json::Map<String, serde_json::Value>,
}

/// serde_json's message without its " at line 1 column N" (the line is ours), with the
/// column where it knows one.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let msg = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(m, _)| m);
    if e.column() > 0 {
        format!("column {}: {msg}", e.column())
    } else {
        msg.to_string()
    }
}

pub(crate) fn import(
    text: &str,
    origin: &str,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    rows::check_options(opts, origin)?;
    let mut jobs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let err = |what: String| TraceError::Line {
            origin: origin.to_string(),
            line,
            what,
        };
        let parsed: Line = serde_json::from_str(raw)
            .map_err(|e| err(format!("not a cadre trace line: {}", json_error(&e))))?;
        if parsed.duration == 0 {
            return Err(err("`duration` must be positive, found 0".into()));
        }
        let duration = Dur(parsed.duration);
        let mut spec = parsed.spec;
        match spec.get("submit_time") {
            None => {
                spec.insert("submit_time".into(), parsed.submit.into());
            }
            Some(v) if v.as_u64() == Some(parsed.submit) => {}
            Some(v) => {
                return Err(err(format!(
                    "`spec.submit_time` is {v} but `submit` is {}; leave it out or make them \
                     equal",
                    parsed.submit
                )));
            }
        }
        if !spec.contains_key("time_limit") {
            spec.insert("time_limit".into(), 0.into());
        }
        let mut spec: JobSpec = serde_json::from_value(serde_json::Value::Object(spec))
            .map_err(|e| err(format!("`spec` is not a job spec: {}", json_error(&e))))?;
        if spec.time_limit == Dur(0) {
            spec.time_limit = opts.time_limit(duration);
        }
        jobs.push(RawJob {
            submit: parsed.submit,
            duration,
            spec,
        });
    }
    Ok(rows::finish(jobs))
}

/// Writes `jobs` in cadre's JSON-lines format, one line per job, in the given order. What
/// it writes reads back ([`super::import_str`] with [`super::TraceFormat::Cadre`]) to the
/// same jobs when they are sorted by submit time, the first submits at 0 and every
/// `spec.submit_time` equals its `submit`: what every importer returns.
pub fn write_jsonl<W: Write>(jobs: &[TraceJob], mut writer: W) -> std::io::Result<()> {
    for job in jobs {
        serde_json::to_writer(&mut writer, job)?;
        writer.write_all(b"\n")?;
    }
    writer.flush()
}
