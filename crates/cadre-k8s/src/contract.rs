//! The contracts the programs inside a job rely on: the names tasks use to find each
//! other, the per-rank environment, and the MPI and Volcano host files, as the Kubernetes
//! controllers make them (kubeflow/mpi-operator `pkg/controller/mpi_job_controller.go`,
//! kubeflow/trainer `release-1.9` `pkg/controller.v1/pytorch/{envvar,master,elastic}.go`,
//! volcano `pkg/controllers/job/plugins/{env,svc}`, Kubernetes' Job controller for
//! `JOB_COMPLETION_INDEX`). All pure: given a [`Translated`] job and where its tasks landed
//! ([`Placement`]), they compute text and variables; the agent writes and injects them.
//!
//! # Ranks
//! A task's rank is its position over all placed tasks in (group, index) order, the order
//! of `SLURM_PROCID`: for an MPIJob the launcher is rank 0 and worker `i` rank `i + 1`; for
//! a PyTorchJob the master is rank 0. An elastic group may be placed with fewer tasks than
//! it asks for; ranks count placed tasks.
//!
//! # Names
//! Every task has a pod name ([`pod_name`]) and the DNS names its pod would have in
//! Kubernetes ([`dns_names`]); inside the job each name must resolve to the address of the
//! node the task runs on ([`hosts_file`]). Pods' own random suffixes (a batch Job's pods,
//! an MPIJob's launcher) are left out: cadre's pod names are deterministic.
//!
//! # Environment
//! [`rank_environment`] lists the container's own `env` first (literal values, and the
//! `fieldRef`s resolved for this task), then the variables the kind's controller adds, in
//! the order the controller appends them. As in Kubernetes a later entry overrides an
//! earlier one of the same name, and a value's `$(VAR)` references are expanded with the
//! entries before it; the program's `$(VAR)` references are expanded with all of them
//! ([`rank_program`]).

use crate::error::K8sError;
use crate::model::{
    Completion, EnvSource, EnvVar, MpiImplementation, Program, PyTorchContract, Translated,
    WorkloadKind,
};
use std::collections::BTreeMap;

/// The cluster domain of the DNS names.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Where the MPI Operator mounts the hostfile in the launcher.
pub const MPI_DIR: &str = "/etc/mpi";
/// Where Volcano's svc plugin mounts the task host files.
pub const VOLCANO_DIR: &str = "/etc/volcano";

/// Where one task runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedTask {
    /// The node's name (`spec.nodeName`).
    pub node: String,
    /// The node's address, which the job's names resolve to (`status.podIP`: tasks use the
    /// node's network).
    pub address: String,
}

/// Where a job's tasks run, and where its files are visible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// For each task group of the spec, its placed tasks by index.
    pub tasks: Vec<Vec<PlacedTask>>,
    /// Where the launcher sees the MPI files: [`MPI_DIR`] when the agent mounts them there
    /// (root, a private mount namespace), else the per-job directory it wrote them to.
    pub mpi_dir: String,
    /// Where tasks see Volcano's host files: [`VOLCANO_DIR`], or the per-job directory.
    pub volcano_dir: String,
    /// The rendezvous port (PyTorch `MASTER_PORT`, the elastic rendezvous port) when the
    /// controller moved it off the manifest's: tasks of different jobs on one node share
    /// the node's ports. `None`: the manifest's.
    pub rendezvous_port: Option<u16>,
    /// The program MPI launches its remote daemons with in place of `ssh`: cadre's rsh agent
    /// ([`RSH_AGENT`] in the MPI files' directory), which starts them as steps of the job on
    /// the nodes where the named workers run. `None`: no such program on this node, and
    /// the MPI variables name none.
    pub rsh_agent: Option<String>,
}

impl Placement {
    /// Tasks placed as given, files at the Kubernetes paths, ports as written.
    pub fn new(tasks: Vec<Vec<PlacedTask>>) -> Placement {
        Placement {
            tasks,
            mpi_dir: MPI_DIR.into(),
            volcano_dir: VOLCANO_DIR.into(),
            rendezvous_port: None,
            rsh_agent: None,
        }
    }
}

/// The name of cadre's rsh agent in the MPI files' directory (see [`Placement::rsh_agent`]).
pub const RSH_AGENT: &str = "cadre-rsh";

/// Whether task group `group` of the job is an MPIJob worker whose program is `sshd` (the
/// MPI Operator's default, the manifest's own `command`, or, in its image, the image's
/// own program when the manifest names none): its node's ssh port belongs to the node,
/// so it runs no sshd, and its launcher's `mpirun` reaches it through cadre's rsh agent
/// instead (a step of the job on its node: on the host, the node holds the worker's
/// share; in its image, its container waits for the step to run in it).
pub fn holds_for_rsh(t: &Translated, group: usize) -> bool {
    let WorkloadKind::MpiJob { .. } = t.kind else {
        return false;
    };
    if group == 0 {
        return false;
    }
    let is_sshd = |argv: &[String]| {
        argv.first()
            .and_then(|p| std::path::Path::new(p).file_name())
            .is_some_and(|name| name == "sshd")
    };
    match t.groups.get(group).map(|g| &g.program) {
        Some(Program::Argv(argv)) => is_sshd(argv),
        Some(Program::Image {
            command: None,
            args,
        }) => args.is_empty(),
        Some(Program::Image {
            command: Some(command),
            ..
        }) => is_sshd(command),
        None => false,
    }
}

/// A file the agent writes for the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFile {
    /// Absolute path as the tasks see it.
    pub path: String,
    pub text: String,
    /// Unix permission bits.
    pub mode: u32,
    /// The groups whose tasks see it.
    pub groups: Vec<usize>,
}

fn contract_err(what: String) -> K8sError {
    K8sError::Contract { what }
}

fn check(t: &Translated, p: &Placement) -> Result<(), K8sError> {
    if p.tasks.len() != t.spec.groups.len() {
        return Err(contract_err(format!(
            "job `{}` has {} task groups; the placement gives {}",
            t.name,
            t.spec.groups.len(),
            p.tasks.len()
        )));
    }
    for (g, placed) in t.spec.groups.iter().zip(&p.tasks) {
        let n = u32::try_from(placed.len()).unwrap_or(u32::MAX);
        if n > g.count || n < g.min_tasks() {
            return Err(contract_err(format!(
                "group `{}` of job `{}` asks for {} to {} tasks; the placement gives {n}",
                g.name,
                t.name,
                g.min_tasks(),
                g.count
            )));
        }
    }
    Ok(())
}

/// The (group, index) of `rank`.
pub fn task_of_rank(t: &Translated, rank: u32, p: &Placement) -> Result<(usize, u32), K8sError> {
    check(t, p)?;
    let mut r = rank as usize;
    for (g, placed) in p.tasks.iter().enumerate() {
        if r < placed.len() {
            return Ok((g, r as u32));
        }
        r -= placed.len();
    }
    Err(contract_err(format!(
        "job `{}` has {} placed tasks; there is no rank {rank}",
        t.name,
        p.tasks.iter().map(Vec::len).sum::<usize>()
    )))
}

/// The name of the pod of task `index` of group `group` (`fieldRef: metadata.name`).
pub fn pod_name(t: &Translated, group: usize, index: u32) -> String {
    let base = &t.name;
    let gname = t.spec.groups.get(group).map_or("", |g| g.name.as_str());
    match &t.kind {
        WorkloadKind::Job { .. } => format!("{base}-{index}"),
        WorkloadKind::JobSet { completions, .. } => {
            let c = completions.get(group).copied().unwrap_or(1).max(1);
            format!("{base}-{gname}-{}-{}", index / c, index % c)
        }
        WorkloadKind::MpiJob { .. } if gname == "launcher" => format!("{base}-launcher"),
        WorkloadKind::MpiJob { .. }
        | WorkloadKind::PyTorchJob(_)
        | WorkloadKind::VolcanoJob { .. } => format!("{base}-{gname}-{index}"),
    }
}

/// The host name of the pod of task `index` of group `group`: its name, cut to 63
/// characters as Kubernetes cuts it (without a `-` or `.` left at the end).
pub fn pod_hostname(t: &Translated, group: usize, index: u32) -> String {
    let name = pod_name(t, group, index);
    // On a character boundary: a translation from a client may hold any text.
    let cut = name.char_indices().nth(63).map_or(name.len(), |(i, _)| i);
    name[..cut].trim_end_matches(['-', '.']).to_string()
}

/// The labels of the pod of task `index` of group `group`, as Kubernetes and the operators
/// set them: the template's, the kind's controller's (`job-name`,
/// `training.kubeflow.org/replica-type`, `volcano.sh/task-spec`, ...) and the rank's own
/// (`batch.kubernetes.io/job-completion-index` of an Indexed Job or a JobSet's job,
/// `training.kubeflow.org/replica-index`, `jobset.sigs.k8s.io/job-index`).
pub fn pod_labels(t: &Translated, group: usize, index: u32) -> BTreeMap<String, String> {
    let mut l = t
        .groups
        .get(group)
        .map(|g| g.labels.clone())
        .unwrap_or_default();
    let gname = t.spec.groups.get(group).map_or("", |g| g.name.as_str());
    let mut set = |k: &str, v: String| {
        l.insert(k.to_string(), v);
    };
    match &t.kind {
        WorkloadKind::Job { indexed, .. } => {
            set("job-name", t.name.clone());
            set("batch.kubernetes.io/job-name", t.name.clone());
            if *indexed {
                set(crate::pod::COMPLETION_INDEX_KEY, index.to_string());
            }
        }
        WorkloadKind::JobSet {
            completions,
            indexed,
            ..
        } => {
            let c = completions.get(group).copied().unwrap_or(1).max(1);
            let job = format!("{}-{gname}-{}", t.name, index / c);
            set("jobset.sigs.k8s.io/jobset-name", t.name.clone());
            set("jobset.sigs.k8s.io/replicatedjob-name", gname.to_string());
            set("jobset.sigs.k8s.io/job-index", (index / c).to_string());
            set("job-name", job.clone());
            set("batch.kubernetes.io/job-name", job);
            if indexed.get(group) == Some(&true) {
                set(crate::pod::COMPLETION_INDEX_KEY, (index % c).to_string());
            }
        }
        WorkloadKind::MpiJob { .. } | WorkloadKind::PyTorchJob(_) => {
            set("training.kubeflow.org/job-name", t.name.clone());
            set(
                "training.kubeflow.org/replica-type",
                gname.to_ascii_lowercase(),
            );
            set("training.kubeflow.org/replica-index", index.to_string());
        }
        WorkloadKind::VolcanoJob { .. } => {
            set("volcano.sh/job-name", t.name.clone());
            set("volcano.sh/job-namespace", t.namespace.clone());
            set("volcano.sh/task-spec", gname.to_string());
            set("volcano.sh/task-index", index.to_string());
        }
    }
    l
}

/// A label selector as `kubectl -l` takes it: requirements joined by commas, each `k=v`,
/// `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)` or `k notin (a,b)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

impl Selector {
    /// Parses `text`; the error says which requirement is malformed.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            // A requirement ends at a comma outside parentheses.
            let mut depth = 0i32;
            let mut end = rest.len();
            for (i, ch) in rest.char_indices() {
                match ch {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            let part = rest[..end].trim();
            rest = rest.get(end + 1..).unwrap_or("").trim();
            reqs.push(Requirement::parse(part)?);
        }
        if reqs.is_empty() {
            return Err("an empty selector".into());
        }
        Ok(Selector(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    /// A Kubernetes `LabelSelector` object (`matchLabels`, `matchExpressions` with `In`,
    /// `NotIn`, `Exists`, `DoesNotExist`); an empty one selects everything. The error says
    /// which expression is malformed.
    pub fn of_label_selector(
        sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            if !is_label_key(k) || !is_label_value(v) {
                return Err(format!("matchLabels `{k}: {v}` is not a label"));
            }
            reqs.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let at = format!("matchExpressions[{i}]");
            let values = e.values.clone().unwrap_or_default();
            if !is_label_key(&e.key) {
                return Err(format!("{at}.key `{}` is not a label key", e.key));
            }
            let with_values = |values: Vec<String>| {
                if values.is_empty() {
                    Err(format!("{at}.values: operator {} needs values", e.operator))
                } else {
                    Ok(values)
                }
            };
            reqs.push(match e.operator.as_str() {
                "In" => Requirement::In(e.key.clone(), with_values(values)?),
                "NotIn" => Requirement::NotIn(e.key.clone(), with_values(values)?),
                "Exists" if values.is_empty() => Requirement::Exists(e.key.clone()),
                "DoesNotExist" if values.is_empty() => Requirement::Absent(e.key.clone()),
                "Exists" | "DoesNotExist" => {
                    return Err(format!("{at}.values: operator {} takes none", e.operator));
                }
                other => {
                    return Err(format!(
                        "{at}.operator: `{other}` is not In, NotIn, Exists or DoesNotExist"
                    ));
                }
            });
        }
        Ok(Selector(reqs))
    }
}

fn is_label_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Requirement {
    fn parse(part: &str) -> Result<Requirement, String> {
        let bad = |why: &str| Err(format!("`{part}`: {why}"));
        let key = |k: &str| -> Result<String, String> {
            let k = k.trim();
            if is_label_key(k) {
                Ok(k.to_string())
            } else {
                Err(format!("`{part}`: `{k}` is not a label key"))
            }
        };
        let value = |v: &str| -> Result<String, String> {
            let v = v.trim();
            if is_label_value(v) {
                Ok(v.to_string())
            } else {
                Err(format!("`{part}`: `{v}` is not a label value"))
            }
        };
        if part.is_empty() {
            return bad("an empty requirement");
        }
        if let Some((k, v)) = part.split_once("!=") {
            return Ok(Requirement::NotEquals(key(k)?, value(v)?));
        }
        if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            return Ok(Requirement::Equals(key(k)?, value(v)?));
        }
        if let Some(k) = part.strip_prefix('!') {
            return Ok(Requirement::Absent(key(k)?));
        }
        for (word, not) in [(" notin ", true), (" in ", false)] {
            if let Some((k, set)) = part.split_once(word) {
                let set = set.trim();
                let Some(inner) = set.strip_prefix('(').and_then(|s| s.strip_suffix(')')) else {
                    return bad("a set must be in parentheses: `key in (a,b)`");
                };
                let values = inner.split(',').map(value).collect::<Result<Vec<_>, _>>()?;
                return Ok(if not {
                    Requirement::NotIn(key(k)?, values)
                } else {
                    Requirement::In(key(k)?, values)
                });
            }
        }
        Ok(Requirement::Exists(key(part)?))
    }

    fn matches(&self, l: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => l.get(k) == Some(v),
            Requirement::NotEquals(k, v) => l.get(k) != Some(v),
            Requirement::In(k, vs) => l.get(k).is_some_and(|x| vs.contains(x)),
            Requirement::NotIn(k, vs) => l.get(k).is_none_or(|x| !vs.contains(x)),
            Requirement::Exists(k) => l.contains_key(k),
            Requirement::Absent(k) => !l.contains_key(k),
        }
    }
}

/// Whether the Service selects pod `index` of group `group` of `t`.
fn selects(s: &crate::service::Service, t: &Translated, group: usize, index: u32) -> bool {
    let labels = pod_labels(t, group, index);
    s.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The first pod of `t` the Service selects, in rank order: `(group, index)`.
pub fn first_selected(s: &crate::service::Service, t: &Translated) -> Option<(usize, u32)> {
    if s.namespace != t.namespace {
        return None;
    }
    t.spec.groups.iter().enumerate().find_map(|(g, group)| {
        (0..group.count)
            .find(|&i| selects(s, t, g, i))
            .map(|i| (g, i))
    })
}

/// Gives each Service to the workloads of its namespace whose pods it selects; the
/// Services that select none are returned (`kubectl apply` would keep them for pods to
/// come; cadre keeps a Service only with its workloads).
pub fn attach_services(
    workloads: &mut [Translated],
    services: Vec<crate::service::Service>,
) -> Vec<crate::service::Service> {
    let mut unselected = Vec::new();
    for s in services {
        let mut used = false;
        for t in workloads.iter_mut() {
            if first_selected(&s, t).is_some() {
                t.services.push(s.clone());
                used = true;
            }
        }
        if !used {
            unselected.push(s);
        }
    }
    unselected
}

/// The names of a Service, as a pod of its namespace can write them.
pub fn service_names(s: &crate::service::Service) -> Vec<String> {
    vec![
        format!("{}.{}.svc.{}", s.name, s.namespace, CLUSTER_DOMAIN),
        s.name.clone(),
        format!("{}.{}", s.name, s.namespace),
        format!("{}.{}.svc", s.name, s.namespace),
    ]
}

/// A variable name as the kubelet takes one from `envFrom` (others are skipped).
fn is_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Gives each workload the ConfigMaps and Secrets its pods use, of its apply or applied
/// before it: a ConfigMap's values become literal variables (never expanded again) and
/// its volumes' files; a Secret is carried with the workload for its tasks to read when
/// they start (one applied before comes with its keys alone: the controller puts its
/// values in at submission, from its own records). `envFrom` is expanded into variables,
/// before the container's own `env` (which wins). Every problem (an object used but not
/// applied and not `optional`, a key it lacks) is returned, each saying which.
pub fn attach_config(
    workloads: &mut [Translated],
    config_maps: &[crate::config::ConfigMap],
    secrets: &[crate::config::Secret],
) -> Vec<String> {
    let mut problems = Vec::new();
    for t in workloads.iter_mut() {
        let ns = t.namespace.clone();
        let find_map = |name: &str| {
            config_maps
                .iter()
                .position(|c| c.name == name && c.namespace == ns)
        };
        let find_secret = |name: &str| {
            secrets
                .iter()
                .position(|s| s.name == name && s.namespace == ns)
        };
        let missing = |kind: &str, name: &str, t: &Translated| {
            format!(
                "`{}`: {kind}/{name} is not applied in namespace {} (apply it with the workload or before it, or mark the reference optional)",
                t.name, t.namespace
            )
        };
        let attach_secret = |i: usize, t: &mut Translated| {
            let s = &secrets[i];
            t.secrets.0.insert(s.name.clone(), s.data.clone());
        };
        for g in 0..t.groups.len() {
            let mut env = Vec::new();
            for ef in std::mem::take(&mut t.groups[g].env_from) {
                if ef.secret {
                    match find_secret(&ef.name) {
                        Some(i) => {
                            for k in secrets[i].data.keys() {
                                if is_env_name(&format!("{}{k}", ef.prefix)) {
                                    env.push(EnvVar {
                                        name: format!("{}{k}", ef.prefix),
                                        source: EnvSource::SecretKey {
                                            name: ef.name.clone(),
                                            key: k.clone(),
                                            optional: false,
                                        },
                                    });
                                }
                            }
                            attach_secret(i, t);
                        }
                        None if ef.optional => {}
                        None => problems.push(missing("secret", &ef.name, t)),
                    }
                } else {
                    match find_map(&ef.name) {
                        Some(i) => {
                            for (k, v) in &config_maps[i].data {
                                if is_env_name(&format!("{}{k}", ef.prefix)) {
                                    env.push(EnvVar {
                                        name: format!("{}{k}", ef.prefix),
                                        source: EnvSource::Literal(v.replace('$', "$$")),
                                    });
                                }
                            }
                        }
                        None if ef.optional => {}
                        None => problems.push(missing("configmap", &ef.name, t)),
                    }
                }
            }
            for var in std::mem::take(&mut t.groups[g].env) {
                match &var.source {
                    EnvSource::ConfigMapKey {
                        name,
                        key,
                        optional,
                    } => match find_map(name).map(|i| (i, config_maps[i].data.get(key))) {
                        Some((_, Some(v))) => {
                            env.push(EnvVar {
                                name: var.name.clone(),
                                source: EnvSource::Literal(v.replace('$', "$$")),
                            });
                        }
                        Some((_, None)) if *optional => {}
                        None if *optional => {}
                        Some((_, None)) => problems.push(format!(
                            "`{}`: variable {}: ConfigMap `{name}` has no key `{key}`",
                            t.name, var.name
                        )),
                        None => problems.push(missing("configmap", name, t)),
                    },
                    EnvSource::SecretKey {
                        name,
                        key,
                        optional,
                    } => match find_secret(name) {
                        Some(i) if secrets[i].data.contains_key(key) || *optional => {
                            attach_secret(i, t);
                            env.push(var);
                        }
                        Some(_) => problems.push(format!(
                            "`{}`: variable {}: Secret `{name}` has no key `{key}`",
                            t.name, var.name
                        )),
                        None if *optional => {}
                        None => problems.push(missing("secret", name, t)),
                    },
                    _ => env.push(var),
                }
            }
            t.groups[g].env = env;
            for v in t.groups[g].volumes.clone() {
                match &v.kind {
                    crate::model::VolumeKind::ConfigMap {
                        name,
                        items,
                        optional,
                    } => match find_map(name) {
                        Some(i) => {
                            let data = &config_maps[i].data;
                            for (k, _) in items {
                                if !data.contains_key(k) && !optional {
                                    problems.push(format!(
                                        "`{}`: volume `{}`: ConfigMap `{name}` has no key `{k}`",
                                        t.name, v.name
                                    ));
                                }
                            }
                            t.config_maps.insert(name.clone(), data.clone());
                        }
                        None if *optional => {}
                        None => problems.push(missing("configmap", name, t)),
                    },
                    crate::model::VolumeKind::Secret {
                        name,
                        items,
                        optional,
                    } => match find_secret(name) {
                        Some(i) => {
                            for (k, _) in items {
                                if !secrets[i].data.contains_key(k) && !optional {
                                    problems.push(format!(
                                        "`{}`: volume `{}`: Secret `{name}` has no key `{k}`",
                                        t.name, v.name
                                    ));
                                }
                            }
                            attach_secret(i, t);
                        }
                        None if *optional => {}
                        None => problems.push(missing("secret", name, t)),
                    },
                    _ => {}
                }
            }
        }
    }
    problems
}

fn under(host: &str, sub: &str, ns: &str) -> Vec<String> {
    vec![
        host.to_string(),
        format!("{host}.{sub}"),
        format!("{host}.{sub}.{ns}"),
        format!("{host}.{sub}.{ns}.svc"),
        format!("{host}.{sub}.{ns}.svc.{CLUSTER_DOMAIN}"),
    ]
}

/// The names that resolve to task `index` of group `group` inside the job (empty for tasks
/// Kubernetes gives no stable name: a Job's pods without a subdomain, a Volcano job's
/// without the svc plugin).
pub fn dns_names(t: &Translated, group: usize, index: u32) -> Vec<String> {
    let ns = &t.namespace;
    match &t.kind {
        WorkloadKind::Job { indexed, subdomain } => match (indexed, subdomain) {
            (true, Some(sub)) => under(&pod_name(t, group, index), sub, ns),
            _ => Vec::new(),
        },
        WorkloadKind::JobSet {
            indexed, subdomain, ..
        } => match subdomain {
            Some(sub) if indexed.get(group) == Some(&true) => {
                under(&pod_name(t, group, index), sub, ns)
            }
            _ => Vec::new(),
        },
        WorkloadKind::MpiJob { .. } => under(&pod_name(t, group, index), &t.name, ns),
        WorkloadKind::PyTorchJob(_) => {
            // One headless Service per replica, named as the pod.
            let svc = pod_name(t, group, index);
            vec![
                svc.clone(),
                format!("{svc}.{ns}"),
                format!("{svc}.{ns}.svc"),
                format!("{svc}.{ns}.svc.{CLUSTER_DOMAIN}"),
            ]
        }
        WorkloadKind::VolcanoJob {
            svc_plugin,
            hostnames,
            subdomains,
            ..
        } => {
            if !svc_plugin {
                return Vec::new();
            }
            let host = hostnames
                .get(group)
                .cloned()
                .flatten()
                .unwrap_or_else(|| pod_name(t, group, index));
            let sub = subdomains
                .get(group)
                .cloned()
                .flatten()
                .unwrap_or_else(|| t.name.clone());
            under(&host, &sub, ns)
        }
    }
}

/// The job's hosts file: every task's names on the line of its node's address, then the
/// pod templates' `hostAliases`. The agent makes it the tasks' `/etc/hosts` (a private mount
/// namespace when it runs as root), with the node's own lines kept first.
pub fn hosts_file(t: &Translated, p: &Placement) -> Result<String, K8sError> {
    check(t, p)?;
    let mut out = format!("# cadre job {}/{}\n", t.namespace, t.name);
    for (g, placed) in p.tasks.iter().enumerate() {
        for (i, task) in placed.iter().enumerate() {
            let mut names = dns_names(t, g, i as u32);
            if !names.is_empty() {
                // The fully qualified name first, as a pod's own hosts file has it: what
                // `hostname -f` and `socket.getfqdn()` say in the task.
                names.rotate_right(1);
                out.push_str(&format!("{}\t{}\n", task.address, names.join(" ")));
            }
        }
    }
    // Each Service's own name: the node of the first pod it selects, in rank order.
    for svc in &t.services {
        if let Some((g, i)) = first_selected(svc, t)
            && let Some(task) = p.tasks.get(g).and_then(|placed| placed.get(i as usize))
        {
            let names = service_names(svc);
            out.push_str(&format!("{}\t{}\n", task.address, names.join(" ")));
        }
    }
    for run in &t.groups {
        for (ip, names) in &run.host_aliases {
            out.push_str(&format!("{ip}\t{}\n", names.join(" ")));
        }
    }
    Ok(out)
}

/// The MPI Operator's hostfile (`/etc/mpi/hostfile` in the launcher), or `None` for other
/// kinds: one line per worker (the launcher first with `runLauncherAsWorker`), its FQDN
/// `<pod>.<job>.<namespace>.svc` and its slots, `<host> slots=<n>` for OpenMPI and
/// `<host>:<n>` for Intel MPI and MPICH.
pub fn hostfile(t: &Translated, p: &Placement) -> Result<Option<String>, K8sError> {
    let WorkloadKind::MpiJob {
        slots_per_worker,
        implementation,
        run_launcher_as_worker,
    } = &t.kind
    else {
        return Ok(None);
    };
    check(t, p)?;
    let line = |host: String| match implementation {
        MpiImplementation::OpenMpi => format!("{host} slots={slots_per_worker}\n"),
        MpiImplementation::Intel | MpiImplementation::Mpich => {
            format!("{host}:{slots_per_worker}\n")
        }
    };
    let fqdn = |pod: String| format!("{pod}.{}.{}.svc", t.name, t.namespace);
    let mut out = String::new();
    if *run_launcher_as_worker {
        out.push_str(&line(fqdn(pod_name(t, 0, 0))));
    }
    for i in 0..p.tasks.get(1).map_or(0, Vec::len) {
        out.push_str(&line(fqdn(pod_name(t, 1, i as u32))));
    }
    Ok(Some(out))
}

/// The MPI Operator's `discover_hosts.sh` (Horovod elastic): `echo` of each running
/// worker's FQDN, sorted by pod name as the operator sorts them, after the launcher's with
/// `runLauncherAsWorker`. `None` for other kinds.
pub fn discover_hosts(t: &Translated, running_workers: &[u32]) -> Option<String> {
    let WorkloadKind::MpiJob {
        run_launcher_as_worker,
        ..
    } = &t.kind
    else {
        return None;
    };
    let fqdn = |pod: String| format!("{pod}.{}.{}.svc", t.name, t.namespace);
    let mut out = String::from("#!/bin/sh\n");
    if *run_launcher_as_worker {
        out.push_str(&format!("echo {}\n", fqdn(pod_name(t, 0, 0))));
    }
    let mut pods: Vec<String> = running_workers.iter().map(|&i| pod_name(t, 1, i)).collect();
    pods.sort();
    for pod in pods {
        out.push_str(&format!("echo {}\n", fqdn(pod)));
    }
    Some(out)
}

/// Volcano's svc plugin: per task, the hosts of its pods (`<host>.<subdomain>`); the task
/// key is its name with `-` made `_`.
fn volcano_hosts(t: &Translated) -> Vec<(String, Vec<String>)> {
    let WorkloadKind::VolcanoJob {
        svc_plugin: true,
        hostnames,
        subdomains,
        ..
    } = &t.kind
    else {
        return Vec::new();
    };
    t.spec
        .groups
        .iter()
        .enumerate()
        .map(|(g, group)| {
            let sub = subdomains
                .get(g)
                .cloned()
                .flatten()
                .unwrap_or_else(|| t.name.clone());
            let hosts = match hostnames.get(g).cloned().flatten() {
                Some(h) => vec![format!("{h}.{sub}")],
                None => (0..group.count)
                    .map(|i| format!("{}.{sub}", pod_name(t, g, i)))
                    .collect(),
            };
            (group.name.replace('-', "_"), hosts)
        })
        .collect()
}

/// The files the agent writes for the job: the MPI hostfile and discover_hosts.sh (seen by
/// the launcher) and Volcano's `<task>.host` files (seen by every task).
pub fn job_files(t: &Translated, p: &Placement) -> Result<Vec<JobFile>, K8sError> {
    let mut files = Vec::new();
    if let Some(text) = hostfile(t, p)? {
        files.push(JobFile {
            path: format!("{}/hostfile", p.mpi_dir),
            text,
            mode: 0o444,
            groups: vec![0],
        });
        let workers: Vec<u32> = (0..p.tasks.get(1).map_or(0, Vec::len) as u32).collect();
        if let Some(text) = discover_hosts(t, &workers) {
            files.push(JobFile {
                path: format!("{}/discover_hosts.sh", p.mpi_dir),
                text,
                mode: 0o555,
                groups: vec![0],
            });
        }
    }
    let all: Vec<usize> = (0..t.spec.groups.len()).collect();
    for (key, hosts) in volcano_hosts(t) {
        files.push(JobFile {
            path: format!("{}/{key}.host", p.volcano_dir),
            text: hosts.join("\n"),
            mode: 0o644,
            groups: all.clone(),
        });
    }
    Ok(files)
}

/// Expands `$(VAR)` references as Kubernetes does: a defined variable is replaced, an
/// undefined one is left as written, and `$$` is a literal `$`.
pub fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn lookup_in(env: &[(String, String)]) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// The whole environment the kind gives task `rank` (see the module doc for the order).
pub fn rank_environment(
    t: &Translated,
    rank: u32,
    p: &Placement,
) -> Result<Vec<(String, String)>, K8sError> {
    let (g, index) = task_of_rank(t, rank, p)?;
    let task = &p.tasks[g][index as usize];
    let run = &t.groups[g];
    let mut env: Vec<(String, String)> = Vec::new();
    for var in &run.env {
        let value = match &var.source {
            EnvSource::Literal(v) => expand(v, lookup_in(&env)),
            EnvSource::PodName => pod_name(t, g, index),
            EnvSource::Namespace => t.namespace.clone(),
            EnvSource::PodIp | EnvSource::HostIp => task.address.clone(),
            EnvSource::NodeName => task.node.clone(),
            EnvSource::CompletionIndex => completion_index(t, g, index).to_string(),
            EnvSource::SecretKey {
                name,
                key,
                optional,
            } => match t.secrets.get(name, key) {
                Some(bytes) => String::from_utf8(bytes).map_err(|_| {
                    contract_err(format!(
                        "variable {}: key `{key}` of Secret `{name}` is not text",
                        var.name
                    ))
                })?,
                None if *optional => continue,
                None => {
                    return Err(contract_err(format!(
                        "variable {}: Secret `{name}` has no key `{key}` in the job's record",
                        var.name
                    )));
                }
            },
            EnvSource::ConfigMapKey { name, key, .. } => {
                return Err(contract_err(format!(
                    "variable {}: key `{key}` of ConfigMap `{name}` was not given with the workload",
                    var.name
                )));
            }
        };
        env.push((var.name.clone(), value));
    }
    env.extend(contract_environment(t, g, index, p));
    Ok(env)
}

/// The index an Indexed Job's pod gets: its position in its (child) Job.
fn completion_index(t: &Translated, g: usize, index: u32) -> u32 {
    match &t.kind {
        WorkloadKind::JobSet { completions, .. } => {
            index % completions.get(g).copied().unwrap_or(1).max(1)
        }
        _ => index,
    }
}

fn kv(k: &str, v: impl ToString) -> (String, String) {
    (k.to_string(), v.to_string())
}

fn contract_environment(
    t: &Translated,
    g: usize,
    index: u32,
    p: &Placement,
) -> Vec<(String, String)> {
    match &t.kind {
        WorkloadKind::Job { indexed, .. } => {
            if *indexed {
                vec![kv("JOB_COMPLETION_INDEX", index)]
            } else {
                Vec::new()
            }
        }
        WorkloadKind::JobSet { indexed, .. } => {
            if indexed.get(g) == Some(&true) {
                vec![kv("JOB_COMPLETION_INDEX", completion_index(t, g, index))]
            } else {
                Vec::new()
            }
        }
        WorkloadKind::MpiJob {
            slots_per_worker,
            implementation,
            run_launcher_as_worker,
        } => {
            if g != 0 {
                return vec![kv("K_MPI_JOB_ROLE", "worker")];
            }
            let hostfile = format!("{}/hostfile", p.mpi_dir);
            let mut env = vec![kv("K_MPI_JOB_ROLE", "launcher")];
            match implementation {
                MpiImplementation::OpenMpi => env.extend([
                    kv("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                    kv("OMPI_MCA_orte_default_hostfile", &hostfile),
                    kv("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                    kv("OMPI_MCA_orte_set_default_slots", slots_per_worker),
                ]),
                MpiImplementation::Intel => env.extend([
                    kv("I_MPI_HYDRA_HOST_FILE", &hostfile),
                    kv(
                        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                        "-o ConnectionAttempts=10",
                    ),
                    kv("I_MPI_PERHOST", slots_per_worker),
                ]),
                MpiImplementation::Mpich => env.extend([
                    kv("HYDRA_HOST_FILE", &hostfile),
                    kv("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10"),
                ]),
            }
            if let Some(agent) = &p.rsh_agent {
                // The launcher also sees the job's `SLURM_*` variables, from which every
                // MPI would take a Slurm allocation to launch into with `srun`: the rsh
                // launch over the hostfile is chosen explicitly. The daemons are all
                // started from the launcher (no tree spawn), whose node has the agent.
                match implementation {
                    MpiImplementation::OpenMpi => env.extend([
                        kv("OMPI_MCA_plm", "rsh"),
                        kv("OMPI_MCA_ras", "^slurm"),
                        kv("OMPI_MCA_plm_rsh_agent", agent),
                        kv("OMPI_MCA_plm_rsh_no_tree_spawn", "1"),
                    ]),
                    MpiImplementation::Intel => env.extend([
                        kv("I_MPI_HYDRA_BOOTSTRAP", "ssh"),
                        kv("I_MPI_HYDRA_BOOTSTRAP_EXEC", agent),
                    ]),
                    MpiImplementation::Mpich => env.extend([
                        kv("HYDRA_LAUNCHER", "ssh"),
                        kv("HYDRA_LAUNCHER_EXEC", agent),
                    ]),
                }
            }
            if !run_launcher_as_worker {
                env.extend([
                    kv("NVIDIA_VISIBLE_DEVICES", ""),
                    kv("NVIDIA_DRIVER_CAPABILITIES", ""),
                ]);
            }
            env
        }
        WorkloadKind::PyTorchJob(c) => pytorch_environment(t, c, g, index, p),
        WorkloadKind::VolcanoJob {
            env_plugin,
            svc_plugin: _,
            ..
        } => {
            let mut env = Vec::new();
            if *env_plugin {
                env.push(kv("VK_TASK_INDEX", index));
                env.push(kv("VC_TASK_INDEX", index));
            }
            for (key, hosts) in volcano_hosts(t) {
                let up = key.to_ascii_uppercase();
                env.push(kv(&format!("VC_{up}_HOSTS"), hosts.join(",")));
                env.push(kv(&format!("VC_{up}_NUM"), hosts.len()));
            }
            env
        }
    }
}

fn pytorch_environment(
    t: &Translated,
    c: &PyTorchContract,
    g: usize,
    index: u32,
    p: &Placement,
) -> Vec<(String, String)> {
    let mut env = vec![kv("PYTHONUNBUFFERED", "0")];
    if c.has_master {
        let port = p.rendezvous_port.unwrap_or(c.master_port);
        let addr = format!("{}-master-0", t.name);
        let rank = if g == 0 { index } else { index + 1 };
        let nproc: u32 = c.nproc_per_node.parse().unwrap_or(1);
        env.extend([
            kv("MASTER_PORT", port),
            kv("PET_MASTER_PORT", port),
            kv("MASTER_ADDR", &addr),
            kv("PET_MASTER_ADDR", &addr),
            kv("WORLD_SIZE", c.total_replicas.saturating_mul(nproc)),
            kv("RANK", rank),
            kv("PET_NPROC_PER_NODE", &c.nproc_per_node),
            kv("PET_NODE_RANK", rank),
        ]);
    }
    match &c.elastic {
        Some(e) => {
            let host = e
                .rdzv_host
                .clone()
                .unwrap_or_else(|| format!("{}-worker-0", t.name));
            let port = p.rendezvous_port.or(e.rdzv_port).unwrap_or(c.worker_port);
            env.push(kv("PET_RDZV_ENDPOINT", format!("{host}:{port}")));
            env.push(kv("PET_RDZV_BACKEND", &e.rdzv_backend));
            env.push(kv(
                "PET_NNODES",
                format!("{}:{}", e.min_replicas, e.max_replicas),
            ));
            if let Some(m) = e.max_restarts {
                env.push(kv("PET_MAX_RESTARTS", m));
            }
            if let Some(n) = e.n_proc_per_node {
                env.push(kv("PET_NPROC_PER_NODE", n));
            }
            if let Some(id) = &e.rdzv_id {
                env.push(kv("PET_RDZV_ID", id));
            }
            if !e.rdzv_conf.is_empty() {
                let conf: Vec<String> = e
                    .rdzv_conf
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                env.push(kv("PET_RDZV_CONF", conf.join(",")));
            }
            if e.standalone {
                env.push(kv("PET_STANDALONE", ""));
            }
        }
        None => env.push(kv("PET_NNODES", c.total_replicas)),
    }
    env
}

/// Task `rank`'s program with its `$(VAR)` references expanded by its environment.
pub fn rank_program(t: &Translated, rank: u32, p: &Placement) -> Result<Program, K8sError> {
    let (g, _) = task_of_rank(t, rank, p)?;
    // A Secret's variable is never put on a command line, which every local user can read:
    // `$(TOKEN)` stays as written.
    let secret: Vec<&str> = t.groups[g]
        .env
        .iter()
        .filter(|v| matches!(v.source, EnvSource::SecretKey { .. }))
        .map(|v| v.name.as_str())
        .collect();
    let mut env = rank_environment(t, rank, p)?;
    env.retain(|(k, _)| !secret.contains(&k.as_str()));
    let ex =
        |v: &Vec<String>| -> Vec<String> { v.iter().map(|a| expand(a, lookup_in(&env))).collect() };
    Ok(match &t.groups[g].program {
        Program::Argv(argv) => Program::Argv(ex(argv)),
        Program::Image { command, args } => Program::Image {
            command: command.as_ref().map(ex),
            args: ex(args),
        },
    })
}

/// Whether the job has succeeded once these groups' tasks have all exited 0, and which
/// tasks to stop then: the groups of [`Completion::Groups`].
pub fn completing_groups(t: &Translated) -> Vec<usize> {
    match &t.completion {
        Completion::AllTasks => (0..t.spec.groups.len()).collect(),
        Completion::Groups(g) => g.clone(),
    }
}
