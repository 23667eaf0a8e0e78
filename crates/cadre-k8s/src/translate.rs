//! Workload manifests into gangs.
//!
//! **Given** an [`Object`] of a workload kind and the [`TranslateOptions`]. **Decided**: the
//! job's task groups (one per replica type, in the rank order of the kind's contract), the
//! per-task resources, placement constraints, queue, priority, time limit, hold, what each
//! group runs, when the job has succeeded, and what is recorded. **Must hold**: every field
//! of the manifest is used, recorded as having no meaning outside Kubernetes, or refused
//! with its path; the gang starts whole, so a manifest whose pods Kubernetes would run a few
//! at a time (`parallelism` below `completions`) is refused rather than run differently.
//!
//! Whole-job settings that Kubernetes states per pod template are merged: node selectors
//! are united (two templates asking different values of one label are refused), one task
//! per node and the topology span apply to the whole job if any template asks (the
//! strictest span wins), priority classes must agree, and the time limit is the smallest
//! deadline given.

use crate::crd::kubeflow::{MpiJob, PyTorchJob, ReplicaSpec, RunPolicy};
use crate::crd::volcano::{LifecyclePolicy, VolcanoJob};
use crate::crd::{jobset::JobSet, volcano};
use crate::document::{Object, describe_name};
use crate::error::{K8sError, Refusals};
use crate::model::{
    CONTAINER_RUNTIME_FEATURE, Completion, ElasticContract, GroupRun, MpiImplementation,
    PyTorchContract, QueueRef, SshKeys, TranslateOptions, Translated, WorkloadKind,
};
use crate::names::is_dns_label;
use crate::namespaces::{LimitRangeConfig, limit_container};
use crate::pod::{
    PRIORITY_LABEL, PodPieces, PodRole, QUEUE_LABEL, SpanReq, is_scheduler_key, read_pod_template,
};
use cadre_core::job::{JobSpec, NetworkSpan, NumaPolicy, RequeuePolicy, TaskGroup, TopologyReq};
use cadre_core::time::{Dur, Time};
use k8s_openapi::api::batch::v1::JobSpec as K8sJobSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// The default port of PyTorchJob's `pytorchjob-port`.
pub const PYTORCH_DEFAULT_PORT: u16 = 23456;
/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECS: u64 = 30;

/// Translates one workload object. Queue objects and templates are refused here (see
/// [`crate::queues`] for queues).
pub fn translate(object: &Object, opts: &TranslateOptions) -> Result<Translated, K8sError> {
    match object {
        Object::Job(j) => translate_job(j, opts),
        Object::JobSet(j) => translate_jobset(j, opts),
        Object::MpiJob(j) => translate_mpijob(j, opts),
        Object::PyTorchJob(j) => translate_pytorchjob(j, opts),
        Object::VolcanoJob(j) => translate_volcano_job(j, opts),
        Object::ClusterTrainingRuntime(_) => {
            let mut r = Refusals::default();
            r.refuse(
                "kind",
                "a ClusterTrainingRuntime is the template a Kubeflow Trainer v2 TrainJob runs \
                 from, and cadre does not run TrainJobs yet, so it has no use for one",
            );
            Err(r.into_error(&object.describe()))
        }
        Object::Service(_) | Object::ConfigMap(_) | Object::Secret(_) => {
            let mut r = Refusals::default();
            r.refuse(
                "kind",
                "not a workload: Services, ConfigMaps and Secrets are read by \
                 cadre_k8s::service and cadre_k8s::config and kept with the workloads that \
                 use them",
            );
            Err(r.into_error(&object.describe()))
        }
        _ => {
            let mut r = Refusals::default();
            r.refuse(
                "kind",
                "not a workload: queue objects become queues, namespace objects quotas, \
                 limits and priority classes (see cadre_k8s::queues)",
            );
            Err(r.into_error(&object.describe()))
        }
    }
}

/// One task group being built: its pod pieces and counts.
struct Group {
    name: String,
    count: u32,
    min_count: Option<u32>,
    pieces: PodPieces,
    path: String,
}

/// The job-wide parts being gathered.
struct Builder<'a> {
    opts: &'a TranslateOptions,
    object: String,
    refusals: Refusals,
    notes: BTreeMap<String, String>,
    name: String,
    namespace: String,
    queue: Option<QueueRef>,
    priority_class: Option<(String, String)>,
    deadline: Option<u64>,
    hold: bool,
    numa: NumaPolicy,
}

impl<'a> Builder<'a> {
    fn new(kind: &str, api_version: &str, meta: &ObjectMeta, opts: &'a TranslateOptions) -> Self {
        let object = format!("{kind} `{}`", describe_name(meta));
        let mut b = Builder {
            opts,
            object,
            refusals: Refusals::default(),
            notes: BTreeMap::new(),
            name: String::new(),
            namespace: meta
                .namespace
                .clone()
                .unwrap_or_else(|| opts.default_namespace.clone()),
            queue: None,
            priority_class: None,
            deadline: None,
            hold: false,
            numa: NumaPolicy::None,
        };
        b.notes.insert("k8s.kind".into(), kind.into());
        b.notes.insert("k8s.apiVersion".into(), api_version.into());
        b.notes.insert("k8s.namespace".into(), b.namespace.clone());
        b.read_metadata(meta);
        b
    }

    fn refuse(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.refusals.refuse(path, reason);
    }

    fn read_metadata(&mut self, meta: &ObjectMeta) {
        match (&meta.name, &meta.generate_name) {
            (Some(n), _) => {
                if !is_dns_label(n) {
                    self.refuse(
                        "metadata.name",
                        format!(
                            "`{n}` cannot name the job's tasks: it must be a DNS label (lowercase \
                             letters, digits and `-`, at most 63 characters, starting and ending \
                             with a letter or digit)"
                        ),
                    );
                }
                self.name = n.clone();
            }
            (None, Some(prefix)) => match self.opts.generated_suffix.clone() {
                // As the API server does: the prefix cut to leave room for the suffix.
                Some(suffix) => {
                    let keep = 63usize.saturating_sub(suffix.len());
                    let cut: String = prefix.chars().take(keep).collect();
                    let n = format!("{cut}{suffix}");
                    if !is_dns_label(&n) {
                        self.refuse(
                            "metadata.generateName",
                            format!(
                                "`{prefix}` makes names such as `{n}`, which cannot name the job's \
                                 tasks: a name must be a DNS label (lowercase letters, digits \
                                 and `-`, at most 63 characters, starting and ending with a \
                                 letter or digit)"
                            ),
                        );
                    }
                    self.name = n;
                }
                None => self.refuse(
                    "metadata.generateName",
                    "needs metadata.name where no name is generated for it (`cadre apply` generates one)",
                ),
            },
            (None, None) => self.refuse("metadata.name", "missing"),
        }
        if let Some(ns) = &meta.namespace
            && !is_dns_label(ns)
        {
            self.refuse("metadata.namespace", format!("`{ns}` is not a DNS label"));
        }
        for (k, v) in meta.labels.iter().flatten() {
            let p = format!("metadata.labels[{k}]");
            match k.as_str() {
                QUEUE_LABEL => {
                    self.queue = Some(QueueRef::Kueue {
                        namespace: self.namespace.clone(),
                        local_queue: v.clone(),
                    });
                }
                PRIORITY_LABEL => self.priority(v, &p),
                _ if is_scheduler_key(k) => self.refuse(
                    p,
                    "this scheduler label is not supported (cadre reads \
                     kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class)",
                ),
                _ => {
                    self.notes.insert(format!("k8s.label/{k}"), v.clone());
                }
            }
        }
        for (k, v) in meta.annotations.iter().flatten() {
            if is_scheduler_key(k) {
                self.refuse(
                    format!("metadata.annotations[{k}]"),
                    "this scheduler annotation is not supported",
                );
            } else {
                self.notes.insert(format!("k8s.annotation/{k}"), v.clone());
            }
        }
    }

    fn priority(&mut self, class: &str, path: &str) {
        match &self.priority_class {
            Some((c, first)) if c != class => {
                let reason = format!(
                    "priority class `{class}` differs from `{c}` given at {first}; a job has one"
                );
                self.refuse(path, reason);
            }
            Some(_) => {}
            None => self.priority_class = Some((class.to_string(), path.to_string())),
        }
    }

    fn deadline(&mut self, secs: Option<i64>, path: &str) {
        match secs.map(u64::try_from) {
            None => {}
            Some(Ok(s)) if s > 0 => {
                self.deadline = Some(self.deadline.map_or(s, |d| d.min(s)));
            }
            Some(_) => self.refuse(path, "must be a positive number of seconds"),
        }
    }

    fn queue_direct(&mut self, queue: &str, path: &str) {
        match &self.queue {
            Some(QueueRef::Kueue { local_queue, .. }) => {
                let reason = format!(
                    "the job names queue `{queue}` here and Kueue LocalQueue `{local_queue}` in \
                     its kueue.x-k8s.io/queue-name label; name one"
                );
                self.refuse(path, reason);
            }
            _ => {
                self.queue = Some(QueueRef::Direct {
                    queue: queue.to_string(),
                })
            }
        }
    }

    fn note(&mut self, key: &str, value: impl ToString) {
        self.notes.insert(format!("k8s.{key}"), value.to_string());
    }

    /// Reads a pod template into a group.
    fn pod(
        &mut self,
        t: &PodTemplateSpec,
        path: &str,
        group: &str,
        role: PodRole,
        implicit_labels: &[(&str, &str)],
    ) -> PodPieces {
        let ranges: Vec<&LimitRangeConfig> = self
            .opts
            .limit_ranges
            .iter()
            .filter(|l| l.namespace == self.namespace)
            .collect();
        let limited;
        let t = if ranges.is_empty() {
            t
        } else {
            let names: Vec<&str> = ranges.iter().map(|l| l.name.as_str()).collect();
            self.note("limitRanges", names.join(","));
            let mut copy = t.clone();
            for (i, c) in copy
                .spec
                .iter_mut()
                .flat_map(|s| s.containers.iter_mut())
                .enumerate()
            {
                c.resources = limit_container(
                    c.resources.as_ref(),
                    &ranges,
                    &format!("{path}.spec.containers[{i}]"),
                    &mut self.refusals,
                );
            }
            limited = copy;
            &limited
        };
        read_pod_template(
            t,
            path,
            group,
            role,
            implicit_labels,
            self.opts,
            &mut self.refusals,
            &mut self.notes,
        )
    }

    /// Kubeflow's `runPolicy` (MPIJob, PyTorchJob). Returns `schedulingPolicy.minAvailable`.
    fn run_policy(&mut self, rp: &RunPolicy, operator: &str) -> Option<i32> {
        let RunPolicy {
            clean_pod_policy,
            ttl_seconds_after_finished: _,
            active_deadline_seconds,
            backoff_limit,
            scheduling_policy,
            suspend,
            managed_by,
        } = rp;
        if let Some(c) = clean_pod_policy {
            // cadre stops every task of a job that has ended, whatever the policy.
            self.note("cleanPodPolicy", c);
        }
        self.deadline(
            *active_deadline_seconds,
            "spec.runPolicy.activeDeadlineSeconds",
        );
        if let Some(b) = backoff_limit {
            self.note("backoffLimit", b);
        }
        self.hold |= *suspend == Some(true);
        if let Some(m) = managed_by
            && m != operator
        {
            self.refuse(
                "spec.runPolicy.managedBy",
                format!("`{m}`: the job is managed by another controller, not by cadre"),
            );
        }
        let sp = scheduling_policy.as_ref()?;
        if let Some(q) = &sp.queue {
            self.queue_direct(q, "spec.runPolicy.schedulingPolicy.queue");
        }
        if let Some(pc) = &sp.priority_class {
            self.priority(pc, "spec.runPolicy.schedulingPolicy.priorityClass");
        }
        // minResources: cadre computes the gang's total itself.
        if let Some(t) = sp.schedule_timeout_seconds {
            self.note("scheduleTimeoutSeconds", t);
        }
        sp.min_available
    }

    /// Builds the result from the groups.
    fn finish(
        mut self,
        kind: WorkloadKind,
        groups: Vec<Group>,
        completion: Completion,
        ssh: Option<SshKeys>,
    ) -> Result<Translated, K8sError> {
        if groups.is_empty() && self.refusals.is_empty() {
            self.refuse("spec", "no tasks: every replica count is 0");
        }
        let mut node_selector: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut one_task_per_node = false;
        let mut span: Option<SpanReq> = None;
        let mut kill_wait = DEFAULT_GRACE_SECS;
        let mut task_groups = Vec::new();
        let mut runs = Vec::new();
        for g in groups {
            let p = g.pieces;
            for (k, v) in &p.node_selector {
                match node_selector.get(k) {
                    Some((other, at)) if other != v => {
                        let reason = format!(
                            "node label `{k}` is asked to be `{v}` here and `{other}` by {at}; \
                             cadre's node selector applies to the whole job"
                        );
                        self.refuse(format!("{}.spec.nodeSelector", g.path), reason);
                    }
                    Some(_) => {}
                    None => {
                        node_selector.insert(k.clone(), (v.clone(), g.path.clone()));
                    }
                }
            }
            one_task_per_node |= p.one_task_per_node;
            match p.span {
                Some(SpanReq::Node) => {}
                Some(s) => span = Some(span.map_or(s, |t| t.max(s))),
                None => {}
            }
            if let Some(pc) = &p.priority_class {
                self.priority(pc, &format!("{}.spec.priorityClassName", g.path));
            }
            if let Some(d) = p.deadline_secs {
                self.deadline = Some(self.deadline.map_or(d, |x| x.min(d)));
            }
            if let Some(w) = p.kill_wait_secs {
                kill_wait = kill_wait.max(w);
            }
            if let Some(r) = &p.restart_policy {
                self.notes
                    .insert(format!("k8s.{}.restartPolicy", g.name), r.clone());
            }
            task_groups.push(TaskGroup {
                name: g.name.clone(),
                count: g.count,
                min_count: g.min_count,
                per_task: p.resources,
                tasks_per_node: None,
                nodes: (p.span == Some(SpanReq::Node)).then_some(1),
            });
            let mut run = p.run.unwrap_or_else(GroupRun::empty);
            run.replica_type = g.name.clone();
            runs.push(run);
        }
        if self.opts.submit_dir.is_relative() {
            self.refuse(
                "(options)",
                format!(
                    "the submission directory `{}` is not absolute",
                    self.opts.submit_dir.display()
                ),
            );
        }
        let object = self.object.clone();
        if !self.refusals.is_empty() {
            return Err(self.refusals.into_error(&object));
        }
        let queue = match &self.queue {
            Some(QueueRef::Direct { queue }) => Some(queue.clone()),
            Some(QueueRef::Kueue {
                namespace,
                local_queue,
            }) => {
                self.notes.insert(
                    "k8s.kueue.localQueue".into(),
                    format!("{namespace}/{local_queue}"),
                );
                None
            }
            None => None,
        };
        let spec = JobSpec {
            name: self.name.clone(),
            user: self.opts.user.clone(),
            account: self.opts.account.clone(),
            partition: None,
            qos: None,
            queue,
            priority_class: self.priority_class.map(|(c, _)| c),
            namespace: Some(self.namespace.clone()),
            nice: 0,
            time_limit: Dur(self.deadline.unwrap_or(0)),
            submit_time: Time(0),
            begin: None,
            hold: self.hold,
            groups: task_groups,
            dependencies: Vec::new(),
            dependencies_any: false,
            array: None,
            exclusive: false,
            preemptible: true,
            requeue: RequeuePolicy::Requeue,
            topology: TopologyReq {
                numa: self.numa,
                span: match span {
                    Some(SpanReq::Leaf) => NetworkSpan::OneLeaf,
                    Some(SpanReq::Block) => NetworkSpan::OneBlock,
                    _ => NetworkSpan::Any,
                },
            },
            features: if self.opts.container_runtime {
                vec![CONTAINER_RUNTIME_FEATURE.to_string()]
            } else {
                Vec::new()
            },
            node_selector: node_selector
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect(),
            one_task_per_node,
            annotations: self.notes,
        };
        Ok(Translated {
            kind,
            name: self.name,
            namespace: self.namespace,
            spec,
            groups: runs,
            queue: self.queue,
            completion,
            ssh,
            kill_wait_secs: kill_wait,
            submit_dir: self.opts.submit_dir.clone(),
            containers: self.opts.container_runtime,
            host_path: self
                .opts
                .path
                .clone()
                .filter(|_| !self.opts.container_runtime),
            services: Vec::new(),
            config_maps: Default::default(),
            secrets: Default::default(),
        })
    }
}

fn count(v: Option<i32>, default: u32, path: &str, r: &mut Refusals) -> u32 {
    match v.map(u32::try_from) {
        None => default,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            r.refuse(path, "must not be negative");
            0
        }
    }
}

/// The shape of a batch/v1 Job's pods.
struct JobShape {
    tasks: u32,
    indexed: bool,
}

/// A batch/v1 JobSpec's fields other than the template; `path` is where the spec is.
/// `default_indexed`: JobSet makes its child Jobs Indexed unless they say otherwise.
fn read_job_spec(b: &mut Builder, s: &K8sJobSpec, path: &str, default_indexed: bool) -> JobShape {
    let K8sJobSpec {
        active_deadline_seconds,
        backoff_limit,
        backoff_limit_per_index,
        completion_mode,
        completions,
        managed_by,
        manual_selector,
        max_failed_indexes,
        parallelism,
        pod_failure_policy,
        pod_replacement_policy,
        selector: _, // generated by the cluster unless manualSelector
        success_policy,
        suspend,
        template: _, // read by the caller
        ttl_seconds_after_finished: _,
    } = s;
    let at = |f: &str| format!("{path}.{f}");
    b.deadline(*active_deadline_seconds, &at("activeDeadlineSeconds"));
    if let Some(l) = backoff_limit {
        b.note("backoffLimit", l);
    }
    for (f, set) in [
        ("backoffLimitPerIndex", backoff_limit_per_index.is_some()),
        ("maxFailedIndexes", max_failed_indexes.is_some()),
        ("podFailurePolicy", pod_failure_policy.is_some()),
        ("successPolicy", success_policy.is_some()),
    ] {
        if set {
            b.refuse(
                at(f),
                "per-index failure and success policies are not supported: a cadre job \
                 succeeds when all its tasks do and fails with its first failed task",
            );
        }
    }
    if let Some(m) = managed_by
        && m != "kubernetes.io/job-controller"
    {
        b.refuse(
            at("managedBy"),
            format!("`{m}`: managed by another controller, not by cadre"),
        );
    }
    if *manual_selector == Some(true) {
        b.refuse(
            at("manualSelector"),
            "manual pod selectors are not supported",
        );
    }
    if let Some(p) = pod_replacement_policy {
        b.note("podReplacementPolicy", p);
    }
    b.hold |= *suspend == Some(true);
    let indexed = match completion_mode.as_deref() {
        None => default_indexed,
        Some("Indexed") => true,
        Some("NonIndexed") => false,
        Some(other) => {
            b.refuse(at("completionMode"), format!("unknown mode `{other}`"));
            false
        }
    };
    let completions_v = completions.map(|c| count(Some(c), 0, &at("completions"), &mut b.refusals));
    let parallelism_v = count(*parallelism, 1, &at("parallelism"), &mut b.refusals);
    let tasks = match (completions_v, indexed) {
        // Kubernetes defaults both to 1 when neither is given.
        (None, _) if parallelism.is_none() => 1,
        (None, true) => {
            b.refuse(at("completions"), "an Indexed Job needs completions");
            0
        }
        (None, false) if parallelism_v > 1 => {
            b.refuse(
                at("parallelism"),
                "a work-queue Job (parallelism without completions) succeeds when any pod does, \
                 which a gang does not express; give completions equal to parallelism",
            );
            0
        }
        (None, false) => 1,
        (Some(0), _) => {
            b.refuse(at("completions"), "0 completions: nothing to run");
            0
        }
        (Some(c), _) if parallelism_v < c => {
            b.refuse(
                at("parallelism"),
                format!(
                    "parallelism {parallelism_v}{} is below completions {c}: Kubernetes runs \
                     the pods {parallelism_v} at a time, which is not a gang; cadre starts all \
                     {c} at once, so set parallelism to {c} (for independent tasks run a few at \
                     a time, submit a job array instead)",
                    if parallelism.is_none() {
                        " (the default)"
                    } else {
                        ""
                    }
                ),
            );
            0
        }
        (Some(c), _) => c,
    };
    JobShape { tasks, indexed }
}

fn translate_job(
    job: &k8s_openapi::api::batch::v1::Job,
    opts: &TranslateOptions,
) -> Result<Translated, K8sError> {
    let mut b = Builder::new("Job", "batch/v1", &job.metadata, opts);
    let Some(spec) = &job.spec else {
        b.refuse("spec", "missing");
        return Err(b.refusals.into_error(&b.object));
    };
    let shape = read_job_spec(&mut b, spec, "spec", false);
    let role = PodRole {
        mpi_worker: false,
        indexed: shape.indexed,
    };
    let name = b.name.clone();
    let labels = [
        ("batch.kubernetes.io/job-name", name.as_str()),
        ("job-name", name.as_str()),
    ];
    let pieces = b.pod(&spec.template, "spec.template", "task", role, &labels);
    if pieces.hostname.is_some() {
        b.refuse(
            "spec.template.spec.hostname",
            "the pods of a job cannot share one hostname (an Indexed Job's are `<job>-<index>`)",
        );
    }
    let subdomain = pieces.subdomain.clone();
    let groups = vec![Group {
        name: "task".into(),
        count: shape.tasks,
        min_count: None,
        pieces,
        path: "spec.template".into(),
    }];
    b.finish(
        WorkloadKind::Job {
            indexed: shape.indexed,
            subdomain,
        },
        groups,
        Completion::AllTasks,
        None,
    )
}

fn translate_jobset(js: &JobSet, opts: &TranslateOptions) -> Result<Translated, K8sError> {
    let mut b = Builder::new("JobSet", &js.api_version, &js.metadata, opts);
    let s = &js.spec;
    let dns = s
        .network
        .as_ref()
        .and_then(|n| n.enable_dns_hostnames)
        .unwrap_or(true);
    let subdomain = dns.then(|| {
        s.network
            .as_ref()
            .and_then(|n| n.subdomain.clone())
            .unwrap_or_else(|| b.name.clone())
    });
    if let Some(sp) = &s.startup_policy
        && sp
            .startup_policy_order
            .as_deref()
            .is_some_and(|o| o != "AnyOrder")
    {
        b.refuse(
            "spec.startupPolicy.startupPolicyOrder",
            "ordered start is not supported: cadre starts every task of a gang at once",
        );
    }
    if let Some(fp) = &s.failure_policy {
        if fp.rules.as_ref().is_some_and(|r| !r.is_empty()) {
            b.refuse(
                "spec.failurePolicy.rules",
                "failure policy rules are not supported",
            );
        }
        if let Some(m) = fp.max_restarts {
            b.note("maxRestarts", m);
        }
    }
    if s.coordinator.is_some() {
        b.refuse("spec.coordinator", "not supported");
    }
    if let Some(m) = &s.managed_by
        && m != "jobset.sigs.k8s.io/jobset-controller"
    {
        b.refuse(
            "spec.managedBy",
            format!("`{m}`: managed by another controller, not by cadre"),
        );
    }
    b.hold |= s.suspend == Some(true);
    let mut groups = Vec::new();
    let mut completions = Vec::new();
    let mut indexed = Vec::new();
    for (i, rj) in s.replicated_jobs.iter().enumerate() {
        let path = format!("spec.replicatedJobs[{i}]");
        if rj.depends_on.is_some() {
            b.refuse(
                format!("{path}.dependsOn"),
                "ordered start is not supported",
            );
        }
        if let Some(g) = &rj.group_name {
            b.note(&format!("{}.groupName", rj.name), g);
        }
        let replicas = count(rj.replicas, 1, &format!("{path}.replicas"), &mut b.refusals);
        if let Some(meta) = &rj.template.metadata {
            for (k, v) in meta
                .labels
                .iter()
                .flatten()
                .chain(meta.annotations.iter().flatten())
            {
                if is_scheduler_key(k) {
                    b.refuse(
                        format!("{path}.template.metadata[{k}]"),
                        "not supported here",
                    );
                } else {
                    b.note(&format!("{}.jobLabel/{k}", rj.name), v);
                }
            }
        }
        let Some(js) = &rj.template.spec else {
            b.refuse(format!("{path}.template.spec"), "missing");
            continue;
        };
        let shape = read_job_spec(&mut b, js, &format!("{path}.template.spec"), true);
        let role = PodRole {
            mpi_worker: false,
            indexed: shape.indexed,
        };
        let tpath = format!("{path}.template.spec.template");
        let jsname = b.name.clone();
        let labels = [
            ("jobset.sigs.k8s.io/jobset-name", jsname.as_str()),
            ("jobset.sigs.k8s.io/replicatedjob-name", rj.name.as_str()),
        ];
        let pieces = b.pod(&js.template, &tpath, &rj.name, role, &labels);
        if pieces.hostname.is_some() || pieces.subdomain.is_some() {
            b.refuse(
                format!("{tpath}.spec"),
                "JobSet names its pods; remove hostname and subdomain",
            );
        }
        if replicas == 0 || shape.tasks == 0 {
            continue;
        }
        completions.push(shape.tasks);
        indexed.push(shape.indexed);
        groups.push(Group {
            name: rj.name.clone(),
            count: replicas.saturating_mul(shape.tasks),
            min_count: None,
            pieces,
            path: tpath,
        });
    }
    let completion = match &s.success_policy {
        None => Completion::AllTasks,
        Some(sp) => {
            let targets: Vec<usize> = match &sp.target_replicated_jobs {
                None => Vec::new(),
                Some(t) => t
                    .iter()
                    .filter_map(|name| {
                        let i = groups.iter().position(|g| &g.name == name);
                        if i.is_none() {
                            b.refuse(
                                "spec.successPolicy.targetReplicatedJobs",
                                format!("`{name}` is not a replicated job with tasks"),
                            );
                        }
                        i
                    })
                    .collect(),
            };
            match sp.operator.as_deref() {
                None | Some("All") if targets.is_empty() => Completion::AllTasks,
                None | Some("All") => Completion::Groups(targets),
                Some("Any") if targets.len() == 1 && groups[targets[0]].count == 1 => {
                    Completion::Groups(targets)
                }
                Some(op) => {
                    b.refuse(
                        "spec.successPolicy",
                        format!(
                            "operator `{op}` over several jobs is not supported (cadre ends a job \
                             when all tasks of named groups succeed)"
                        ),
                    );
                    Completion::AllTasks
                }
            }
        }
    };
    b.finish(
        WorkloadKind::JobSet {
            completions,
            indexed,
            subdomain,
        },
        groups,
        completion,
        None,
    )
}

fn replica_restart(b: &mut Builder, r: &ReplicaSpec, group: &str) {
    if let Some(p) = &r.restart_policy {
        // Restarts on failure are recorded, not acted on: a failed task fails the job.
        b.note(&format!("{group}.replicaRestartPolicy"), p);
    }
}

fn no_naming_overrides(b: &mut Builder, p: &PodPieces, path: &str, operator: &str) {
    if p.hostname.is_some() || p.subdomain.is_some() {
        b.refuse(
            format!("{path}.spec"),
            format!("the {operator} names the pods; remove hostname and subdomain"),
        );
    }
}

fn translate_mpijob(j: &MpiJob, opts: &TranslateOptions) -> Result<Translated, K8sError> {
    let mut b = Builder::new("MPIJob", &j.api_version, &j.metadata, opts);
    let s = &j.spec;
    let min_available = b.run_policy(&s.run_policy, "kubeflow.org/mpi-operator");
    let slots = match s.slots_per_worker.map(u32::try_from) {
        None => 1,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            b.refuse("spec.slotsPerWorker", "must be at least 1");
            1
        }
    };
    let implementation = match s.mpi_implementation.as_deref() {
        None | Some("OpenMPI") => MpiImplementation::OpenMpi,
        Some("Intel") => MpiImplementation::Intel,
        Some("MPICH") => MpiImplementation::Mpich,
        Some(other) => {
            b.refuse(
                "spec.mpiImplementation",
                format!("`{other}`: the MPI Operator knows OpenMPI, Intel and MPICH"),
            );
            MpiImplementation::OpenMpi
        }
    };
    match s.launcher_creation_policy.as_deref() {
        None | Some("AtStartup") => {}
        // A gang starts all its tasks at once; the launcher's ssh retries
        // (ConnectionAttempts=10) cover workers that are a moment late.
        Some("WaitForWorkersReady") => b.note("launcherCreationPolicy", "WaitForWorkersReady"),
        Some(other) => b.refuse(
            "spec.launcherCreationPolicy",
            format!("unknown policy `{other}`"),
        ),
    }
    let run_launcher_as_worker = s.run_launcher_as_worker == Some(true);
    let mount = s
        .ssh_auth_mount_path
        .clone()
        .unwrap_or_else(|| "/root/.ssh".into());
    let mut groups = Vec::new();
    match &s.mpi_replica_specs.launcher {
        None => b.refuse(
            "spec.mpiReplicaSpecs.Launcher",
            "an MPIJob needs a launcher",
        ),
        Some(l) => {
            let n = count(
                l.replicas,
                1,
                "spec.mpiReplicaSpecs.Launcher.replicas",
                &mut b.refusals,
            );
            if n != 1 {
                b.refuse(
                    "spec.mpiReplicaSpecs.Launcher.replicas",
                    "an MPIJob has one launcher",
                );
            }
            replica_restart(&mut b, l, "launcher");
            let path = "spec.mpiReplicaSpecs.Launcher.template";
            let labels = kubeflow_labels(&b.name, "mpi-operator", "launcher", true);
            let pieces = b.pod(
                &l.template,
                path,
                "launcher",
                PodRole::default(),
                &as_refs(&labels),
            );
            no_naming_overrides(&mut b, &pieces, path, "MPI Operator");
            groups.push(Group {
                name: "launcher".into(),
                count: 1,
                min_count: None,
                pieces,
                path: path.into(),
            });
        }
    }
    if let Some(w) = &s.mpi_replica_specs.worker {
        let n = count(
            w.replicas,
            0,
            "spec.mpiReplicaSpecs.Worker.replicas",
            &mut b.refusals,
        );
        replica_restart(&mut b, w, "worker");
        let path = "spec.mpiReplicaSpecs.Worker.template";
        let role = PodRole {
            mpi_worker: true,
            indexed: false,
        };
        let labels = kubeflow_labels(&b.name, "mpi-operator", "worker", true);
        let pieces = b.pod(&w.template, path, "worker", role, &as_refs(&labels));
        no_naming_overrides(&mut b, &pieces, path, "MPI Operator");
        if n > 0 {
            groups.push(Group {
                name: "worker".into(),
                count: n,
                min_count: None,
                pieces,
                path: path.into(),
            });
        }
    }
    let total: u32 = groups.iter().map(|g| g.count).sum();
    if let Some(m) = min_available
        && i64::from(m) != i64::from(total)
    {
        b.refuse(
            "spec.runPolicy.schedulingPolicy.minAvailable",
            format!(
                "{m} is not the job's {total} pods: cadre starts an MPIJob whole, as its hostfile \
                 lists every worker"
            ),
        );
    }
    b.finish(
        WorkloadKind::MpiJob {
            slots_per_worker: slots,
            implementation,
            run_launcher_as_worker,
        },
        groups,
        Completion::Groups(vec![0]),
        Some(SshKeys { mount_path: mount }),
    )
}

/// The labels the Kubeflow operators put on a replica's pods (`training.kubeflow.org/...`);
/// `job-role` is set on the MPI launcher and workers and on the PyTorch master.
fn kubeflow_labels(job: &str, operator: &str, replica: &str, role: bool) -> Vec<(String, String)> {
    let mut l = vec![
        (
            "training.kubeflow.org/job-name".to_string(),
            job.to_string(),
        ),
        (
            "training.kubeflow.org/operator-name".to_string(),
            operator.to_string(),
        ),
        (
            "training.kubeflow.org/replica-type".to_string(),
            replica.to_string(),
        ),
    ];
    if role {
        l.push((
            "training.kubeflow.org/job-role".to_string(),
            replica.to_string(),
        ));
    }
    l
}

fn as_refs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn port_named(p: &PodPieces, name: &str) -> Option<u16> {
    p.run
        .as_ref()?
        .ports
        .iter()
        .find(|x| x.name.as_deref() == Some(name))
        .map(|x| x.port)
}

fn translate_pytorchjob(j: &PyTorchJob, opts: &TranslateOptions) -> Result<Translated, K8sError> {
    let mut b = Builder::new("PyTorchJob", &j.api_version, &j.metadata, opts);
    let s = &j.spec;
    let min_available = b.run_policy(&s.run_policy, "kubeflow.org/training-operator");
    let nproc = match &s.nproc_per_node {
        None => "auto".to_string(),
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(v)) => v.clone(),
    };
    let mut groups = Vec::new();
    let mut master_port = PYTORCH_DEFAULT_PORT;
    let mut worker_port = PYTORCH_DEFAULT_PORT;
    let mut has_master = false;
    let mut worker_replicas = 0;
    if let Some(m) = &s.pytorch_replica_specs.master {
        let n = count(
            m.replicas,
            1,
            "spec.pytorchReplicaSpecs.Master.replicas",
            &mut b.refusals,
        );
        if n != 1 {
            b.refuse(
                "spec.pytorchReplicaSpecs.Master.replicas",
                "a PyTorchJob has one master",
            );
        }
        replica_restart(&mut b, m, "master");
        let path = "spec.pytorchReplicaSpecs.Master.template";
        let labels = kubeflow_labels(&b.name, "pytorchjob-controller", "master", true);
        let pieces = b.pod(
            &m.template,
            path,
            "master",
            PodRole::default(),
            &as_refs(&labels),
        );
        no_naming_overrides(&mut b, &pieces, path, "Training Operator");
        master_port = port_named(&pieces, "pytorchjob-port").unwrap_or(PYTORCH_DEFAULT_PORT);
        has_master = true;
        groups.push(Group {
            name: "master".into(),
            count: 1,
            min_count: None,
            pieces,
            path: path.into(),
        });
    }
    let mut elastic = None;
    if let Some(w) = &s.pytorch_replica_specs.worker {
        let n = count(
            w.replicas,
            1,
            "spec.pytorchReplicaSpecs.Worker.replicas",
            &mut b.refusals,
        );
        worker_replicas = n;
        replica_restart(&mut b, w, "worker");
        let path = "spec.pytorchReplicaSpecs.Worker.template";
        let labels = kubeflow_labels(&b.name, "pytorchjob-controller", "worker", false);
        let pieces = b.pod(
            &w.template,
            path,
            "worker",
            PodRole::default(),
            &as_refs(&labels),
        );
        no_naming_overrides(&mut b, &pieces, path, "Training Operator");
        worker_port = port_named(&pieces, "pytorchjob-port").unwrap_or(PYTORCH_DEFAULT_PORT);
        let mut min_count = None;
        if let Some(ep) = &s.elastic_policy {
            let min = count(
                ep.min_replicas,
                n,
                "spec.elasticPolicy.minReplicas",
                &mut b.refusals,
            );
            let max = count(
                ep.max_replicas,
                n,
                "spec.elasticPolicy.maxReplicas",
                &mut b.refusals,
            );
            if min > n {
                b.refuse(
                    "spec.elasticPolicy.minReplicas",
                    format!("{min} is above the {n} worker replicas"),
                );
            }
            if max < n {
                b.refuse(
                    "spec.elasticPolicy.maxReplicas",
                    format!("{max} is below the {n} worker replicas"),
                );
            }
            if max > n {
                // cadre starts at most `replicas` workers; growing to maxReplicas is the
                // autoscaler's, which cadre does not run.
                b.note("elasticPolicy.maxReplicas", max);
            }
            if ep.metrics.as_ref().is_some_and(|m| !m.is_empty()) {
                b.note(
                    "elasticPolicy.metrics",
                    "recorded, not acted on: cadre does not autoscale",
                );
            }
            if min < n {
                min_count = Some(min);
            }
            let port = match ep.rdzv_port.map(u16::try_from) {
                None => None,
                Some(Ok(p)) if p > 0 => Some(p),
                Some(_) => {
                    b.refuse("spec.elasticPolicy.rdzvPort", "not a port number");
                    None
                }
            };
            elastic = Some(ElasticContract {
                min_replicas: min,
                max_replicas: max,
                rdzv_backend: ep.rdzv_backend.clone().unwrap_or_else(|| "c10d".into()),
                rdzv_host: ep.rdzv_host.clone(),
                rdzv_port: port,
                rdzv_id: ep.rdzv_id.clone(),
                rdzv_conf: ep
                    .rdzv_conf
                    .iter()
                    .flatten()
                    .map(|c| (c.key.clone(), c.value.clone()))
                    .collect(),
                standalone: ep.standalone == Some(true),
                max_restarts: ep.max_restarts,
                n_proc_per_node: ep.n_proc_per_node,
            });
        }
        if n > 0 {
            groups.push(Group {
                name: "worker".into(),
                count: n,
                min_count,
                pieces,
                path: path.into(),
            });
        }
    } else if s.elastic_policy.is_some() {
        b.refuse(
            "spec.elasticPolicy",
            "elastic training needs Worker replicas",
        );
    }
    let total: u32 = groups.iter().map(|g| g.count).sum();
    let least: u32 = groups.iter().map(|g| g.min_count.unwrap_or(g.count)).sum();
    if let Some(m) = min_available
        && i64::from(m) != i64::from(least)
    {
        b.refuse(
            "spec.runPolicy.schedulingPolicy.minAvailable",
            format!(
                "{m} is not the {least} pods the job starts with{}; use elasticPolicy.minReplicas \
                 for an elastic job",
                if least < total { " at least" } else { "" }
            ),
        );
    }
    let completion = if has_master {
        Completion::Groups(vec![0])
    } else {
        Completion::AllTasks
    };
    let contract = PyTorchContract {
        has_master,
        total_replicas: total,
        worker_replicas,
        nproc_per_node: nproc,
        master_port,
        worker_port,
        elastic,
    };
    b.finish(
        WorkloadKind::PyTorchJob(Box::new(contract)),
        groups,
        completion,
        None,
    )
}

/// What a Volcano lifecycle policy does in cadre.
enum PolicyEffect {
    /// Already what cadre does, or recorded.
    Fine,
    /// The job completes when this task completes.
    CompleteOnTask,
}

fn volcano_policy(
    b: &mut Builder,
    p: &LifecyclePolicy,
    path: &str,
    task_level: bool,
) -> PolicyEffect {
    let mut events: Vec<&str> = p.events.iter().flatten().map(String::as_str).collect();
    if let Some(e) = &p.event {
        events.push(e);
    }
    if p.exit_code.is_some() {
        b.refuse(
            format!("{path}.exitCode"),
            "policies on exit codes are not supported",
        );
    }
    if p.timeout.is_some() {
        b.refuse(
            format!("{path}.timeout"),
            "policy timeouts are not supported",
        );
    }
    let action = p.action.as_deref().unwrap_or("");
    let mut effect = PolicyEffect::Fine;
    for e in events {
        match (e, action) {
            // cadre requeues a preempted or evicted gang whole.
            ("PodEvicted", "RestartJob") => {}
            // A failed task fails the job in cadre.
            ("PodFailed" | "TaskFailed", "AbortJob" | "TerminateJob") => {}
            (
                "PodFailed" | "PodEvicted" | "Unknown",
                "RestartJob" | "RestartTask" | "RestartPod",
            ) => {
                b.note(
                    &format!("policy.{e}"),
                    format!("{action} (recorded, not acted on)"),
                );
            }
            ("TaskCompleted", "CompleteJob") if task_level => effect = PolicyEffect::CompleteOnTask,
            _ => b.refuse(
                path,
                format!("event `{e}` with action `{action}` is not supported"),
            ),
        }
    }
    effect
}

fn translate_volcano_job(j: &VolcanoJob, opts: &TranslateOptions) -> Result<Translated, K8sError> {
    let mut b = Builder::new("Job", &j.api_version, &j.metadata, opts);
    b.object = format!("Job `{}` (batch.volcano.sh)", describe_name(&j.metadata));
    let volcano::VolcanoJobSpec {
        scheduler_name: _, // cadre is the scheduler
        min_available,
        volumes,
        tasks,
        policies,
        plugins,
        running_estimate,
        queue,
        max_retry,
        ttl_seconds_after_finished: _,
        priority_class_name,
        min_success,
        network_topology,
    } = &j.spec;
    if volumes.as_ref().is_some_and(|v| !v.is_empty()) {
        b.refuse("spec.volumes", "volumes are not supported");
    }
    if running_estimate.is_some() {
        b.note("runningEstimate", "recorded");
    }
    if let Some(q) = queue {
        b.queue_direct(q, "spec.queue");
    }
    if let Some(m) = max_retry {
        b.note("maxRetry", m);
    }
    if let Some(pc) = priority_class_name {
        b.priority(pc, "spec.priorityClassName");
    }
    let mut span: Option<SpanReq> = None;
    if let Some(nt) = network_topology {
        match (
            nt.mode.as_deref(),
            nt.highest_tier_allowed,
            &nt.highest_tier_name,
        ) {
            (Some("soft"), _, _) => {
                b.note("networkTopology", "soft (cadre prefers compact placements)")
            }
            (None | Some("hard"), Some(1), None) => span = Some(SpanReq::Leaf),
            _ => b.refuse(
                "spec.networkTopology",
                "cadre supports `mode: hard` with `highestTierAllowed: 1` (one leaf switch) and \
                 `mode: soft`",
            ),
        }
    }
    let (mut env_plugin, mut svc_plugin, mut ssh) = (false, false, None);
    for (name, args) in plugins.iter().flatten() {
        let p = format!("spec.plugins.{name}");
        match name.as_str() {
            "env" => env_plugin = true,
            "svc" => {
                svc_plugin = true;
                for a in args {
                    if a != "--publish-not-ready-addresses" && a != "--disable-network-policy" {
                        b.refuse(p.clone(), format!("argument `{a}` is not supported"));
                    }
                }
            }
            "ssh" => {
                let mut mount = "/root/.ssh".to_string();
                for a in args {
                    match a.strip_prefix("--ssh-key-file-path=") {
                        Some(path) => mount = path.to_string(),
                        None => b.refuse(p.clone(), format!("argument `{a}` is not supported")),
                    }
                }
                ssh = Some(SshKeys { mount_path: mount });
            }
            other => b.refuse(
                p,
                format!("the `{other}` plugin is not supported (cadre provides env, svc and ssh)"),
            ),
        }
    }
    for (i, p) in policies.iter().flatten().enumerate() {
        // Job-level policies never complete the job on a task (refused inside).
        volcano_policy(&mut b, p, &format!("spec.policies[{i}]"), false);
    }
    let mut groups = Vec::new();
    let mut complete_on = Vec::new();
    let mut mins = Vec::new(); // (explicit task minAvailable, replicas)
    let (mut hostnames, mut subdomains) = (Vec::new(), Vec::new());
    for (i, t) in tasks.iter().enumerate() {
        let path = format!("spec.tasks[{i}]");
        let name = t.name.clone().unwrap_or_else(|| format!("default{i}"));
        if !is_dns_label(&name) {
            b.refuse(
                format!("{path}.name"),
                format!("`{name}` is not a DNS label"),
            );
        }
        let replicas = count(t.replicas, 0, &format!("{path}.replicas"), &mut b.refusals);
        let task_min = t
            .min_available
            .map(|m| count(Some(m), 0, &format!("{path}.minAvailable"), &mut b.refusals));
        if let Some(m) = task_min
            && m > replicas
        {
            b.refuse(
                format!("{path}.minAvailable"),
                format!("{m} is above replicas {replicas}"),
            );
        }
        if t.depends_on.is_some() {
            b.refuse(
                format!("{path}.dependsOn"),
                "ordered start is not supported: cadre starts every task of a gang at once",
            );
        }
        if t.partition_policy.is_some() {
            b.refuse(format!("{path}.partitionPolicy"), "not supported");
        }
        if let Some(m) = t.max_retry {
            b.note(&format!("{name}.maxRetry"), m);
        }
        match t.topology_policy.as_deref() {
            None | Some("none") => {}
            Some("best-effort") => b.numa = b.numa.max_policy(NumaPolicy::Preferred),
            Some("restricted" | "single-numa-node") => b.numa = NumaPolicy::Strict,
            Some(other) => b.refuse(
                format!("{path}.topologyPolicy"),
                format!("unknown policy `{other}`"),
            ),
        }
        let mut completes = false;
        for (k, p) in t.policies.iter().flatten().enumerate() {
            if let PolicyEffect::CompleteOnTask =
                volcano_policy(&mut b, p, &format!("{path}.policies[{k}]"), true)
            {
                completes = true;
            }
        }
        let tpath = format!("{path}.template");
        let (jname, ns) = (b.name.clone(), b.namespace.clone());
        let labels = [
            ("volcano.sh/job-name", jname.as_str()),
            ("volcano.sh/job-namespace", ns.as_str()),
            ("volcano.sh/task-spec", name.as_str()),
        ];
        let mut pieces = b.pod(&t.template, &tpath, &name, PodRole::default(), &labels);
        if let Some(s) = span {
            pieces.span = Some(pieces.span.map_or(s, |p| p.max(s)));
        }
        if replicas == 0 {
            continue;
        }
        if completes {
            complete_on.push(groups.len());
        }
        mins.push((task_min, replicas));
        hostnames.push(pieces.hostname.clone());
        subdomains.push(pieces.subdomain.clone());
        if pieces.hostname.is_some() && replicas > 1 {
            b.refuse(
                format!("{tpath}.spec.hostname"),
                "the pods of a task cannot share one hostname",
            );
        }
        groups.push(Group {
            name,
            count: replicas,
            min_count: None,
            pieces,
            path: tpath,
        });
    }
    // Gang minimum: each task's minAvailable (default: its replicas) and the job's
    // minAvailable (default: their sum). Volcano ignores the tasks' minimums when the job's
    // is below their sum; cadre keeps a minimum per group, so that case is supported for a
    // single task only.
    let sum_min: u32 = mins.iter().map(|(m, r)| m.unwrap_or(*r)).sum();
    let job_min = min_available.map(|m| count(Some(m), 0, "spec.minAvailable", &mut b.refusals));
    let total: u32 = groups.iter().map(|g| g.count).sum();
    match job_min {
        Some(m) if m > total => b.refuse(
            "spec.minAvailable",
            format!("{m} is above the job's {total} pods"),
        ),
        Some(0) => b.refuse("spec.minAvailable", "must be at least 1"),
        // One task: Volcano needs `m` of its pods whatever the task's own minimum.
        Some(m) if groups.len() == 1 => {
            groups[0].min_count = (m < groups[0].count).then_some(m);
        }
        Some(m) if m == sum_min => {
            for (g, (t, _)) in groups.iter_mut().zip(&mins) {
                g.min_count = t.filter(|t| *t < g.count);
            }
        }
        Some(m) => b.refuse(
            "spec.minAvailable",
            format!(
                "{m} differs from the sum {sum_min} of the tasks' minimums: Volcano then starts \
                 any {m} pods of any task, while cadre keeps a minimum per task; set each task's \
                 minAvailable so that they add up to spec.minAvailable"
            ),
        ),
        None => {
            for (g, (t, _)) in groups.iter_mut().zip(&mins) {
                g.min_count = t.filter(|t| *t < g.count);
            }
        }
    }
    if let Some(ms) = min_success {
        let least: u32 = groups.iter().map(|g| g.min_count.unwrap_or(g.count)).sum();
        if !(*ms == 0 || u32::try_from(*ms).is_ok_and(|m| m == total || m == least)) {
            b.refuse(
                "spec.minSuccess",
                "a job succeeding when only some of its tasks do is not supported",
            );
        }
    }
    let completion = if complete_on.is_empty() {
        Completion::AllTasks
    } else {
        Completion::Groups(complete_on)
    };
    b.finish(
        WorkloadKind::VolcanoJob {
            env_plugin,
            svc_plugin,
            hostnames,
            subdomains,
        },
        groups,
        completion,
        ssh,
    )
}

trait NumaMax {
    fn max_policy(self, other: NumaPolicy) -> NumaPolicy;
}

impl NumaMax for NumaPolicy {
    fn max_policy(self, other: NumaPolicy) -> NumaPolicy {
        let rank = |p: NumaPolicy| match p {
            NumaPolicy::None => 0,
            NumaPolicy::Preferred => 1,
            NumaPolicy::Strict => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}
