//! What the CSV importers share: reading rows by column name, parsing fields with errors
//! that name the line and the column, the gang shape of a GPU job, and the final ordering of
//! a trace (sorted by submit time, shifted so that the first submit is 0).
//!
//! The trace CSVs are plain: numbers and hashes, no quoting. A field with a `"` is refused
//! with an error rather than half-understood, so no CSV crate is needed.

use super::{ImportOptions, TraceError, TraceJob};
use cadre_core::job::{JobSpec, TaskGroup};
use cadre_core::resources::TaskResources;
use cadre_core::time::{Dur, Time};

/// CPU cores each GPU of a trace job comes with. The traces record GPUs only; a modest,
/// fixed amount keeps GPUs the resource that binds, and fits every node shape of the
/// Tiresias specs (the smallest has 8 cores per GPU) and of `Cluster::flat_gpu` (16).
pub const CPUS_PER_GPU: u32 = 4;

/// Memory in MiB each GPU of a trace job comes with (24 GiB): fits every node shape of the
/// Tiresias specs (the smallest has 32 GiB per GPU) and of `Cluster::flat_gpu` (128 GiB).
pub const MEM_MIB_PER_GPU: u64 = 24 * 1024;

/// One data row: its line number (from 1) and its fields in the order the importer asked.
pub(crate) struct Row<'a> {
    pub(crate) line: usize,
    fields: Vec<&'a str>,
    names: &'a [&'a str],
    origin: &'a str,
}

/// The data rows of a CSV text whose header holds at least `columns` (in any order; other
/// columns are ignored). Blank lines, such as the one ending the Philly file, are skipped;
/// a `\r` before the newline (the Tiresias files) is dropped.
pub(crate) fn rows<'a>(
    text: &'a str,
    origin: &'a str,
    columns: &'a [&'a str],
) -> Result<Vec<Row<'a>>, TraceError> {
    let mut lines = text
        .strip_prefix('\u{feff}')
        .unwrap_or(text)
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
    let (header_line, header) = lines
        .by_ref()
        .find(|(_, l)| !l.trim().is_empty())
        .ok_or_else(|| TraceError::File {
            origin: origin.to_string(),
            what: "the trace is empty (no header line)".into(),
        })?;
    let header: Vec<&str> = split(header, origin, header_line)?;
    let mut index = Vec::with_capacity(columns.len());
    for want in columns {
        let at = header
            .iter()
            .position(|h| h == want)
            .ok_or_else(|| TraceError::Line {
                origin: origin.to_string(),
                line: header_line,
                what: format!(
                    "the header has no column `{want}` (expected the columns {})",
                    columns.join(",")
                ),
            })?;
        index.push(at);
    }
    let mut out = Vec::new();
    for (line, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        let all = split(l, origin, line)?;
        if all.len() != header.len() {
            return Err(TraceError::Line {
                origin: origin.to_string(),
                line,
                what: format!(
                    "expected {} fields as in the header, found {}",
                    header.len(),
                    all.len()
                ),
            });
        }
        out.push(Row {
            line,
            fields: index.iter().map(|&i| all[i]).collect(),
            names: columns,
            origin,
        });
    }
    Ok(out)
}

fn split<'a>(line: &'a str, origin: &str, number: usize) -> Result<Vec<&'a str>, TraceError> {
    if line.contains('"') {
        return Err(TraceError::Line {
            origin: origin.to_string(),
            line: number,
            what: "quoted fields are not supported in trace CSVs".into(),
        });
    }
    Ok(line.split(',').map(str::trim).collect())
}

impl<'a> Row<'a> {
    /// An error on this row, about column `i`.
    pub(crate) fn error(&self, i: usize, what: impl std::fmt::Display) -> TraceError {
        TraceError::Line {
            origin: self.origin.to_string(),
            line: self.line,
            what: format!("column `{}`: {what}", self.names[i]),
        }
    }

    /// The raw text of column `i`.
    pub(crate) fn str(&self, i: usize) -> &'a str {
        self.fields[i]
    }

    /// Column `i` as a non-empty string.
    pub(crate) fn name(&self, i: usize) -> Result<&'a str, TraceError> {
        let s = self.fields[i];
        if s.is_empty() {
            return Err(self.error(i, "is empty"));
        }
        Ok(s)
    }

    /// Column `i` as a whole number.
    pub(crate) fn u64(&self, i: usize) -> Result<u64, TraceError> {
        let s = self.fields[i];
        s.parse::<u64>()
            .map_err(|_| self.error(i, format_args!("`{s}` is not a whole number")))
    }

    /// Column `i` as a positive whole number that fits a `u32` (GPUs, replicas).
    pub(crate) fn positive_u32(&self, i: usize) -> Result<u32, TraceError> {
        let n = self.u64(i)?;
        if n == 0 {
            return Err(self.error(i, "must be positive, found 0"));
        }
        u32::try_from(n).map_err(|_| self.error(i, format_args!("{n} is too large")))
    }

    /// Column `i` as a positive number of seconds, possibly with a fraction (`2951.0`),
    /// rounded up to whole seconds.
    pub(crate) fn duration(&self, i: usize) -> Result<Dur, TraceError> {
        let s = self.fields[i];
        let secs: f64 = s
            .parse()
            .map_err(|_| self.error(i, format_args!("`{s}` is not a number of seconds")))?;
        if !secs.is_finite() || secs <= 0.0 {
            return Err(self.error(i, format_args!("must be a positive duration, found `{s}`")));
        }
        if secs > 1e15 {
            return Err(self.error(i, format_args!("`{s}` seconds is too long")));
        }
        Ok(Dur(secs.ceil() as u64))
    }
}

/// Checks the options every importer relies on.
pub(crate) fn check_options(opts: &ImportOptions, origin: &str) -> Result<(), TraceError> {
    if opts.gpus_per_node == 0 {
        return Err(TraceError::File {
            origin: origin.to_string(),
            what: "import option gpus_per_node must be positive, found 0".into(),
        });
    }
    if !opts.time_limit_factor.is_finite() || opts.time_limit_factor < 1.0 {
        return Err(TraceError::File {
            origin: origin.to_string(),
            what: format!(
                "import option time_limit_factor must be at least 1, found {}",
                opts.time_limit_factor
            ),
        });
    }
    Ok(())
}

/// What a task with `gpus` GPUs asks for: the GPUs, and [`CPUS_PER_GPU`] cores and
/// [`MEM_MIB_PER_GPU`] memory per GPU.
pub(crate) fn per_gpu_task(gpus: u32) -> TaskResources {
    TaskResources {
        cpus: CPUS_PER_GPU.saturating_mul(gpus),
        mem_mib: MEM_MIB_PER_GPU.saturating_mul(u64::from(gpus)),
        gpus,
        ..TaskResources::default()
    }
}

/// The job of a trace row asking for `gpus` GPUs.
///
/// Up to `gpus_per_node` GPUs: one task with all of them. More: a gang of whole-node tasks,
/// group `node` with `gpus / gpus_per_node` tasks of `gpus_per_node` GPUs, one per node
/// (`tasks_per_node = 1`, `nodes` = the count), and, when `gpus` is not a multiple, a group
/// `rest` of one task with the remaining GPUs. The job asks for one task per node, so the
/// remainder lands on a node of its own. The GPUs asked are exactly the trace's: nothing is
/// rounded up.
pub(crate) fn gpu_job(
    name: String,
    user: &str,
    account: &str,
    gpus: u32,
    duration: Dur,
    opts: &ImportOptions,
) -> JobSpec {
    let per_node = opts.gpus_per_node.max(1);
    let limit = opts.time_limit(duration);
    let mut spec = if gpus <= per_node {
        JobSpec::simple(user, account, 1, per_gpu_task(gpus), limit)
    } else {
        let full = gpus / per_node;
        let rest = gpus % per_node;
        let mut spec = JobSpec::simple(user, account, full, per_gpu_task(per_node), limit);
        spec.groups[0].name = "node".into();
        spec.groups[0].tasks_per_node = Some(1);
        spec.groups[0].nodes = Some(full);
        if rest > 0 {
            spec.groups.push(TaskGroup {
                name: "rest".into(),
                count: 1,
                min_count: None,
                per_task: per_gpu_task(rest),
                tasks_per_node: Some(1),
                nodes: Some(1),
            });
        }
        spec.one_task_per_node = true;
        spec
    };
    spec.name = name;
    spec
}

/// A job as read, before the trace is ordered: its submit time as the trace gives it.
pub(crate) struct RawJob {
    pub(crate) submit: u64,
    pub(crate) duration: Dur,
    pub(crate) spec: JobSpec,
}

/// Orders the jobs by submit time (stable: trace order among equal times) and shifts the
/// times so that the first submit is 0; `spec.submit_time` is set to the shifted time.
pub(crate) fn finish(mut jobs: Vec<RawJob>) -> Vec<TraceJob> {
    jobs.sort_by_key(|j| j.submit);
    let first = jobs.first().map_or(0, |j| j.submit);
    jobs.into_iter()
        .map(|j| {
            let submit = Time(j.submit - first);
            let mut spec = j.spec;
            spec.submit_time = submit;
            TraceJob {
                submit,
                duration: j.duration,
                spec,
            }
        })
        .collect()
}
