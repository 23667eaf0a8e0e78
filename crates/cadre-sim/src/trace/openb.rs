//! The Alibaba "openb" GPU cluster trace (cluster-trace-gpu-v2023, the ATC'23 fragmentation
//! paper): its node list as a [`Cluster`] and its pod lists as [`TraceJob`]s.
//!
//! # Given
//! - A node list `sn,cpu_milli,memory_mib,gpu,model` (`openb_node_list_gpu_node.csv`):
//!   heterogeneous GPU servers, one row each.
//! - A pod list `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
//!   creation_time,deletion_time,scheduled_time` (`openb_pod_list_*.csv`); some variant files
//!   have only the first five columns. Columns are found by their header names.
//!
//! # Decided
//! - Nodes: one [`NodeShape`] per distinct (cores, memory, GPUs, model), in order of first
//!   appearance; one NUMA domain per node (the trace says nothing about NUMA, and one domain
//!   constrains nothing); no NICs; GPU models lowercased (`V100M32` -> `v100m32`), GPU memory
//!   where the model name tells it (`v100m16`, `v100m32`, `t4`, `p100`, `a10`), 0 (unknown)
//!   for the undisclosed `g1`..`g3`. A node's `cpu_milli` becomes whole cores, rounded down
//!   (a fraction of a core cannot be pinned). One partition `default` holds every node.
//! - Pods: one single-task job each. Cores: `cpu_milli` rounded **up** to whole cores, since
//!   cadre pins whole cores as devices (this asks for a little more than the trace: 3.8% more
//!   cores over the default pod list). Memory: `memory_mib`. GPUs: `num_gpu` whole GPUs when
//!   `gpu_milli` is 1000, or a share (`gpu_share_milli`) when `num_gpu` is 1 and `gpu_milli`
//!   is below 1000. A `gpu_spec` naming one model becomes [`TaskResources::gpu_model`]; one
//!   naming several (`V100M16|V100M32`) is refused with an error, because a task names one
//!   model and node features and labels are all-of, not any-of constraints (none of the
//!   pod lists shipped in `shared/traces` has one).
//! - Times: submit = `creation_time`, duration = `deletion_time - creation_time`. Pod lists
//!   without those columns (the `multigpu*` files) arrive at time 0 in file order and run for
//!   [`NEVER_DELETED`]. Jobs come back sorted by submit time, file order among equals.
//!   `qos`, `pod_phase` and `scheduled_time` are not used: every pod is a job to place.
//!
//! # Must hold
//! Every row either becomes exactly one job (one node) or the import fails naming the line.

use super::{ImportOptions, TraceError, TraceJob};
use cadre_core::cluster::{Cluster, Node, NodeShape, Partition, ShapeId};
use cadre_core::job::JobSpec;
use cadre_core::resources::{MILLI_PER_GPU, TaskResources};
use cadre_core::time::{Dur, Time};
use std::collections::BTreeMap;

/// The duration of pods whose list carries no deletion time: a century, i.e. they never end
/// in any replay (the arrival-only protocol), while time arithmetic stays far from overflow.
pub const NEVER_DELETED: Dur = Dur::days(36_500);

/// Users and accounts of imported pods (the trace has neither).
const USER: &str = "openb";

/// Builds the cluster of an openb node list (see the module doc).
pub fn openb_cluster(node_list_csv_text: &str, origin: &str) -> Result<Cluster, TraceError> {
    let table = Table::parse(node_list_csv_text, origin)?;
    let [sn, cpu, mem, gpu, model] =
        table.columns(["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut shapes: Vec<NodeShape> = Vec::new();
    let mut shape_of: BTreeMap<(u32, u64, u32, String), ShapeId> = BTreeMap::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for row in &table.rows {
        let name = row.text(sn);
        if name.is_empty() {
            return Err(row.error("the node name (`sn`) is empty"));
        }
        if let Some(first) = seen.insert(name.to_string(), row.line) {
            return Err(row.error(&format!("node `{name}` was already listed on line {first}")));
        }
        let cores = u32::try_from(row.number(cpu, "cpu_milli")? / 1000)
            .map_err(|_| row.error("cpu_milli is too large"))?;
        let mem_mib = row.number(mem, "memory_mib")?;
        let gpus =
            u32::try_from(row.number(gpu, "gpu")?).map_err(|_| row.error("gpu is too large"))?;
        let model_name = row.text(model).to_ascii_lowercase();
        if gpus > 0 && model_name.is_empty() {
            return Err(row.error(&format!("node `{name}` has {gpus} GPUs but no model")));
        }
        let key = (cores, mem_mib, gpus, model_name.clone());
        let id = match shape_of.get(&key) {
            Some(&id) => id,
            None => {
                let id = ShapeId(
                    u16::try_from(shapes.len())
                        .map_err(|_| row.error("more than 65535 distinct node shapes"))?,
                );
                shapes.push(shape(cores, mem_mib, gpus, &model_name));
                shape_of.insert(key, id);
                id
            }
        };
        nodes.push(Node::new(name.to_string(), id, &shapes[usize::from(id.0)]));
    }
    if nodes.is_empty() {
        return Err(TraceError::File {
            origin: origin.to_string(),
            what: "the node list has no node".into(),
        });
    }
    let partition = Partition::default_over("default", nodes.len() as u32);
    Ok(Cluster::from_parts(
        "openb".into(),
        shapes,
        nodes,
        vec![partition],
        vec![],
        vec![],
        vec![],
    ))
}

/// One node shape of the trace; the name says what it is (`g2-8gpu-96c-384gib`).
fn shape(cores: u32, mem_mib: u64, gpus: u32, model: &str) -> NodeShape {
    let label = if gpus == 0 { "cpu" } else { model };
    let name = format!("{label}-{gpus}gpu-{cores}c-{}gib", mem_mib / 1024);
    let mut s = NodeShape::uniform(&name, cores, mem_mib, gpus, model, 0, 1);
    let gpu_mem_gib = match model {
        "v100m16" | "t4" | "p100" => 16,
        "v100m32" => 32,
        "a10" => 24,
        _ => 0,
    };
    for g in &mut s.gpus {
        g.mem_mib = gpu_mem_gib * 1024;
    }
    s
}

/// Imports an openb pod list (see the module doc): one single-task job per pod, sorted by
/// submit time.
pub fn import(
    pod_list_csv_text: &str,
    origin: &str,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    let table = Table::parse(pod_list_csv_text, origin)?;
    let [name, cpu, mem, num_gpu, gpu_milli] =
        table.columns(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])?;
    let spec_col = table.column("gpu_spec");
    let created = table.column("creation_time");
    let deleted = table.column("deletion_time");
    if created.is_some() != deleted.is_some() {
        return Err(TraceError::File {
            origin: origin.to_string(),
            what: "the header has only one of creation_time and deletion_time".into(),
        });
    }
    let mut jobs = Vec::with_capacity(table.rows.len());
    for row in &table.rows {
        let pod = row.text(name);
        if pod.is_empty() {
            return Err(row.error("the pod name is empty"));
        }
        let cpu_milli = row.number(cpu, "cpu_milli")?;
        let cpus = u32::try_from(cpu_milli.div_ceil(1000))
            .map_err(|_| row.error("cpu_milli is too large"))?;
        let mem_mib = row.number(mem, "memory_mib")?;
        let n = u32::try_from(row.number(num_gpu, "num_gpu")?)
            .map_err(|_| row.error("num_gpu is too large"))?;
        let milli = row.number(gpu_milli, "gpu_milli")?;
        let (gpus, share) = match (n, milli) {
            (0, 0) => (0, None),
            (0, m) => {
                return Err(row.error(&format!("num_gpu is 0 but gpu_milli is {m}")));
            }
            (_, m) if m == u64::from(MILLI_PER_GPU) => (n, None),
            (1, m @ 1..=999) => (0, Some(m as u32)),
            (n, m) => {
                return Err(row.error(&format!(
                    "num_gpu {n} with gpu_milli {m}: a share (gpu_milli 1..999) is for one GPU, \
                     whole GPUs have gpu_milli 1000"
                )));
            }
        };
        let gpu_model = match spec_col.map(|c| row.text(c)) {
            None | Some("") => None,
            Some(s) if s.eq_ignore_ascii_case("nan") => None,
            Some(s) if s.contains('|') => {
                return Err(row.error(&format!(
                    "gpu_spec `{s}` allows several GPU models; a cadre task names one model \
                     (any-of model constraints are not supported)"
                )));
            }
            Some(s) => Some(s.to_ascii_lowercase()),
        };
        let (submit, duration) = match (created, deleted) {
            (Some(c), Some(d)) => {
                let c = row.number(c, "creation_time")?;
                let d = row.number(d, "deletion_time")?;
                if d < c {
                    return Err(
                        row.error(&format!("deletion_time {d} is before creation_time {c}"))
                    );
                }
                (Time(c), Dur(d - c))
            }
            _ => (Time(0), NEVER_DELETED),
        };
        let per_task = TaskResources {
            cpus,
            mem_mib,
            gpus,
            gpu_share_milli: share,
            gpu_model,
            ..TaskResources::default()
        };
        let mut spec = JobSpec::simple(USER, USER, 1, per_task, opts.time_limit(duration));
        spec.name = pod.to_string();
        spec.submit_time = submit;
        jobs.push(TraceJob {
            submit,
            duration,
            spec,
        });
    }
    // Stable: file order among pods created at the same second.
    jobs.sort_by_key(|j| j.submit);
    Ok(jobs)
}

/// A CSV text split into a header and rows (RFC 4180 quoting; no field spans lines).
struct Table<'t> {
    origin: &'t str,
    header: Vec<String>,
    rows: Vec<Row<'t>>,
}

struct Row<'t> {
    origin: &'t str,
    /// 1-based line number in the file.
    line: usize,
    fields: Vec<String>,
}

impl<'t> Table<'t> {
    fn parse(text: &str, origin: &'t str) -> Result<Table<'t>, TraceError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((hline, h)) = lines.next() else {
            return Err(TraceError::File {
                origin: origin.to_string(),
                what: "the file is empty (no header line)".into(),
            });
        };
        let header: Vec<String> = split_line(h)
            .map_err(|what| line_error(origin, hline, &what))?
            .into_iter()
            .map(|s| s.trim().to_ascii_lowercase())
            .collect();
        let mut rows = Vec::new();
        for (line, l) in lines {
            let fields = split_line(l).map_err(|what| line_error(origin, line, &what))?;
            if fields.len() != header.len() {
                return Err(line_error(
                    origin,
                    line,
                    &format!("{} fields, the header has {}", fields.len(), header.len()),
                ));
            }
            rows.push(Row {
                origin,
                line,
                fields,
            });
        }
        Ok(Table {
            origin,
            header,
            rows,
        })
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn columns<const N: usize>(&self, names: [&str; N]) -> Result<[usize; N], TraceError> {
        let mut out = [0; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = self.column(name).ok_or_else(|| TraceError::File {
                origin: self.origin.to_string(),
                what: format!(
                    "the header has no `{name}` column (it has {})",
                    self.header.join(",")
                ),
            })?;
        }
        Ok(out)
    }
}

impl Row<'_> {
    fn text(&self, col: usize) -> &str {
        self.fields[col].trim()
    }

    fn number(&self, col: usize, what: &str) -> Result<u64, TraceError> {
        let t = self.text(col);
        // Some exports write integers as floats (`12000.0`); accept a zero fraction only.
        let digits = t.strip_suffix(".0").unwrap_or(t);
        digits
            .parse::<u64>()
            .map_err(|_| self.error(&format!("{what} `{t}` is not a non-negative integer")))
    }

    fn error(&self, what: &str) -> TraceError {
        line_error(self.origin, self.line, what)
    }
}

fn line_error(origin: &str, line: usize, what: &str) -> TraceError {
    TraceError::Line {
        origin: origin.to_string(),
        line,
        what: what.to_string(),
    }
}

/// Splits one CSV line; fields may be quoted (`"a,b"`, `""` for a quote inside).
fn split_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted => {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    quoted = false;
                    if chars.peek().is_some_and(|&n| n != ',') {
                        return Err("a closing quote is not followed by a comma".into());
                    }
                }
            }
            '"' if at_start => quoted = true,
            '"' => return Err("a quote inside an unquoted field".into()),
            ',' if !quoted => {
                fields.push(std::mem::take(&mut field));
                at_start = true;
                continue;
            }
            c => field.push(c),
        }
        at_start = false;
    }
    if quoted {
        return Err("a quoted field is not closed".into());
    }
    fields.push(field);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::cluster::NodeId;

    const NODES: &str = "\
sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,393216,8,G2
openb-node-0002,64000,262144,2,P100
openb-node-0003,32000,262144,0,
";

    const PODS: &str = "\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,50,12537496,50
openb-pod-0001,6000,12288,1,460,,LS,Running,10,70,10
openb-pod-0002,88000,327680,8,1000,V100M32,Burstable,Succeeded,10,20,10
openb-pod-0003,3152,1024,0,0,nan,BE,Failed,0,0,0
";

    fn opts() -> ImportOptions {
        ImportOptions::default()
    }

    #[test]
    fn node_list_becomes_one_shape_per_distinct_node_kind() {
        let c = openb_cluster(NODES, "nodes.csv").unwrap();
        assert_eq!(c.nodes.len(), 4);
        assert_eq!(c.shapes.len(), 3, "{:?}", c.shapes);
        assert_eq!(c.nodes[0].shape, c.nodes[2].shape);
        let g2 = c.shape(NodeId(1));
        assert_eq!((g2.cores, g2.mem_mib, g2.gpus.len()), (96, 393_216, 8));
        assert_eq!(g2.gpus[0].model, "g2");
        assert_eq!(g2.numa.len(), 1);
        assert_eq!(g2.name, "g2-8gpu-96c-384gib");
        assert_eq!(c.shape(NodeId(0)).gpus[1].mem_mib, 16 * 1024);
        assert_eq!(c.total_gpus(), 12);
        assert_eq!(c.partitions.len(), 1);
        assert_eq!(c.partitions[0].name, "default");
        assert_eq!(c.partitions[0].nodes.len(), 4);
        assert_eq!(c.node_id("openb-node-0003"), Some(NodeId(3)));
    }

    #[test]
    fn node_list_errors_name_the_line() {
        let dup = "sn,cpu_milli,memory_mib,gpu,model\na,1000,1,1,T4\na,1000,1,1,T4\n";
        let err = openb_cluster(dup, "n.csv").unwrap_err().to_string();
        assert_eq!(err, "n.csv:3: node `a` was already listed on line 2");
        let bad = "sn,cpu_milli,memory_mib,gpu,model\na,lots,1,1,T4\n";
        let err = openb_cluster(bad, "n.csv").unwrap_err().to_string();
        assert_eq!(
            err,
            "n.csv:2: cpu_milli `lots` is not a non-negative integer"
        );
        let missing = "sn,cpu_milli,gpu,model\na,1000,1,T4\n";
        let err = openb_cluster(missing, "n.csv").unwrap_err().to_string();
        assert!(
            err.starts_with("n.csv: the header has no `memory_mib` column"),
            "{err}"
        );
        let no_model = "sn,cpu_milli,memory_mib,gpu,model\na,1000,1,2,\n";
        let err = openb_cluster(no_model, "n.csv").unwrap_err().to_string();
        assert_eq!(err, "n.csv:2: node `a` has 2 GPUs but no model");
    }

    #[test]
    fn pods_become_single_task_jobs_sorted_by_creation() {
        let jobs = import(PODS, "pods.csv", &opts()).unwrap();
        let names: Vec<&str> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
        // Sorted by creation time, file order among equals.
        assert_eq!(
            names,
            [
                "openb-pod-0003",
                "openb-pod-0001",
                "openb-pod-0002",
                "openb-pod-0000"
            ]
        );
        let share = &jobs[1];
        assert_eq!(share.submit, Time(10));
        assert_eq!(share.duration, Dur(60));
        assert_eq!(share.spec.submit_time, Time(10));
        assert_eq!(share.spec.time_limit, opts().time_limit(Dur(60)));
        let r = &share.spec.groups[0].per_task;
        assert_eq!((r.cpus, r.mem_mib, r.gpus), (6, 12_288, 0));
        assert_eq!(r.gpu_share_milli, Some(460));
        let whole = &jobs[2].spec.groups[0].per_task;
        assert_eq!((whole.gpus, whole.gpu_share_milli), (8, None));
        assert_eq!(whole.gpu_model.as_deref(), Some("v100m32"));
        let cpu_only = &jobs[0].spec.groups[0].per_task;
        // 3.152 CPUs: whole cores, rounded up.
        assert_eq!((cpu_only.cpus, cpu_only.gpus), (4, 0));
        assert!(!cpu_only.wants_gpu());
        assert_eq!(cpu_only.gpu_model, None, "`nan` is no constraint");
        assert_eq!(jobs[0].duration, Dur(0));
        assert!(
            jobs.iter()
                .all(|j| j.spec.groups.len() == 1 && j.spec.tasks() == 1)
        );
    }

    #[test]
    fn short_pod_lists_arrive_at_once_and_never_end() {
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
                    p1,12000,16384,2,1000\n\
                    p0,6000,12288,1,500\n";
        let jobs = import(text, "multigpu.csv", &opts()).unwrap();
        assert_eq!(jobs[0].spec.name, "p1", "file order is kept");
        assert!(jobs.iter().all(|j| j.submit == Time(0)));
        assert!(jobs.iter().all(|j| j.duration == NEVER_DELETED));
        assert_eq!(jobs[0].spec.groups[0].per_task.gpus, 2);
    }

    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let text = "gpu_milli,num_gpu,name,memory_mib,cpu_milli\n250,1,p,100,1500\n";
        let jobs = import(text, "x.csv", &opts()).unwrap();
        let r = &jobs[0].spec.groups[0].per_task;
        assert_eq!((r.cpus, r.mem_mib, r.gpu_share_milli), (2, 100, Some(250)));
    }

    #[test]
    fn bad_pods_are_refused_with_their_line() {
        let head =
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n";
        let cases = [
            (
                "p,1000,1,2,500,,0,1",
                "x.csv:2: num_gpu 2 with gpu_milli 500",
            ),
            (
                "p,1000,1,0,300,,0,1",
                "x.csv:2: num_gpu is 0 but gpu_milli is 300",
            ),
            ("p,1000,1,1,0,,0,1", "x.csv:2: num_gpu 1 with gpu_milli 0"),
            (
                "p,1000,1,1,1000,V100M16|V100M32,0,1",
                "x.csv:2: gpu_spec `V100M16|V100M32` allows several GPU models",
            ),
            (
                "p,1000,1,1,1000,,9,1",
                "x.csv:2: deletion_time 1 is before creation_time 9",
            ),
            ("p,1000,1,1,1000,,0", "x.csv:2: 7 fields, the header has 8"),
            (
                "p,-1,1,1,1000,,0,1",
                "x.csv:2: cpu_milli `-1` is not a non-negative integer",
            ),
        ];
        for (row, want) in cases {
            let err = import(&format!("{head}{row}\n"), "x.csv", &opts())
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(want),
                "{row}: got `{err}`, want `{want}...`"
            );
        }
        let err = import("", "e.csv", &opts()).unwrap_err().to_string();
        assert_eq!(err, "e.csv: the file is empty (no header line)");
    }

    #[test]
    fn csv_fields_may_be_quoted() {
        assert_eq!(
            split_line(r#"a,"b,c","d""e",,"#).unwrap(),
            ["a", "b,c", "d\"e", "", ""]
        );
        assert!(split_line(r#"a,"b"#).is_err());
        assert!(split_line(r#"a,b"c"#).is_err());
        assert!(split_line(r#""a"b,c"#).is_err());
    }
}
