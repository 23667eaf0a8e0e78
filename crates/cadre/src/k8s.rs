//! Kubernetes manifests as cadre jobs: `cadre apply`, `cadre get`, `cadre delete`,
//! `cadre describe`.
//!
//! `apply` reads the manifests here, in the client (as `sbatch` reads its script), with
//! `cadre-k8s`: every document is translated first, and only when all of them are
//! accepted are the workloads submitted, in one request (committed together, or none).
//! Each becomes one job whose spec carries the workload's identity in its annotations
//! (`k8s.kind`, `k8s.apiVersion`, `k8s.namespace`, `k8s.name`) and whose run spec carries
//! the translation for the agents ([`cadre_k8s::submission`]). `get`, `delete` and
//! `describe` find the jobs by those annotations: there is no other record of the
//! manifests, and a workload's name is its job's until that job has ended (applying a
//! name whose job has not ended is refused; after it has, `apply` submits a new job, and
//! `describe` shows the latest).
//!
//! Queue objects (Kueue's ResourceFlavor, ClusterQueue, LocalQueue, Topology; Volcano's
//! Queue) are checked here, then sent to the controller (`POST /queue-objects`, all of
//! them in one request), which keeps them in its store and replaces its scheduler's quotas
//! with the running gangs kept; they are applied before the file's workloads are
//! submitted, so that a file holding both works. A workload labelled
//! `kueue.x-k8s.io/queue-name` is routed by the controller, at its submission, through the
//! LocalQueue to its ClusterQueue; one that names a queue directly (Volcano's
//! `spec.queue`, Kubeflow's `schedulingPolicy.queue`) goes to the queue of that name,
//! from a queue object or the policy file. `get queues` lists every queue with its use;
//! `delete` removes a queue object; `describe` ends with the workload's events.
//!
//! [`cadre_k8s::submission`]: mod@cadre_k8s::submission

use anyhow::{Context, Result, bail};
use cadre_cli::ConnectArgs;
use cadre_core::job::{JobId, JobState};
use cadre_core::run::RunSpec;
use cadre_k8s::{Object, TranslateOptions, Translated};
use cadre_proto::api::{
    JobEventList, JobList, JobSubmission, JobView, NodeList, QueueAmountsView, QueueList,
    QueueObjectRef, QueueObjectsRequest, QueueObjectsResponse, SubmitRequest, SubmitResponse,
    WhoAmI,
};
use cadre_proto::exit;
use clap::{Args, ValueEnum};
use hyper::Method;
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `cadre apply`.
#[derive(Args, Debug, Clone)]
pub struct ApplyArgs {
    /// A manifest file, a directory of them (`*.yaml`, `*.yml`, `*.json`, not recursive), or
    /// `-` for standard input; repeatable. Files may hold several documents.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    /// The namespace of objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The account to charge (default: `$CADRE_ACCOUNT`, else the user's name).
    #[arg(short = 'A', long, env = "CADRE_ACCOUNT")]
    pub account: Option<String>,
    /// Where the containers' programs run: `container`, each in its image in the container
    /// runtime of nodes that have one (the workloads are placed only there); `host`, the
    /// container's `command` on the node, its image recorded; `auto`, in containers when a
    /// node of the cluster has a container runtime, else on the host.
    #[arg(long, value_enum, default_value_t = RunIn::Auto, value_name = "WHERE")]
    pub run_in: RunIn,
}

/// Where a workload's containers run (`cadre apply --run-in`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunIn {
    Auto,
    Container,
    Host,
}

/// How `get` prints.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Wide,
    Json,
    Yaml,
}

/// `cadre get`.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// What to list: `workloads` (every kind), or one kind: `jobs`, `mpijobs`,
    /// `pytorchjobs`, `jobsets`, `vcjobs` (Volcano Jobs); or `queues` (every queue, from
    /// the policy file or a queue object, with its quota and use), `clusterqueues`,
    /// `localqueues`, `resourceflavors`; or `priorityclasses` (`pc`), `namespaces` (`ns`),
    /// `resourcequotas` (`quota`, with each namespace's use), `limitranges` (`limits`); or
    /// `storageclasses` (`sc`), `persistentvolumeclaims` (`pvc`, with each claim's
    /// directory and owner), `services` (`svc`), `configmaps` (`cm`), `secrets` (their
    /// keys, never their values).
    pub what: String,
    /// Only this namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// For `pods`: only those whose labels match (`job-name=train`, `app in (a,b)`,
    /// `!canary`), as `kubectl -l` reads it.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// For `pods`: after the list, a line for each pod that appears or changes, until
    /// interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// `cadre delete` and `cadre describe`.
#[derive(Args, Debug, Clone)]
pub struct NamedArgs {
    /// The kind: a workload's (`job`, `mpijob`, `pytorchjob`, `jobset`, `vcjob`) or, for
    /// `delete`, a queue object's (`clusterqueue`, `localqueue`, `resourceflavor`,
    /// `topology`, `queue` for a Volcano Queue) or a namespace object's (`priorityclass`,
    /// `namespace`, `resourcequota`, `limitrange`), a storage object's (`storageclass`,
    /// `sc`, `persistentvolumeclaim`, `pvc`: a claim's directory is kept), or a `service`
    /// (`svc`), `configmap` (`cm`) or `secret` applied on its own; plurals too.
    pub kind: String,
    pub name: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

/// A kind as the commands name it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct KindName {
    kind: &'static str,
    /// The API group (`batch` for batch/v1 Jobs).
    group: &'static str,
    /// kubectl's resource name.
    resource: &'static str,
}

const KINDS: &[KindName] = &[
    KindName {
        kind: "Job",
        group: "batch",
        resource: "job",
    },
    KindName {
        kind: "MPIJob",
        group: "kubeflow.org",
        resource: "mpijob",
    },
    KindName {
        kind: "PyTorchJob",
        group: "kubeflow.org",
        resource: "pytorchjob",
    },
    KindName {
        kind: "JobSet",
        group: "jobset.x-k8s.io",
        resource: "jobset",
    },
    KindName {
        kind: "Job",
        group: "batch.volcano.sh",
        resource: "vcjob",
    },
];

/// Queue objects' kinds as the commands name them.
const QUEUE_KINDS: &[KindName] = &[
    KindName {
        kind: "ResourceFlavor",
        group: "kueue.x-k8s.io",
        resource: "resourceflavor",
    },
    KindName {
        kind: "ClusterQueue",
        group: "kueue.x-k8s.io",
        resource: "clusterqueue",
    },
    KindName {
        kind: "LocalQueue",
        group: "kueue.x-k8s.io",
        resource: "localqueue",
    },
    KindName {
        kind: "Topology",
        group: "kueue.x-k8s.io",
        resource: "topology",
    },
    KindName {
        kind: "Queue",
        group: "scheduling.volcano.sh",
        resource: "queue",
    },
    KindName {
        kind: "PriorityClass",
        group: "scheduling.k8s.io",
        resource: "priorityclass",
    },
    KindName {
        kind: "Namespace",
        group: "",
        resource: "namespace",
    },
    KindName {
        kind: "ResourceQuota",
        group: "",
        resource: "resourcequota",
    },
    KindName {
        kind: "LimitRange",
        group: "",
        resource: "limitrange",
    },
    KindName {
        kind: "StorageClass",
        group: "storage.k8s.io",
        resource: "storageclass",
    },
    KindName {
        kind: "PersistentVolumeClaim",
        group: "",
        resource: "persistentvolumeclaim",
    },
    KindName {
        kind: "Service",
        group: "",
        resource: "service",
    },
    KindName {
        kind: "ConfigMap",
        group: "",
        resource: "configmap",
    },
    KindName {
        kind: "Secret",
        group: "",
        resource: "secret",
    },
];

/// The queue kinds applied in a namespace.
fn is_namespaced(kind: &str) -> bool {
    matches!(
        kind,
        "LocalQueue"
            | "ResourceQuota"
            | "LimitRange"
            | "PersistentVolumeClaim"
            | "Service"
            | "ConfigMap"
            | "Secret"
    )
}

/// A queue object's kind by its word (`clusterqueue`, `cq`, `queue.scheduling.volcano.sh`,
/// plurals), if it is one.
fn queue_kind_named(word: &str) -> Option<KindName> {
    let w = word.to_ascii_lowercase();
    let w = match w.as_str() {
        "cq" => "clusterqueue",
        "lq" => "localqueue",
        "rf" | "flavor" | "flavors" => "resourceflavor",
        "topologies" => "topology",
        "pc" => "priorityclass",
        "ns" => "namespace",
        "quota" => "resourcequota",
        "limits" => "limitrange",
        "sc" => "storageclass",
        "pvc" => "persistentvolumeclaim",
        "svc" => "service",
        "cm" => "configmap",
        other => other,
    };
    // The resource as given, then as a plural (`queues`, `priorityclasses`), with or
    // without its group (`clusterqueues.kueue.x-k8s.io`).
    let (resource, group) = w.split_once('.').unwrap_or((w, ""));
    let singular = [
        Some(resource),
        resource.strip_suffix('s'),
        resource.strip_suffix("es"),
    ];
    QUEUE_KINDS
        .iter()
        .find(|k| {
            (group.is_empty() || group == k.group)
                && singular.iter().flatten().any(|r| *r == k.resource)
        })
        .copied()
}

/// kubectl's `resource.group/name` of a queue object.
fn queue_object_text(kind: &str, name: &str) -> String {
    match QUEUE_KINDS.iter().find(|k| k.kind == kind) {
        Some(k) if !k.group.is_empty() => format!("{}.{}/{name}", k.resource, k.group),
        _ => format!("{}/{name}", kind.to_ascii_lowercase()),
    }
}

pub(crate) fn kind_named(word: &str) -> Result<KindName> {
    let w = word.to_ascii_lowercase();
    let w = w.strip_suffix('s').unwrap_or(&w);
    KINDS
        .iter()
        .find(|k| {
            w == k.resource
                || w == format!("{}.{}", k.resource, k.group)
                || (k.resource == "job" && w == "job.batch")
                || (k.resource == "vcjob" && w == "job.batch.volcano.sh")
        })
        .copied()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown kind `{word}`: use job, mpijob, pytorchjob, jobset or vcjob (Volcano Job)"
            )
        })
}

/// The group of an apiVersion (`batch/v1` is `batch`; `v1` is the core group, ``).
fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// A job's workload identity, from its spec's annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Identity {
    pub(crate) kind: String,
    #[serde(rename = "apiVersion")]
    pub(crate) api_version: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Identity {
    fn of(view: &JobView) -> Option<Identity> {
        let a = &view.spec.as_ref()?.annotations;
        Some(Identity {
            kind: a.get("k8s.kind")?.clone(),
            api_version: a.get("k8s.apiVersion")?.clone(),
            namespace: a.get("k8s.namespace")?.clone(),
            name: a.get("k8s.name")?.clone(),
        })
    }

    fn of_translated(t: &Translated) -> Identity {
        let a = &t.spec.annotations;
        Identity {
            kind: a.get("k8s.kind").cloned().unwrap_or_default(),
            api_version: a.get("k8s.apiVersion").cloned().unwrap_or_default(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
        }
    }

    pub(crate) fn is(&self, k: KindName) -> bool {
        self.kind == k.kind && api_group(&self.api_version) == k.group
    }

    /// kubectl's `resource.group/name`.
    pub(crate) fn object(&self) -> String {
        let resource = KINDS
            .iter()
            .find(|k| self.is(**k))
            .map_or(self.kind.to_ascii_lowercase(), |k| k.resource.to_string());
        let group = api_group(&self.api_version);
        if group.is_empty() || resource == "vcjob" {
            format!("{resource}/{}", self.name)
        } else {
            format!("{resource}.{group}/{}", self.name)
        }
    }
}

/// The texts to apply: `(origin, text)`.
fn read_inputs(files: &[String]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for f in files {
        if f == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("failed to read standard input")?;
            out.push(("<stdin>".to_string(), text));
            continue;
        }
        let path = Path::new(f);
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("failed to read directory {f}"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                })
                .collect();
            entries.sort();
            if entries.is_empty() {
                bail!("directory {f} holds no manifest (*.yaml, *.yml, *.json)");
            }
            for p in entries {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("failed to read {}", p.display()))?;
                out.push((p.display().to_string(), text));
            }
        } else {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("failed to read {f}"))?;
            out.push((f.clone(), text));
        }
    }
    Ok(out)
}

/// What the files ask for: the workloads translated, the queue objects checked (with
/// their manifests as JSON, for the controller), and every problem of every document.
#[derive(Default)]
struct Inputs {
    /// With the Services that select them, and the ConfigMaps and Secrets they use, of
    /// the files or applied before.
    workloads: Vec<Translated>,
    /// The objects the controller keeps (queue, namespace, storage objects, and the
    /// Services, ConfigMaps and Secrets), as JSON.
    queue_objects: Vec<serde_json::Value>,
    problems: Vec<String>,
}

fn translate_all(
    inputs: &[(String, String)],
    opts: &TranslateOptions,
    applied: &cadre_k8s::QueueSet,
) -> Inputs {
    let mut out = Inputs::default();
    let mut services = Vec::new();
    let mut maps = Vec::new();
    let mut secrets = Vec::new();
    let mut parsed = Vec::new();
    for (origin, text) in inputs {
        match cadre_k8s::parse_numbered(text, origin) {
            Ok(d) => parsed.push((origin, text, d)),
            Err(e) => out.problems.push(e.to_string()),
        }
    }
    // The LimitRanges of the apply hold for all its workloads, wherever they stand, in
    // place of the applied ones of their names.
    let mut opts = opts.clone();
    for (_, _, docs) in &parsed {
        cadre_k8s::add_limit_ranges(&mut opts, docs);
    }
    let opts = &opts;
    for (origin, text, docs) in parsed {
        let mut json: Option<Vec<(usize, serde_json::Value)>> = None;
        for (doc, object) in docs {
            match &object {
                Object::ResourceFlavor(_)
                | Object::ClusterQueue(_)
                | Object::LocalQueue(_)
                | Object::Topology(_)
                | Object::VolcanoQueue(_)
                | Object::PriorityClass(_)
                | Object::Namespace(_)
                | Object::ResourceQuota(_)
                | Object::LimitRange(_)
                | Object::StorageClass(_)
                | Object::PersistentVolumeClaim(_)
                | Object::Service(_)
                | Object::ConfigMap(_)
                | Object::Secret(_) => {
                    // Checked on its own here, so that its problems name its file and
                    // document; the controller checks it again with the others applied.
                    let mut set = cadre_k8s::QueueSet::default();
                    if let Err(e) = set.apply_in(&object, &opts.default_namespace) {
                        out.problems.push(format!("{origin}, document {doc}: {e}"));
                        continue;
                    }
                    // What the workloads of the apply use, as read.
                    services.append(&mut set.services);
                    maps.append(&mut set.config_maps);
                    secrets.append(&mut set.secrets);
                    let all = match &json {
                        Some(j) => j,
                        None => match cadre_k8s::documents_json(text, origin) {
                            Ok(j) => json.insert(j),
                            Err(e) => {
                                out.problems.push(e.to_string());
                                continue;
                            }
                        },
                    };
                    match all.iter().find(|(d, _)| *d == doc) {
                        Some((_, v)) => out.queue_objects.push(v.clone()),
                        None => out
                            .problems
                            .push(format!("{origin}, document {doc}: not found again as JSON")),
                    }
                }
                _ => match cadre_k8s::translate(&object, &with_generated_suffix(opts)) {
                    Ok(t) => out.workloads.push(t),
                    Err(e) => out.problems.push(format!("{origin}, document {doc}: {e}")),
                },
            }
        }
    }
    // Those applied before, but for the ones this apply gives again: kept by the
    // controller, they stand for the workloads applied after them.
    fn with_applied<T: Clone>(
        mine: &mut Vec<T>,
        applied: &[T],
        key: impl Fn(&T) -> (String, String),
    ) {
        let given: Vec<(String, String)> = mine.iter().map(&key).collect();
        mine.extend(applied.iter().filter(|x| !given.contains(&key(x))).cloned());
    }
    with_applied(&mut services, &applied.services, |s| {
        (s.namespace.clone(), s.name.clone())
    });
    with_applied(&mut maps, &applied.config_maps, |c| {
        (c.namespace.clone(), c.name.clone())
    });
    with_applied(&mut secrets, &applied.secrets, |s| {
        (s.namespace.clone(), s.name.clone())
    });
    // A Service that selects no pod yet is kept for the workloads to come.
    cadre_k8s::contract::attach_services(&mut out.workloads, services);
    out.problems.extend(cadre_k8s::contract::attach_config(
        &mut out.workloads,
        &maps,
        &secrets,
    ));
    out
}

/// `opts` with a fresh suffix for an object named by `metadata.generateName`: five
/// letters and digits, as the Kubernetes API server makes them (without its vowels and
/// look-alikes, so that no word is spelled), drawn anew for each object.
fn with_generated_suffix(opts: &TranslateOptions) -> TranslateOptions {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = [0u8; 5];
    // The OS's random source does not fail on Linux once booted (were it to, the suffix
    // would be `bbbbb`, the same for every object).
    let _ = getrandom::fill(&mut bytes);
    let suffix: String = bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    TranslateOptions {
        generated_suffix: Some(suffix),
        ..opts.clone()
    }
}

/// Whether job `id` runs workload `t` as it stands (then applying it again changes
/// nothing, as `kubectl apply` of an unchanged object). A workload with Secrets never is:
/// the controller shows no Secret's value, so a changed one could not be told. Nor is one
/// whose run cannot be read (another user's job, or one that ended meanwhile).
fn as_applied(client: &mut cadre_client::Client, id: JobId, t: &Translated) -> bool {
    if !t.secrets.is_empty() {
        return false;
    }
    client
        .get::<RunSpec>(&format!("/jobs/{id}/run"))
        .ok()
        .and_then(|run| cadre_k8s::workload_of(&run).ok().flatten())
        .is_some_and(|stored| stored == *t)
}

/// The objects applied to the cluster that an apply's workloads use: LimitRanges, and the
/// Services, ConfigMaps and Secrets `user` applied before them (Secrets with their keys
/// alone: the API shows no Secret's value). One this client cannot read (a newer controller's) is left
/// out, with a warning, rather than stopping every apply.
fn applied_objects(client: &mut cadre_client::Client, user: &str) -> Result<cadre_k8s::QueueSet> {
    let list: cadre_proto::api::QueueObjectList = client.get("/queue-objects")?;
    let mut set = cadre_k8s::QueueSet::default();
    let used = |o: &cadre_proto::api::QueueObjectView| match o.kind.as_str() {
        "LimitRange" => true,
        // Only the user's own: another's ConfigMap of a name their workload gives would
        // put that user's values in its environment.
        "Service" | "ConfigMap" | "Secret" => {
            cadre_k8s::storage::owner_of(&o.manifest) == Some(user)
        }
        _ => false,
    };
    for o in list.objects.iter().filter(|o| used(o)) {
        let origin = format!("the controller's {} `{}/{}`", o.kind, o.namespace, o.name);
        let read = cadre_k8s::parse_numbered(&o.manifest.to_string(), &origin)
            .map_err(anyhow::Error::from)
            .and_then(|mut objects| {
                let (_, object) = objects.pop().context("no object")?;
                Ok(set.apply_in(&object, &o.namespace)?)
            });
        if let Err(e) = read {
            eprintln!("cadre: warning: {origin} is not applied here: {e:#}");
        }
    }
    Ok(set)
}

fn whoami(conn: &ConnectArgs, client: &mut cadre_client::Client) -> Result<String> {
    Ok(match &conn.token {
        Some(_) => client.get::<WhoAmI>("/whoami")?.user,
        None => cadre_client::user::current(),
    })
}

/// Every job that is a workload, with its identity, in id order.
pub(crate) fn workload_jobs(client: &mut cadre_client::Client) -> Result<Vec<(Identity, JobView)>> {
    let list: JobList = client.get("/jobs?detail=true")?;
    Ok(list
        .jobs
        .into_iter()
        .filter_map(|j| Identity::of(&j).map(|i| (i, j)))
        .collect())
}

pub fn apply(conn: &ConnectArgs, a: &ApplyArgs) -> Result<ExitCode> {
    let inputs = read_inputs(&a.files)?;
    let mut client = conn.client()?;
    let user = whoami(conn, &mut client)?;
    let mut opts = TranslateOptions::new(
        &user,
        a.account.as_deref().unwrap_or(&user),
        std::env::current_dir()?,
    );
    opts.default_namespace = a.namespace.clone();
    opts.path = std::env::var("PATH").ok().filter(|p| !p.is_empty());
    opts.container_runtime = match a.run_in {
        RunIn::Host => false,
        RunIn::Auto | RunIn::Container => {
            let nodes: NodeList = client.get("/nodes")?;
            let any = nodes.nodes.iter().any(|n| n.container_runtime.is_some());
            if a.run_in == RunIn::Container && !any {
                bail!(
                    "no node of the cluster has a container runtime, so no container can run in \
                     its image (start the agents with --container-runtime, or apply with \
                     --run-in host to run the containers' commands on the nodes)"
                );
            }
            any
        }
    };
    let applied = applied_objects(&mut client, &user)?;
    opts.limit_ranges = applied.limit_ranges.clone();
    let Inputs {
        workloads,
        queue_objects,
        mut problems,
    } = translate_all(&inputs, &opts, &applied);
    let existing = workload_jobs(&mut client)?;
    let mut jobs = Vec::new();
    let mut names = Vec::new();
    let mut unchanged = Vec::new();
    for t in &workloads {
        let id = Identity::of_translated(t);
        if let Some((_, j)) = existing
            .iter()
            .rev()
            .find(|(i, j)| *i == id && !j.state.is_final())
        {
            if as_applied(&mut client, j.id, t) {
                unchanged.push(format!("{} unchanged (job {})", id.object(), j.id));
            } else {
                problems.push(format!(
                    "{} in namespace {} is job {} ({}) and differs from this manifest: a \
                     workload's spec is immutable; delete it first",
                    id.object(),
                    id.namespace,
                    j.id,
                    j.state
                ));
            }
            continue;
        }
        if names.contains(&id) {
            problems.push(format!(
                "{} in namespace {} is given twice",
                id.object(),
                id.namespace
            ));
            continue;
        }
        match cadre_k8s::submission(t) {
            Ok((spec, run)) => {
                jobs.push(JobSubmission {
                    spec,
                    run,
                    array_of: None,
                });
                names.push(id);
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("cadre: error: {p}");
        }
        eprintln!("cadre: nothing was applied");
        return Ok(ExitCode::from(exit::ERROR));
    }
    if jobs.is_empty() && queue_objects.is_empty() && unchanged.is_empty() {
        bail!("nothing to apply in {}", a.files.join(", "));
    }
    for u in &unchanged {
        println!("{u}");
    }
    if !queue_objects.is_empty() {
        let resp: Result<QueueObjectsResponse, _> = client.send(
            Method::POST,
            "/queue-objects",
            Some(&QueueObjectsRequest {
                put: queue_objects,
                delete: Vec::new(),
                namespace: Some(a.namespace.clone()),
                dry_run: false,
            }),
        );
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cadre: error: {e:#}");
                eprintln!("cadre: nothing was applied");
                return Ok(ExitCode::from(exit::ERROR));
            }
        };
        for r in &resp.results {
            println!(
                "{} {}",
                queue_object_text(&r.object.kind, &r.object.name),
                r.outcome
            );
        }
    }
    if jobs.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let resp: SubmitResponse = client.send(
        Method::POST,
        "/jobs",
        Some(&SubmitRequest {
            jobs,
            dry_run: false,
        }),
    )?;
    for (id, job) in names.iter().zip(resp.job_ids) {
        println!("{} created (job {job})", id.object());
    }
    Ok(ExitCode::SUCCESS)
}

/// One workload as `get -o json|yaml` prints it.
#[derive(Serialize)]
struct WorkloadRow {
    #[serde(flatten)]
    identity: Identity,
    job: JobId,
    state: JobState,
    reason: String,
    nodes: String,
    tasks: u32,
    gpus: f64,
    submit_time: u64,
    start_time: Option<u64>,
    end_time: Option<u64>,
    exit_code: Option<i32>,
}

pub(crate) fn age(since: u64) -> String {
    let secs = cadre_client::clock::now().saturating_sub(since);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `used/nominal` of one resource (`-` for an unmanaged nominal quota).
fn used_of(used: Option<f64>, nominal: Option<f64>) -> String {
    let num = |v: f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v}")
        }
    };
    let u = num(used.unwrap_or(0.0));
    match nominal {
        Some(n) => format!("{u}/{}", num(n)),
        None => format!("{u}/-"),
    }
}

fn as_f64(v: Option<u64>) -> Option<f64> {
    v.map(|x| x as f64)
}

fn amounts_text(a: &QueueAmountsView) -> String {
    let mut parts = Vec::new();
    if let Some(g) = a.gpus {
        parts.push(format!("gpus={g}"));
    }
    if let Some(c) = a.cpus {
        parts.push(format!("cpus={c}"));
    }
    if let Some(m) = a.mem_mib {
        parts.push(format!("mem={m}Mi"));
    }
    if let Some(n) = a.nics {
        parts.push(format!("nics={n}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// `get queues`, `get clusterqueues`, `get localqueues`, `get resourceflavors`.
fn get_queues(conn: &ConnectArgs, a: &GetArgs, kind: Option<KindName>) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let mut list: QueueList = client.get("/queues")?;
    let which = kind.map(|k| k.kind);
    match which {
        Some("ClusterQueue") => list.queues.retain(|q| q.source == "ClusterQueue"),
        Some("Queue") => list.queues.retain(|q| q.source == "Queue"),
        _ => {}
    }
    if !a.all_namespaces && which == Some("LocalQueue") {
        list.local_queues.retain(|l| l.namespace == a.namespace);
    }
    match a.output {
        Some(Output::Json) => {
            println!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(ExitCode::SUCCESS);
        }
        Some(Output::Yaml) => {
            print!("{}", yaml_serde::to_string(&list)?);
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let wide = a.output == Some(Output::Wide);
    let mut table: Vec<Vec<String>> = Vec::new();
    let empty = match which {
        Some("LocalQueue") => {
            table.push(
                ["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING", "ADMITTED"]
                    .map(String::from)
                    .to_vec(),
            );
            for l in &list.local_queues {
                table.push(vec![
                    l.namespace.clone(),
                    l.name.clone(),
                    l.cluster_queue.clone(),
                    l.pending.to_string(),
                    l.admitted.to_string(),
                ]);
            }
            list.local_queues.is_empty()
        }
        Some("ResourceFlavor") => {
            table.push(["NAME", "NODE LABELS"].map(String::from).to_vec());
            for f in &list.flavors {
                let labels: Vec<String> = f
                    .node_labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                table.push(vec![f.name.clone(), labels.join(",")]);
            }
            list.flavors.is_empty()
        }
        Some("Topology") => {
            bail!("`get topologies` is not supported; `get queues` lists the queues")
        }
        _ => {
            let mut head = vec![
                "NAME", "SOURCE", "COHORT", "ADMITTED", "PENDING", "GPUS", "CPUS", "STATUS",
            ];
            if wide {
                head.extend(["MEMORY(MiB)", "BORROWED", "FLAVOR", "WEIGHT", "CAPABILITY"]);
            }
            table.push(head.iter().map(|s| s.to_string()).collect());
            for q in &list.queues {
                let mut row = vec![
                    q.name.clone(),
                    q.source.clone(),
                    q.cohort.clone().unwrap_or_else(|| "-".into()),
                    q.admitted.to_string(),
                    q.pending.to_string(),
                    used_of(q.used.gpus, q.nominal.gpus),
                    used_of(as_f64(q.used.cpus), as_f64(q.nominal.cpus)),
                    if q.over_quota {
                        "OverQuota".into()
                    } else {
                        "Active".into()
                    },
                ];
                if wide {
                    row.extend([
                        used_of(as_f64(q.used.mem_mib), as_f64(q.nominal.mem_mib)),
                        amounts_text(&q.borrowed),
                        q.flavor.clone().unwrap_or_else(|| "-".into()),
                        q.weight.to_string(),
                        q.capability
                            .as_ref()
                            .map_or_else(|| "-".into(), amounts_text),
                    ]);
                }
                table.push(row);
            }
            list.queues.is_empty()
        }
    };
    if empty {
        eprintln!("No resources found.");
    } else {
        print_table(&table);
    }
    Ok(ExitCode::SUCCESS)
}

/// `get priorityclasses`, `namespaces`, `resourcequotas`, `limitranges`,
/// `storageclasses`, `persistentvolumeclaims`: the objects applied, as kubectl lists them
/// (a ResourceQuota with its namespace's use, a claim with its directory and owner).
fn get_namespace_objects(conn: &ConnectArgs, a: &GetArgs, kind: KindName) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let list: cadre_proto::api::QueueObjectList = client.get("/queue-objects")?;
    let mut objects: Vec<_> = list
        .objects
        .into_iter()
        .filter(|o| o.kind == kind.kind)
        .filter(|o| !is_namespaced(kind.kind) || a.all_namespaces || o.namespace == a.namespace)
        .collect();
    objects.sort_by(|x, y| (&x.namespace, &x.name).cmp(&(&y.namespace, &y.name)));
    match a.output {
        Some(Output::Json) => {
            let manifests: Vec<_> = objects.iter().map(|o| &o.manifest).collect();
            println!("{}", serde_json::to_string_pretty(&manifests)?);
            return Ok(ExitCode::SUCCESS);
        }
        Some(Output::Yaml) => {
            let manifests: Vec<_> = objects.iter().map(|o| &o.manifest).collect();
            print!("{}", yaml_serde::to_string(&manifests)?);
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    if objects.is_empty() {
        if is_namespaced(kind.kind) && !a.all_namespaces {
            eprintln!("No resources found in {} namespace.", a.namespace);
        } else {
            eprintln!("No resources found.");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let quotas: Vec<cadre_proto::api::NamespaceQuotaView> = if kind.kind == "ResourceQuota" {
        client.get::<QueueList>("/queues")?.namespace_quotas
    } else {
        Vec::new()
    };
    let field = |o: &cadre_proto::api::QueueObjectView, key: &str| {
        o.manifest
            .get(key)
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    };
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut head: Vec<&str> = Vec::new();
    if is_namespaced(kind.kind) && a.all_namespaces {
        head.push("NAMESPACE");
    }
    head.push("NAME");
    match kind.kind {
        "PriorityClass" => head.extend(["VALUE", "GLOBAL-DEFAULT", "PREEMPTIONPOLICY"]),
        "Namespace" => head.push("STATUS"),
        "ResourceQuota" => head.push("REQUEST"),
        "StorageClass" => head.extend([
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "PATH",
        ]),
        "PersistentVolumeClaim" => head.extend([
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "OWNER",
        ]),
        "ConfigMap" | "Secret" => head.extend(["DATA", "OWNER"]),
        "Service" => head.extend(["SELECTOR", "PORTS", "OWNER"]),
        _ => {}
    }
    head.push("AGE");
    table.push(head.iter().map(|s| s.to_string()).collect());
    for o in &objects {
        let mut row = Vec::new();
        if is_namespaced(kind.kind) && a.all_namespaces {
            row.push(o.namespace.clone());
        }
        let at = |pointer: &str| o.manifest.pointer(pointer).and_then(|v| v.as_str());
        let default = kind.kind == "StorageClass"
            && at(&format!(
                "/metadata/annotations/{}",
                cadre_k8s::storage::DEFAULT_CLASS_ANNOTATION.replace('/', "~1")
            )) == Some("true");
        row.push(if default {
            format!("{} (default)", o.name)
        } else {
            o.name.clone()
        });
        let owner = || {
            cadre_k8s::storage::owner_of(&o.manifest)
                .unwrap_or("-")
                .to_string()
        };
        let count = |key: &str| {
            o.manifest
                .get(key)
                .and_then(|d| d.as_object())
                .map_or(0, |d| d.len())
        };
        match kind.kind {
            "ConfigMap" | "Secret" => {
                row.push((count("data") + count("stringData") + count("binaryData")).to_string());
                row.push(owner());
            }
            "Service" => {
                let selector: Vec<String> = o
                    .manifest
                    .pointer("/spec/selector")
                    .and_then(|v| v.as_object())
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect();
                let ports: Vec<String> = o
                    .manifest
                    .pointer("/spec/ports")
                    .and_then(|v| v.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("port").map(|v| v.to_string()))
                    .collect();
                row.push(if selector.is_empty() {
                    "<none>".into()
                } else {
                    selector.join(",")
                });
                row.push(if ports.is_empty() {
                    "<none>".into()
                } else {
                    ports.join(",")
                });
                row.push(owner());
            }
            "StorageClass" => {
                row.push(at("/provisioner").unwrap_or("-").to_string());
                row.push(at("/reclaimPolicy").unwrap_or("Retain").to_string());
                row.push(at("/volumeBindingMode").unwrap_or("Immediate").to_string());
                row.push(
                    field(o, "allowVolumeExpansion")
                        .as_bool()
                        .unwrap_or(false)
                        .to_string(),
                );
                row.push(at("/parameters/path").unwrap_or("-").to_string());
            }
            "PersistentVolumeClaim" => {
                let modes: Vec<&str> = o
                    .manifest
                    .pointer("/spec/accessModes")
                    .and_then(|m| m.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str())
                    .map(|m| match m {
                        "ReadWriteOnce" => "RWO",
                        "ReadOnlyMany" => "ROX",
                        "ReadWriteMany" => "RWX",
                        "ReadWriteOncePod" => "RWOP",
                        other => other,
                    })
                    .collect();
                row.push("Bound".into());
                row.push(at("/metadata/uid").map_or("-".into(), |u| format!("pvc-{u}")));
                row.push(
                    at("/spec/resources/requests/storage")
                        .unwrap_or("-")
                        .to_string(),
                );
                row.push(modes.join(","));
                row.push(at("/spec/storageClassName").unwrap_or("-").to_string());
                row.push(owner());
            }
            "PriorityClass" => {
                row.push(field(o, "value").to_string());
                row.push(
                    field(o, "globalDefault")
                        .as_bool()
                        .unwrap_or(false)
                        .to_string(),
                );
                row.push(
                    field(o, "preemptionPolicy")
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_string(),
                );
            }
            "Namespace" => row.push("Active".into()),
            "ResourceQuota" => {
                let q = quotas
                    .iter()
                    .find(|q| q.namespace == o.namespace && q.name == o.name);
                row.push(q.map_or_else(|| "-".into(), quota_usage_text));
            }
            _ => {}
        }
        row.push(age(o.applied));
        table.push(row);
    }
    print_table(&table);
    Ok(ExitCode::SUCCESS)
}

/// `gpus: 8/16, cpus: 2/4`: a namespace quota's use of each limited component.
fn quota_usage_text(q: &cadre_proto::api::NamespaceQuotaView) -> String {
    let mut parts = Vec::new();
    if q.hard.gpus.is_some() {
        parts.push(format!("gpus: {}", used_of(q.used.gpus, q.hard.gpus)));
    }
    if q.hard.cpus.is_some() {
        parts.push(format!(
            "cpus: {}",
            used_of(as_f64(q.used.cpus), as_f64(q.hard.cpus))
        ));
    }
    if q.hard.mem_mib.is_some() {
        parts.push(format!(
            "memory: {}Mi",
            used_of(as_f64(q.used.mem_mib), as_f64(q.hard.mem_mib))
        ));
    }
    if q.hard.nics.is_some() {
        parts.push(format!(
            "nics: {}",
            used_of(as_f64(q.used.nics), as_f64(q.hard.nics))
        ));
    }
    parts.join(", ")
}

pub fn get(conn: &ConnectArgs, a: &GetArgs) -> Result<ExitCode> {
    let w = a.what.to_ascii_lowercase();
    if matches!(w.as_str(), "queues" | "queue") {
        return get_queues(conn, a, None);
    }
    if let Some(k) = queue_kind_named(&w) {
        if cadre_k8s::namespaces::is_namespace_kind(k.kind)
            || matches!(
                k.kind,
                "StorageClass" | "PersistentVolumeClaim" | "Service" | "ConfigMap" | "Secret"
            )
        {
            return get_namespace_objects(conn, a, k);
        }
        return get_queues(conn, a, Some(k));
    }
    if a.selector.is_some() || a.watch {
        bail!("-l and -w are for `cadre get pods`");
    }
    let filter = match w.as_str() {
        "workload" | "workloads" | "all" => None,
        other => Some(kind_named(other)?),
    };
    let mut client = conn.client()?;
    let rows: Vec<WorkloadRow> = workload_jobs(&mut client)?
        .into_iter()
        .filter(|(i, _)| filter.is_none_or(|k| i.is(k)))
        .filter(|(i, _)| a.all_namespaces || i.namespace == a.namespace)
        .map(|(identity, j)| WorkloadRow {
            identity,
            job: j.id,
            state: j.state,
            reason: j.reason,
            nodes: j.nodes,
            tasks: j.tasks,
            gpus: j.gpus,
            submit_time: j.submit_time,
            start_time: j.start_time,
            end_time: j.end_time,
            exit_code: j.exit_code,
        })
        .collect();
    match a.output {
        Some(Output::Json) => println!("{}", serde_json::to_string_pretty(&rows)?),
        Some(Output::Yaml) => print!("{}", yaml_serde::to_string(&rows)?),
        None | Some(Output::Wide) => {
            if rows.is_empty() {
                eprintln!(
                    "No resources found{}.",
                    if a.all_namespaces {
                        String::new()
                    } else {
                        format!(" in {} namespace", a.namespace)
                    }
                );
                return Ok(ExitCode::SUCCESS);
            }
            let wide = a.output == Some(Output::Wide);
            let mut table: Vec<Vec<String>> = Vec::new();
            let mut head = vec!["NAMESPACE", "NAME", "JOB", "STATE", "AGE"];
            if wide {
                head.extend(["TASKS", "GPUS", "NODES", "REASON"]);
            }
            table.push(head.iter().map(|s| s.to_string()).collect());
            for r in &rows {
                let mut row = vec![
                    r.identity.namespace.clone(),
                    r.identity.object(),
                    r.job.to_string(),
                    r.state.to_string(),
                    age(r.submit_time),
                ];
                if wide {
                    row.extend([
                        r.tasks.to_string(),
                        format!("{}", r.gpus),
                        r.nodes.clone(),
                        r.reason.clone(),
                    ]);
                }
                table.push(row);
            }
            print_table(&table);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                if c + 1 == r.len() {
                    s.clone()
                } else {
                    format!("{s:<w$}", w = widths[c])
                }
            })
            .collect();
        println!("{}", line.join("   ").trim_end());
    }
}

/// The jobs of a named workload, oldest first; an error naming it when there is none.
fn find(client: &mut cadre_client::Client, a: &NamedArgs) -> Result<Vec<JobView>> {
    let kind = kind_named(&a.kind)?;
    let jobs: Vec<JobView> = workload_jobs(client)?
        .into_iter()
        .filter(|(i, _)| i.is(kind) && i.name == a.name && i.namespace == a.namespace)
        .map(|(_, j)| j)
        .collect();
    if jobs.is_empty() {
        bail!(
            "{}.{} `{}` not found in namespace {}",
            kind.resource,
            kind.group,
            a.name,
            a.namespace
        );
    }
    Ok(jobs)
}

pub fn delete(conn: &ConnectArgs, a: &NamedArgs) -> Result<ExitCode> {
    let mut client = conn.client()?;
    if let Some(k) = queue_kind_named(&a.kind) {
        let namespace = if is_namespaced(k.kind) {
            a.namespace.clone()
        } else {
            String::new()
        };
        let resp: QueueObjectsResponse = client.send(
            Method::POST,
            "/queue-objects",
            Some(&QueueObjectsRequest {
                put: Vec::new(),
                delete: vec![QueueObjectRef {
                    kind: k.kind.to_string(),
                    namespace,
                    name: a.name.clone(),
                }],
                namespace: None,
                dry_run: false,
            }),
        )?;
        for r in &resp.results {
            println!(
                "{} {}",
                queue_object_text(&r.object.kind, &r.object.name),
                r.outcome
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let jobs = find(&mut client, a)?;
    let mut cancelled = Vec::new();
    for j in jobs.iter().filter(|j| !j.state.is_final()) {
        client
            .send::<(), serde_json::Value>(Method::DELETE, &format!("/jobs/{}", j.id), None)
            .with_context(|| format!("failed to cancel job {}", j.id))?;
        cancelled.push(j.id.to_string());
    }
    let id = jobs.last().and_then(Identity::of);
    let object = id.map_or_else(|| a.name.clone(), |i| i.object());
    if cancelled.is_empty() {
        println!(
            "{object} had ended (job {}): nothing to cancel",
            jobs[jobs.len() - 1].id
        );
    } else {
        println!("{object} deleted (job {} cancelled)", cancelled.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn describe(conn: &ConnectArgs, a: &NamedArgs) -> Result<ExitCode> {
    let mut client = conn.client()?;
    let jobs = find(&mut client, a)?;
    let Some(job) = jobs.last() else {
        bail!("no job");
    };
    let run: RunSpec = client.get(&format!("/jobs/{}/run", job.id))?;
    let t = cadre_k8s::workload_of(&run)?
        .with_context(|| format!("job {} carries no Kubernetes translation", job.id))?;
    let nodes: NodeList = client.get("/nodes")?;
    print!("{}", describe_text(job, &t, &run, &nodes, &jobs));
    let events: JobEventList = client.get(&format!("/jobs/{}/events", job.id))?;
    print!("{}", events_text(&events));
    Ok(ExitCode::SUCCESS)
}

/// The `Events:` table, as `kubectl describe` prints it: type, reason, age, message.
fn events_text(events: &JobEventList) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        ["Type", "Reason", "Age", "Message"]
            .map(String::from)
            .to_vec(),
    ];
    for e in &events.events {
        rows.push(vec![
            if e.warning { "Warning" } else { "Normal" }.to_string(),
            e.kind.clone(),
            age(e.at),
            e.message.clone(),
        ]);
    }
    let cols = 3;
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::from("Events:\n");
    for r in &rows {
        out.push_str("  ");
        for (c, w) in widths.iter().enumerate() {
            out.push_str(&format!("{:<w$}   ", r[c]));
        }
        out.push_str(&r[3]);
        out.push('\n');
    }
    out
}

/// A program on one line: words as they are, others quoted with their newlines escaped,
/// long ones cut.
fn argv_text(argv: &[String]) -> String {
    const LONGEST: usize = 60;
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_graphic() && c != '\'' && c != '"')
            {
                return a.clone();
            }
            let quoted = format!("{a:?}");
            if quoted.chars().count() > LONGEST {
                let cut: String = quoted.chars().take(LONGEST).collect();
                format!("{cut}...\" ({} lines)", a.lines().count())
            } else {
                quoted
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A time as a date in local time, and how long ago (`2026-11-25T17:34:05 (20s ago)`).
fn time_text(t: Option<u64>) -> String {
    let clock = cadre_slurm_commands::local_clock();
    t.map_or_else(
        || "-".into(),
        |s| {
            let date = i64::try_from(s)
                .map(|e| cadre_slurm::time::format_timestamp(e, &clock))
                .unwrap_or_else(|_| s.to_string());
            format!("{date} ({} ago)", age(s))
        },
    )
}

/// `describe`'s text: the object, the job, the translation, where each rank runs, and how.
fn describe_text(
    job: &JobView,
    t: &Translated,
    run: &RunSpec,
    nodes: &NodeList,
    all: &[JobView],
) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let id = Identity::of(job).unwrap_or_else(|| Identity::of_translated(t));
    let _ = writeln!(s, "Name:         {}", t.name);
    let _ = writeln!(s, "Namespace:    {}", t.namespace);
    let _ = writeln!(s, "Kind:         {} ({})", id.kind, id.api_version);
    let _ = writeln!(s, "Job:          {}", job.id);
    if all.len() > 1 {
        let earlier: Vec<String> = all[..all.len() - 1]
            .iter()
            .map(|j| format!("{} ({})", j.id, j.state))
            .collect();
        let _ = writeln!(s, "Earlier jobs: {}", earlier.join(", "));
    }
    let _ = writeln!(s, "State:        {}", job.state);
    if job.state == JobState::Pending {
        let _ = writeln!(s, "Reason:       {}", job.reason);
    }
    let _ = writeln!(s, "User:         {} (account {})", job.user, job.account);
    let _ = writeln!(s, "Partition:    {}", job.partition);
    if let Some(q) = job.spec.as_ref().and_then(|sp| sp.queue.as_ref()) {
        let _ = writeln!(s, "Queue:        {q}");
    }
    if let Some(c) = job.spec.as_ref().and_then(|sp| sp.priority_class.as_ref()) {
        let _ = writeln!(s, "Priority:     class {c}");
    }
    if let Some(l) = t.spec.annotations.get("k8s.limitRanges") {
        let _ = writeln!(s, "LimitRanges:  {l} (their defaults and bounds applied)");
    }
    let _ = writeln!(s, "Submitted:    {}", time_text(Some(job.submit_time)));
    let _ = writeln!(s, "Started:      {}", time_text(job.start_time));
    let _ = writeln!(s, "Ended:        {}", time_text(job.end_time));
    if let Some(code) = job.exit_code {
        let _ = writeln!(s, "Exit code:    {code}");
    }
    let limit = if job.time_limit == 0 {
        "none".to_string()
    } else {
        format!("{} s", job.time_limit)
    };
    let _ = writeln!(s, "Time limit:   {limit}");
    let done = match &run.completing_groups {
        None => "when every task has exited 0".to_string(),
        Some(groups) => {
            let names: Vec<String> = groups
                .iter()
                .filter_map(|&g| t.spec.groups.get(usize::from(g)).map(|x| x.name.clone()))
                .collect();
            format!(
                "when the tasks of {} have exited 0; the others are then stopped",
                names.join(", ")
            )
        }
    };
    let _ = writeln!(s, "Succeeds:     {done}");
    let runs = if t.containers {
        format!(
            "in containers, each task in its group's image, as user {}, in the container \
             runtime of nodes that have one (node feature `{}`); output files in {}",
            job.user,
            cadre_k8s::CONTAINER_RUNTIME_FEATURE,
            t.submit_dir.display()
        )
    } else if nodes.nodes.iter().any(|n| n.container_runtime.is_some()) {
        format!(
            "on the host, as user {}, not in a container: applied with `--run-in host` \
             (images are recorded, not used)",
            job.user
        )
    } else {
        format!(
            "on the host, as user {}, not in a container: no container runtime is configured \
             (images are recorded, not used)",
            job.user
        )
    };
    let _ = writeln!(s, "Runs:         {runs}");
    let _ = writeln!(s, "Groups:");
    for (g, (group, gr)) in t.spec.groups.iter().zip(&t.groups).enumerate() {
        let count = match group.min_count {
            Some(m) if m < group.count => format!("{m} to {}", group.count),
            _ => group.count.to_string(),
        };
        let program = argv_text(&gr.program.words());
        let _ = writeln!(
            s,
            "  {g} {} ({}) x{count}: {} core(s), {} MiB, {} GPU(s) per task",
            group.name,
            gr.replica_type,
            group.per_task.cpus,
            group.per_task.mem_mib,
            group.per_task.gpus
        );
        let _ = writeln!(s, "      program:  {program}");
        let dir = match (&gr.work_dir, t.containers) {
            (None, true) => "(the image's working directory)".to_string(),
            _ => t.work_dir(g).unwrap_or_default().display().to_string(),
        };
        let _ = writeln!(s, "      in:       {dir}");
        if let Some(image) = &gr.image {
            let how = match gr.pull_policy {
                Some(cadre_k8s::PullPolicy::Always) if t.containers => "pulled at every start",
                Some(cadre_k8s::PullPolicy::IfNotPresent) if t.containers => {
                    "pulled when the node lacks it"
                }
                Some(cadre_k8s::PullPolicy::Never) if t.containers => "never pulled",
                _ => "recorded",
            };
            let _ = writeln!(s, "      image:    {image} ({how})");
        }
        if !gr.env.is_empty() {
            let names: Vec<&str> = gr.env.iter().map(|e| e.name.as_str()).collect();
            let _ = writeln!(s, "      env:      {}", names.join(", "));
        }
    }
    if let Some(alloc) = &job.allocation {
        let _ = writeln!(s, "Ranks:");
        let mut tasks: Vec<_> = alloc.tasks.iter().collect();
        tasks.sort_by_key(|x| (x.group, x.rank));
        for (rank, task) in tasks.iter().enumerate() {
            let node = nodes
                .nodes
                .get(task.node.0 as usize)
                .map_or_else(|| format!("node id {}", task.node.0), |n| n.name.clone());
            let g = usize::from(task.group);
            let names = cadre_k8s::dns_names(t, g, task.rank);
            let _ = writeln!(
                s,
                "  {rank:<4} {:<28} on {node}{}",
                cadre_k8s::pod_name(t, g, task.rank),
                if names.len() > 1 {
                    format!(" ({})", names[1])
                } else {
                    String::new()
                }
            );
        }
    }
    if !t.services.is_empty() {
        let _ = writeln!(s, "Services:");
        for svc in &t.services {
            let to = cadre_k8s::contract::first_selected(svc, t)
                .map(|(g, i)| cadre_k8s::pod_name(t, g, i))
                .unwrap_or_else(|| "no pod".into());
            let _ = writeln!(
                s,
                "  {} ({}): selector {}, ports {}; its name resolves to the node of {to}",
                svc.name,
                if svc.headless {
                    "headless"
                } else {
                    "ClusterIP"
                },
                cadre_k8s::service::selector_text(svc),
                cadre_k8s::service::ports_text(svc),
            );
        }
    }
    if matches!(t.kind, cadre_k8s::WorkloadKind::MpiJob { .. }) {
        let holding: Vec<&str> = t
            .spec
            .groups
            .iter()
            .enumerate()
            .filter(|(g, _)| cadre_k8s::holds_for_rsh(t, *g))
            .map(|(_, g)| g.name.as_str())
            .collect();
        let _ = writeln!(
            s,
            "MPI:          mpirun reaches the workers through cadre-rsh (OMPI_MCA_plm_rsh_agent and the like), which starts its daemons as steps of the job on the workers' nodes{}{}",
            if t.containers {
                ", inside the workers' containers"
            } else {
                ""
            },
            match (holding.is_empty(), t.containers) {
                (true, _) => String::new(),
                (false, false) => format!(
                    "; {} run no sshd: their nodes hold their share",
                    holding.join(", ")
                ),
                (false, true) => format!(
                    "; {} run no sshd: their containers wait for the daemons",
                    holding.join(", ")
                ),
            }
        );
    } else if let Some(ssh) = &t.ssh {
        let _ = writeln!(
            s,
            "Note:         the manifest expects passwordless ssh between its tasks (keys at {}); cadre makes none: tasks use their nodes' network, whose ssh port is the node's own",
            ssh.mount_path,
        );
    }
    s
}
