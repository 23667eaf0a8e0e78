//! The storage conformance suite: every case runs against every backend through
//! [`conformance_suite!`], each on a database of its own that a [`Harness`] opens and
//! reopens (a reopen is what a restarted controller does).

use crate::records::*;
use crate::sql::{Mode, Transact, Value};
use crate::{SCHEMA_VERSION, Store, StoreError};
use cadre_core::alloc::{Allocation, TaskAlloc};
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::job::{
    ArrayIndex, Dependency, DependencyKind, JobId, JobSpec, JobState, NetworkSpan, NumaPolicy,
    TaskGroup, TopologyReq,
};
use cadre_core::resources::TaskResources;
use cadre_core::run::{Export, OpenMode, PreEndSignal, RunSpec, SignalTarget};
use cadre_core::scheduler::PendingReason;
use cadre_core::time::{Dur, Time};
use std::collections::BTreeSet;

/// One test's database.
pub(crate) trait Harness: Sync {
    type Store: Store + Transact + 'static;
    /// Opens (again) this test's database, migrating it.
    fn open(&self) -> Result<Self::Store, StoreError>;
    /// Opens this test's database as it is, without migrating it.
    fn open_unmigrated(&self) -> Result<Self::Store, StoreError>;
}

/// Generates one `#[test]` per case for the backend whose harness `$factory()` returns
/// (`None`: the backend is not available here, and the factory said so).
macro_rules! conformance_suite {
    ($factory:path) => {
        $crate::conformance::conformance_suite!(@cases $factory;
            ids_strictly_increase_across_reopen,
            batch_submit_is_all_or_nothing,
            changes_read_back_exactly,
            record_of_an_unknown_job_commits_nothing,
            listing_filters_and_pages,
            unfinished_jobs_survive_reopen,
            held_submission_is_stored_held,
            array_tasks_take_their_first_tasks_id,
            nodes_upsert_by_name,
            accounting_keeps_one_row_per_run,
            usage_snapshot_round_trips,
            tokens_store_only_the_hash,
            newer_schema_is_refused,
            reopen_does_not_migrate_again,
            two_threads_submit_at_once,
            out_of_range_time_is_an_error,
            run_specs_read_back_exactly,
            unencodable_run_spec_fails_the_batch,
            version_1_database_migrates_keeping_its_rows,
            steps_are_written_at_start_and_replaced_at_end,
            specs_are_replaced_whole,
            queue_objects_replace_in_place_delete_and_survive_reopen,
            a_failed_queue_object_change_commits_nothing,
            job_events_read_back_in_order_and_need_their_job,
            join_tokens_enrol_once_and_a_node_has_one_live_certificate,
            submission_keys_commit_with_their_jobs_once,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                if let Some(harness) = $factory() {
                    $crate::conformance::$case(&harness);
                }
            }
        )*
    };
}
pub(crate) use conformance_suite;

fn open<H: Harness>(h: &H) -> H::Store {
    match h.open() {
        Ok(s) => s,
        Err(e) => panic!("failed to open the store: {e} ({e:?})"),
    }
}

fn ok<T>(r: Result<T, StoreError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("store call failed: {e} ({e:?})"),
    }
}

fn spec(user: &str, account: &str, name: &str) -> JobSpec {
    let mut s = JobSpec::simple(
        user,
        account,
        2,
        TaskResources {
            cpus: 4,
            mem_mib: 8192,
            gpus: 1,
            ..TaskResources::default()
        },
        Dur::hours(1),
    );
    s.name = name.into();
    s.submit_time = Time(1_700_000_000);
    s
}

pub(crate) fn submission_keys_commit_with_their_jobs_once<H: Harness>(h: &H) {
    let mut s = open(h);
    let jobs = vec![
        new_job("alice", "a", "p"),
        new_job("bob", "b", "p"),
        new_job("bob", "b", "p"),
    ];
    let key = |user: &str, key: &str, first, count| NewSubmitKey {
        user: user.into(),
        key: key.into(),
        first,
        count,
    };
    let ids = ok(s.submit_batch_keyed(&jobs, &[key("bob", "k1", 1, 2)]));
    let keys = ok(s.submit_keys(Time(0)));
    assert_eq!(
        keys,
        vec![SubmitKey {
            user: "bob".into(),
            key: "k1".into(),
            first: ids[1],
            count: 2,
            at: Time(1_700_000_000),
        }]
    );
    assert!(ok(s.submit_keys(Time(1_700_000_001))).is_empty());
    // The same key again is refused, and its batch with it (the controller answers a
    // retry from its keys before it submits anything).
    let again = s.submit_batch_keyed(&jobs[..1], &[key("bob", "k1", 0, 1)]);
    assert!(again.is_err(), "{again:?}");
    assert_eq!(ok(s.submit_keys(Time(0))).len(), 1);
    // Another user's key of the same text is another key.
    ok(s.submit_batch_keyed(&jobs[..1], &[key("alice", "k1", 0, 1)]));
    assert_eq!(ok(s.submit_keys(Time(0))).len(), 2);
}

fn new_job(user: &str, account: &str, partition: &str) -> NewJob {
    NewJob {
        spec: spec(user, account, "job"),
        run: RunSpec::command(vec!["true".into()], "/tmp".into()),
        partition: partition.into(),
        array_of: None,
    }
}

/// A spec that uses every corner of the type.
fn rich_spec() -> JobSpec {
    let mut s = spec("alice", "vision", "train-llama \"70b\" ✓");
    s.partition = Some("gpu".into());
    s.qos = Some("high".into());
    s.queue = Some("team-a".into());
    s.priority_class = Some("prod".into());
    s.nice = -5;
    s.begin = Some(Time(1_700_000_600));
    s.hold = true;
    s.time_limit = Dur(u64::MAX);
    s.groups.push(TaskGroup {
        name: "worker".into(),
        count: 8,
        min_count: Some(4),
        per_task: TaskResources {
            cpus: 16,
            mem_mib: 65536,
            gpus: 0,
            gpu_share_milli: Some(250),
            gpu_model: Some("h100".into()),
            nics: 1,
            named: vec![("license".into(), 2)],
        },
        tasks_per_node: Some(4),
        nodes: Some(2),
    });
    s.dependencies = vec![
        Dependency::On {
            kind: DependencyKind::AfterOk,
            job: JobId(3),
        },
        Dependency::Singleton,
    ];
    s.dependencies_any = true;
    s.array = Some(ArrayIndex {
        array_job: JobId(40),
        index: 7,
        max_running: None,
    });
    s.exclusive = true;
    s.preemptible = false;
    s.requeue = cadre_core::job::RequeuePolicy::Never;
    s.topology = TopologyReq {
        numa: NumaPolicy::Strict,
        span: NetworkSpan::MaxSwitches(2),
    };
    s.features = vec!["a100".into(), "ib".into()];
    s.node_selector = vec![("zone".into(), "b".into())];
    s.one_task_per_node = true;
    s
}

/// A run spec that uses every corner of the type: a script, every option set, and an
/// environment as big as a login shell's with the characters JSON and SQL must escape.
fn rich_run() -> RunSpec {
    let mut env: Vec<(String, String)> = (0..40)
        .map(|i| {
            (
                format!("VAR_{i}"),
                format!("/opt/tool-{i}/bin:").repeat(i % 7),
            )
        })
        .collect();
    env.extend([
        ("EMPTY".into(), String::new()),
        ("EQUALS".into(), "a=b=c".into()),
        (
            "QUOTES".into(),
            "it's \"quoted\" \\ back'slashed; DROP TABLE jobs;--".into(),
        ),
        ("UNICODE".into(), "naïve ✓ 日本語 🚀".into()),
        ("LINES".into(), "one\ntwo\r\n\tthree".into()),
        // No process can get this, but the store keeps what it is given (PostgreSQL's
        // TEXT cannot hold NUL: it is escaped in the JSON).
        ("NUL".into(), "before\0after".into()),
        // Duplicates and order are the submitter's; both are kept.
        ("VAR_1".into(), "again".into()),
    ]);
    RunSpec {
        command: vec![
            "--epochs".into(),
            "3".into(),
            "two words".into(),
            String::new(),
        ],
        script: Some("#!/bin/bash\n#SBATCH --gpus=8\nsrun python train.py \"$@\"\n".into()),
        work_dir: "/scratch/alice/run ✓".into(),
        submit_dir: Some("/home/alice".into()),
        submit_host: Some("login01".into()),
        stdout: Some("logs/%x-%j.out".into()),
        stderr: Some("logs/%x-%j.err".into()),
        open_mode: OpenMode::Append,
        export: Export::Named(vec!["PATH".into(), "HOME".into()]),
        env,
        signal: Some(PreEndSignal {
            signal: 10,
            before_secs: 120,
            target: SignalTarget::Leader,
        }),
        kill_wait_secs: 0,
        completing_groups: Some(vec![0, 2]),
        // Opaque to the store: kept exactly.
        kubernetes: Some(
            serde_json::json!({"version": 1, "name": "train", "groups": [{"env": []}]}),
        ),
        allocation: false,
    }
}

fn allocation() -> Allocation {
    Allocation {
        tasks: vec![
            TaskAlloc {
                group: 0,
                rank: 0,
                node: NodeId(3),
                cores: vec![0, 1, 2, 3],
                gpus: vec![1],
                gpu_milli_each: 1000,
                nics: vec![],
                mem_mib: 8192,
                named: vec![],
            },
            TaskAlloc {
                group: 1,
                rank: 5,
                node: NodeId(7),
                cores: vec![8, 9],
                gpus: vec![0, 2],
                gpu_milli_each: 250,
                nics: vec![1],
                mem_mib: 1,
                named: vec![("license".into(), 2)],
            },
        ],
        exclusive: true,
    }
}

fn running(at: u64) -> JobStatus {
    JobStatus {
        state: JobState::Running,
        reason: PendingReason::None,
        start_time: Some(Time(at)),
        end_time: None,
        allocation: Some(allocation()),
        exit_code: None,
        requeues: 0,
    }
}

fn change(id: JobId, status: JobStatus) -> JobChange {
    JobChange {
        id,
        status,
        ended_run: None,
    }
}

fn ids(jobs: &[StoredJob]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

fn all_jobs(s: &mut dyn Store) -> Vec<StoredJob> {
    ok(s.list_jobs(&JobFilter::default()))
}

fn assert_strictly_increasing(ids: &[JobId]) {
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "ids not strictly increasing: {ids:?}");
    }
}

pub(crate) fn ids_strictly_increase_across_reopen<H: Harness>(h: &H) {
    let mut seen = Vec::new();
    for round in 0..3 {
        let mut s = open(h);
        for size in [1, 5, 2] {
            let batch: Vec<NewJob> = (0..size).map(|_| new_job("u", "a", "p")).collect();
            let got = ok(s.submit_batch(&batch));
            assert_eq!(got.len(), size, "round {round}");
            seen.extend(got);
        }
        assert_eq!(ok(s.submit_batch(&[])), vec![]);
    }
    assert_strictly_increasing(&seen);
    assert_eq!(seen.len(), 24);
    let mut s = open(h);
    assert_eq!(ids(&all_jobs(&mut s)), seen);
}

pub(crate) fn batch_submit_is_all_or_nothing<H: Harness>(h: &H) {
    let mut s = open(h);
    let first = ok(s.submit_batch(&[new_job("u", "a", "p")]));
    // The third job's submit time cannot be stored: the whole batch must fail.
    let mut bad = new_job("u", "a", "p");
    bad.spec.submit_time = Time(u64::MAX);
    let batch = vec![new_job("u", "a", "p"), new_job("u", "a", "p"), bad];
    let err = s
        .submit_batch(&batch)
        .expect_err("a batch with a bad job must fail");
    assert!(
        matches!(
            err,
            StoreError::OutOfRange {
                what: "submit time",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(ids(&all_jobs(&mut s)), first);
    drop(s);
    let mut s = open(h);
    assert_eq!(
        ids(&all_jobs(&mut s)),
        first,
        "nothing of the failed batch after reopen"
    );
    let next = ok(s.submit_batch(&[new_job("u", "a", "p")]));
    assert!(next[0] > first[0]);
}

pub(crate) fn changes_read_back_exactly<H: Harness>(h: &H) {
    let mut s = open(h);
    let spec = rich_spec();
    let id = ok(s.submit_batch(&[NewJob {
        spec: spec.clone(),
        run: rich_run(),
        partition: "gpu".into(),
        array_of: None,
    }]))[0];
    let fresh = ok(s.job(id)).expect("submitted job");
    assert_eq!(fresh.spec, spec);
    assert_eq!(fresh.partition, "gpu");
    // The rich spec is submitted held.
    let submitted = JobStatus {
        reason: PendingReason::JobHeldUser,
        ..JobStatus::submitted()
    };
    assert_eq!(fresh.status, submitted);

    let held = JobStatus {
        reason: PendingReason::Limit("QOSMaxGRESPerUser".into()),
        ..JobStatus::submitted()
    };
    ok(s.record(&[change(id, held.clone())]));
    assert_eq!(ok(s.job(id)).map(|j| j.status), Some(held));

    let run = running(1_700_000_100);
    ok(s.record(&[change(id, run.clone())]));
    drop(s);
    let mut s = open(h);
    let back = ok(s.job(id)).expect("job after reopen");
    assert_eq!(back.status, run);
    assert_eq!(back.spec, spec);

    let done = JobStatus {
        state: JobState::Failed,
        end_time: Some(Time(1_700_000_200)),
        exit_code: Some(-9),
        requeues: 3,
        ..run
    };
    ok(s.record(&[change(id, done.clone())]));
    assert_eq!(ok(s.job(id)).map(|j| j.status), Some(done));
    assert_eq!(ok(s.job(JobId(id.0 + 1000))), None);
}

pub(crate) fn record_of_an_unknown_job_commits_nothing<H: Harness>(h: &H) {
    let mut s = open(h);
    let id = ok(s.submit_batch(&[new_job("u", "a", "p")]))[0];
    let missing = JobId(id.0 + 100);
    let err = s
        .record(&[change(id, running(5)), change(missing, running(5))])
        .expect_err("an unknown job fails the batch");
    assert!(
        matches!(err, StoreError::UnknownJob { id } if id == missing.0),
        "{err:?}"
    );
    assert_eq!(
        ok(s.job(id)).map(|j| j.status),
        Some(JobStatus::submitted())
    );
    ok(s.record(&[]));
}

pub(crate) fn listing_filters_and_pages<H: Harness>(h: &H) {
    let mut s = open(h);
    let mut batch = Vec::new();
    for i in 0..12 {
        let user = ["ann", "bob", "cy"][i % 3];
        let account = ["ml", "hpc"][i % 2];
        let partition = ["gpu", "cpu", "gpu", "debug"][i % 4];
        batch.push(new_job(user, account, partition));
    }
    let all = ok(s.submit_batch(&batch));
    // Jobs 0, 4 run; 8 completes.
    ok(s.record(&[
        change(all[0], running(10)),
        change(all[4], running(10)),
        change(
            all[8],
            JobStatus {
                state: JobState::Completed,
                end_time: Some(Time(20)),
                exit_code: Some(0),
                ..running(10)
            },
        ),
    ]));
    let pick = |idx: &[usize]| idx.iter().map(|&i| all[i]).collect::<Vec<_>>();
    let list = |s: &mut H::Store, f: JobFilter| ids(&ok(s.list_jobs(&f)));

    assert_eq!(list(&mut s, JobFilter::default()), all);
    let by_user = JobFilter {
        user: Some("bob".into()),
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, by_user), pick(&[1, 4, 7, 10]));
    let by_account = JobFilter {
        account: Some("hpc".into()),
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, by_account), pick(&[1, 3, 5, 7, 9, 11]));
    let by_partition = JobFilter {
        partition: Some("gpu".into()),
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, by_partition), pick(&[0, 2, 4, 6, 8, 10]));
    let running_only = JobFilter {
        states: vec![JobState::Running],
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, running_only), pick(&[0, 4]));
    let two_states = JobFilter {
        states: vec![JobState::Completed, JobState::Running],
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, two_states), pick(&[0, 4, 8]));
    let combined = JobFilter {
        states: vec![JobState::Pending],
        user: Some("ann".into()),
        account: Some("ml".into()),
        partition: Some("gpu".into()),
        ..JobFilter::default()
    };
    // ann: 0, 3, 6, 9; ml: even; gpu: even; pending: not 0.
    assert_eq!(list(&mut s, combined), pick(&[6]));
    let nobody = JobFilter {
        user: Some("zed".into()),
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, nobody), vec![]);

    // Pages of 5 by id, each starting after the last id of the previous one.
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = list(
            &mut s,
            JobFilter {
                after,
                limit: Some(5),
                ..JobFilter::default()
            },
        );
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 5);
        after = page.last().copied();
        pages.push(page);
    }
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![5, 5, 2]
    );
    assert_eq!(pages.concat(), all);
    let paged_filter = JobFilter {
        partition: Some("gpu".into()),
        after: Some(all[2]),
        limit: Some(2),
        ..JobFilter::default()
    };
    assert_eq!(list(&mut s, paged_filter), pick(&[4, 6]));
}

pub(crate) fn unfinished_jobs_survive_reopen<H: Harness>(h: &H) {
    let mut s = open(h);
    let all = ok(s.submit_batch(&vec![new_job("u", "a", "p"); 6]));
    let ended = |state| JobStatus {
        state,
        end_time: Some(Time(30)),
        ..running(10)
    };
    ok(s.record(&[
        change(all[0], running(10)),
        change(
            all[1],
            JobStatus {
                state: JobState::Preempting,
                ..running(10)
            },
        ),
        change(all[2], ended(JobState::Completed)),
        change(all[3], ended(JobState::Cancelled)),
        change(all[4], ended(JobState::NodeFail)),
    ]));
    drop(s);
    let mut s = open(h);
    let open_jobs = ok(s.unfinished_jobs());
    assert_eq!(ids(&open_jobs), vec![all[0], all[1], all[5]]);
    assert_eq!(open_jobs[0].status, running(10));
    assert_eq!(open_jobs[1].status.state, JobState::Preempting);
    assert_eq!(open_jobs[1].status.allocation, Some(allocation()));
    assert_eq!(open_jobs[2].status, JobStatus::submitted());
}

/// Regression: a job submitted held was stored with no hold, and a controller restarted
/// from the store released it.
pub(crate) fn held_submission_is_stored_held<H: Harness>(h: &H) {
    let mut s = open(h);
    let mut held = new_job("u", "a", "p");
    held.spec.hold = true;
    let ids = ok(s.submit_batch(&[held, new_job("u", "a", "p")]));
    drop(s);
    let mut s = open(h);
    let reasons: Vec<(JobId, PendingReason)> = ok(s.unfinished_jobs())
        .into_iter()
        .map(|j| (j.id, j.status.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (ids[0], PendingReason::JobHeldUser),
            (ids[1], PendingReason::None)
        ]
    );
}

pub(crate) fn array_tasks_take_their_first_tasks_id<H: Harness>(h: &H) {
    let mut s = open(h);
    let plain = new_job("u", "a", "p");
    let task = |index: u32, array_of: usize| {
        let mut j = new_job("u", "a", "p");
        j.spec.array = Some(cadre_core::job::ArrayIndex {
            array_job: JobId(0),
            index,
            max_running: None,
        });
        j.array_of = Some(array_of);
        j
    };
    // A plain job first, so that the array's id is not the batch's first id.
    let ids = ok(s.submit_batch(&[plain, task(0, 1), task(1, 1), task(7, 1)]));
    for (k, index) in [(1, 0), (2, 1), (3, 7)] {
        let job = ok(s.job(ids[k])).expect("stored");
        assert_eq!(
            job.spec.array,
            Some(cadre_core::job::ArrayIndex {
                array_job: ids[1],
                index,
                max_running: None,
            })
        );
    }
    assert_eq!(ok(s.job(ids[0])).expect("stored").spec.array, None);
}

pub(crate) fn nodes_upsert_by_name<H: Harness>(h: &H) {
    let mut s = open(h);
    assert_eq!(ok(s.nodes()), vec![]);
    let node = |name: &str, avail, reason: Option<&str>, emulated, at| NodeRecord {
        name: name.into(),
        avail,
        reason: reason.map(Into::into),
        emulated_gpus: emulated,
        updated: Time(at),
    };
    ok(s.upsert_nodes(&[
        node("node002", NodeAvail::Up, None, true, 1),
        node("node001", NodeAvail::Unknown, None, false, 1),
    ]));
    ok(s.upsert_nodes(&[node(
        "node002",
        NodeAvail::Drain,
        Some("bad DIMM"),
        false,
        2,
    )]));
    drop(s);
    let mut s = open(h);
    assert_eq!(
        ok(s.nodes()),
        vec![
            node("node001", NodeAvail::Unknown, None, false, 1),
            node("node002", NodeAvail::Drain, Some("bad DIMM"), false, 2),
        ]
    );
    ok(s.upsert_nodes(&[node("node002", NodeAvail::Down, None, true, 3)]));
    assert_eq!(
        ok(s.nodes())[1],
        node("node002", NodeAvail::Down, None, true, 3)
    );
}

pub(crate) fn accounting_keeps_one_row_per_run<H: Harness>(h: &H) {
    let mut s = open(h);
    let mut second = new_job("bob", "hpc", "cpu");
    second.spec.name = "sim".into();
    let ids = ok(s.submit_batch(&[new_job("ann", "ml", "gpu"), second]));
    let (a, b) = (ids[0], ids[1]);
    let usage = RunUsage {
        gpu_milli: 2000,
        cpus: 8,
        nodes: "node[001-002]".into(),
    };
    // a: started, node failed and requeued, started again, completed.
    let first_run = JobStatus {
        state: JobState::Pending,
        end_time: Some(Time(150)),
        requeues: 0,
        ..running(100)
    };
    ok(s.record(&[JobChange {
        id: a,
        status: first_run,
        ended_run: Some(usage.clone()),
    }]));
    let second_run = JobStatus {
        state: JobState::Completed,
        end_time: Some(Time(400)),
        exit_code: Some(0),
        requeues: 1,
        ..running(200)
    };
    let finish = JobChange {
        id: a,
        status: second_run,
        ended_run: Some(usage.clone()),
    };
    ok(s.record(std::slice::from_ref(&finish)));
    // Recording the same end again (a retry after a lost reply) adds no row.
    ok(s.record(&[finish]));
    // b: cancelled while pending.
    ok(s.record(&[JobChange {
        id: b,
        status: JobStatus {
            state: JobState::Cancelled,
            end_time: Some(Time(300)),
            ..JobStatus::submitted()
        },
        ended_run: Some(RunUsage {
            gpu_milli: 0,
            cpus: 0,
            nodes: String::new(),
        }),
    }]));

    let rows = ok(s.accounting(&AccountingFilter::default()));
    let expected_first = AccountingRecord {
        job: a,
        run: 0,
        name: "job".into(),
        user: "ann".into(),
        account: "ml".into(),
        partition: "gpu".into(),
        submit_time: Time(1_700_000_000),
        start_time: Some(Time(100)),
        end_time: Time(150),
        state: JobState::Pending,
        exit_code: None,
        usage: usage.clone(),
    };
    let expected_second = AccountingRecord {
        run: 1,
        start_time: Some(Time(200)),
        end_time: Time(400),
        state: JobState::Completed,
        exit_code: Some(0),
        ..expected_first.clone()
    };
    let expected_b = AccountingRecord {
        job: b,
        run: 0,
        name: "sim".into(),
        user: "bob".into(),
        account: "hpc".into(),
        partition: "cpu".into(),
        submit_time: Time(1_700_000_000),
        start_time: None,
        end_time: Time(300),
        state: JobState::Cancelled,
        exit_code: None,
        usage: RunUsage {
            gpu_milli: 0,
            cpus: 0,
            nodes: String::new(),
        },
    };
    assert_eq!(
        rows,
        vec![
            expected_first.clone(),
            expected_second.clone(),
            expected_b.clone()
        ]
    );
    let mut f = |f: AccountingFilter| ok(s.accounting(&f));
    assert_eq!(
        f(AccountingFilter {
            user: Some("bob".into()),
            ..AccountingFilter::default()
        }),
        vec![expected_b.clone()]
    );
    assert_eq!(
        f(AccountingFilter {
            ended_since: Some(Time(300)),
            ended_before: Some(Time(400)),
            ..AccountingFilter::default()
        }),
        vec![expected_b.clone()]
    );
    assert_eq!(
        f(AccountingFilter {
            states: vec![JobState::Completed],
            account: Some("ml".into()),
            partition: Some("gpu".into()),
            ..AccountingFilter::default()
        }),
        vec![expected_second]
    );
    assert_eq!(
        f(AccountingFilter {
            after: Some(a),
            limit: Some(1),
            ..AccountingFilter::default()
        }),
        vec![expected_b]
    );
    assert_eq!(
        f(AccountingFilter {
            limit: Some(1),
            ..AccountingFilter::default()
        }),
        vec![expected_first]
    );
}

pub(crate) fn usage_snapshot_round_trips<H: Harness>(h: &H) {
    let mut s = open(h);
    assert_eq!(ok(s.load_usage()), vec![]);
    let u = |user: &str, account: &str, raw: f64| AssocUsage {
        user: user.into(),
        account: account.into(),
        raw_usage: raw,
        as_of: Time(1_700_000_000),
    };
    ok(s.save_usage(&[
        u("bob", "ml", 1.0 / 3.0),
        u("ann", "ml", 0.0),
        u("ann", "hpc", 5e300),
    ]));
    drop(s);
    let mut s = open(h);
    assert_eq!(
        ok(s.load_usage()),
        vec![
            u("ann", "hpc", 5e300),
            u("ann", "ml", 0.0),
            u("bob", "ml", 1.0 / 3.0)
        ]
    );
    // A new snapshot replaces the old one whole.
    ok(s.save_usage(&[u("cy", "ml", 2.5)]));
    assert_eq!(ok(s.load_usage()), vec![u("cy", "ml", 2.5)]);
    let err = s
        .save_usage(&[u("dee", "ml", 1.0), u("bad", "ml", f64::NAN)])
        .expect_err("NaN usage is refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert_eq!(
        ok(s.load_usage()),
        vec![u("cy", "ml", 2.5)],
        "failed save changed nothing"
    );
}

pub(crate) fn tokens_store_only_the_hash<H: Harness>(h: &H) {
    let mut s = open(h);
    let secret = "cadre_9f2c4e7a1b3d5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6";
    let t = ok(s.create_token(&NewToken {
        user: "ann".into(),
        admin: false,
        hash: TokenHash::of(secret),
        created: Time(100),
    }));
    let admin = ok(s.create_token(&NewToken {
        user: "root".into(),
        admin: true,
        hash: TokenHash::of("another"),
        created: Time(101),
    }));
    assert!(admin.id > t.id);
    assert_eq!(t.hash, TokenHash::of(secret));
    assert_eq!(ok(s.active_token(&TokenHash::of(secret))), Some(t.clone()));
    assert_eq!(ok(s.active_token(&TokenHash::of("guess"))), None);
    let dup = s.create_token(&NewToken {
        user: "mallory".into(),
        admin: true,
        hash: TokenHash::of(secret),
        created: Time(102),
    });
    assert!(matches!(dup, Err(StoreError::DuplicateToken)), "{dup:?}");

    // Nothing in the table holds the token; the hash column holds its SHA-256.
    let rows = ok(s.transact(Mode::Read, &mut |tx| tx.query("SELECT * FROM tokens", &[])));
    assert_eq!(rows.len(), 2);
    for row in &rows {
        for v in &row.0 {
            if let Value::Text(text) = v {
                assert!(!text.contains(secret), "token stored in clear: {text}");
            }
        }
    }
    assert!(
        rows.iter()
            .any(|r| r.0.contains(&Value::Text(TokenHash::of(secret).to_hex())))
    );

    drop(s);
    let mut s = open(h);
    assert!(ok(s.revoke_token(t.id, Time(200))));
    assert!(!ok(s.revoke_token(t.id, Time(201))), "already revoked");
    assert!(
        !ok(s.revoke_token(admin.id + 50, Time(201))),
        "no such token"
    );
    assert_eq!(ok(s.active_token(&TokenHash::of(secret))), None);
    let listed = ok(s.tokens());
    assert_eq!(
        listed,
        vec![
            TokenRecord {
                revoked: Some(Time(200)),
                ..t
            },
            admin
        ]
    );
}

pub(crate) fn newer_schema_is_refused<H: Harness>(h: &H) {
    let mut s = open(h);
    assert_eq!(ok(s.schema_version()), SCHEMA_VERSION);
    let newer = SCHEMA_VERSION + 1;
    ok(s.transact(Mode::Write, &mut |tx| {
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from the future', 0)",
            &[Value::Int(i64::from(newer))],
        )
    }));
    drop(s);
    match h.open() {
        Err(StoreError::SchemaTooNew { found, supported }) => {
            assert_eq!((found, supported), (newer, SCHEMA_VERSION));
        }
        Err(e) => panic!("wrong error for a newer schema: {e:?}"),
        Ok(_) => panic!("a database newer than the build was opened"),
    }
    let msg = StoreError::SchemaTooNew {
        found: newer,
        supported: SCHEMA_VERSION,
    }
    .to_string();
    assert!(msg.contains(&format!("schema version {newer}")), "{msg}");
}

pub(crate) fn reopen_does_not_migrate_again<H: Harness>(h: &H) {
    let mut s = open(h);
    ok(s.submit_batch(&[new_job("u", "a", "p")]));
    drop(s);
    let mut s = open(h);
    let rows = ok(s.transact(Mode::Read, &mut |tx| {
        tx.query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
    }));
    let versions: Vec<i64> = rows.iter().map(|r| ok(r.int(0))).collect();
    let expected: Vec<i64> = (1..=i64::from(SCHEMA_VERSION)).collect();
    assert_eq!(versions, expected);
    assert_eq!(all_jobs(&mut s).len(), 1);
}

pub(crate) fn two_threads_submit_at_once<H: Harness>(h: &H) {
    // Touch the database once so both threads find it migrated or migrate it together.
    drop(open(h));
    let per_thread: Vec<Vec<JobId>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                scope.spawn(move || {
                    let mut s = open(h);
                    let mut mine = Vec::new();
                    for _ in 0..20 {
                        let user = if t == 0 { "left" } else { "right" };
                        let batch = vec![new_job(user, "a", "p"); 5];
                        mine.extend(ok(s.submit_batch(&batch)));
                        let last = mine[mine.len() - 1];
                        ok(s.record(&[change(last, running(1))]));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker thread panicked"))
            .collect()
    });
    let mut union = BTreeSet::new();
    for mine in &per_thread {
        assert_eq!(mine.len(), 100);
        assert_strictly_increasing(mine);
        union.extend(mine.iter().copied());
    }
    assert_eq!(union.len(), 200, "an id was handed out twice");
    let mut s = open(h);
    let stored = all_jobs(&mut s);
    assert_eq!(ids(&stored), union.into_iter().collect::<Vec<_>>());
    let running = stored
        .iter()
        .filter(|j| j.status.state == JobState::Running)
        .count();
    assert_eq!(running, 40);
}

pub(crate) fn out_of_range_time_is_an_error<H: Harness>(h: &H) {
    let mut s = open(h);
    let id = ok(s.submit_batch(&[new_job("u", "a", "p")]))[0];
    let err = s
        .record(&[change(
            id,
            JobStatus {
                start_time: Some(Time::NEVER),
                ..running(1)
            },
        )])
        .expect_err("a start time beyond i64 is refused");
    assert_eq!(
        err.to_string(),
        format!(
            "start time {} is out of the range the store keeps (0 to {})",
            u64::MAX,
            i64::MAX
        )
    );
}

pub(crate) fn run_specs_read_back_exactly<H: Harness>(h: &H) {
    let mut s = open(h);
    let rich = rich_run();
    let plain = RunSpec::command(vec!["sleep".into(), "1".into()], "/".into());
    let mut batch = vec![new_job("u", "a", "p"), new_job("u", "a", "p")];
    batch[0].run = rich.clone();
    batch[1].run = plain.clone();
    let ids = ok(s.submit_batch(&batch));
    assert_eq!(ok(s.run_spec(ids[0])), Some(rich.clone()));
    assert_eq!(ok(s.run_spec(ids[1])), Some(plain.clone()));
    assert_eq!(ok(s.run_spec(JobId(ids[1].0 + 1000))), None);

    // Changes of the job's status leave what it runs alone.
    ok(s.record(&[change(ids[0], running(5))]));
    drop(s);
    let mut s = open(h);
    assert_eq!(ok(s.run_spec(ids[0])), Some(rich));
    assert_eq!(ok(s.run_spec(ids[1])), Some(plain));
    assert_eq!(
        ok(s.job(ids[0])).map(|j| j.spec),
        Some(batch[0].spec.clone())
    );
}

/// A path that is not UTF-8, and so has no JSON text (where paths are bytes).
#[cfg(unix)]
fn non_utf8_path() -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Some(std::ffi::OsStr::from_bytes(b"/scratch/\xff").into())
}

#[cfg(not(unix))]
fn non_utf8_path() -> Option<std::path::PathBuf> {
    None
}

pub(crate) fn unencodable_run_spec_fails_the_batch<H: Harness>(h: &H) {
    let mut s = open(h);
    let first = ok(s.submit_batch(&[new_job("u", "a", "p")]));
    let Some(work_dir) = non_utf8_path() else {
        return;
    };
    let mut bad = new_job("u", "a", "p");
    bad.run.work_dir = work_dir;
    let err = s
        .submit_batch(&[new_job("u", "a", "p"), bad])
        .expect_err("a run spec without a JSON form fails the batch");
    assert!(
        matches!(err, StoreError::Encode { what: "run spec", id, .. } if id == first[0].0 + 2),
        "{err:?}"
    );
    assert_eq!(ids(&all_jobs(&mut s)), first);
}

/// A job row as version 1 wrote it: no run spec column.
const V1_INSERT_JOB: &str = "INSERT INTO jobs (id, name, user_name, account, partition, \
    submit_time, spec, state, reason, start_time, end_time, allocation, exit_code, requeues) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, NULL, NULL, 0)";

pub(crate) fn version_1_database_migrates_keeping_its_rows<H: Harness>(h: &H) {
    let first_migration = &crate::schema::MIGRATIONS[0];
    assert_eq!(first_migration.version, 1);
    let old_spec = rich_spec();
    let status = JobStatus::submitted();
    let mut s = match h.open_unmigrated() {
        Ok(s) => s,
        Err(e) => panic!("failed to open the bare database: {e} ({e:?})"),
    };
    ok(s.transact(Mode::Write, &mut |tx| {
        crate::schema::apply(tx, first_migration, 0).map(|_| ())
    }));
    // Two jobs submitted by version 1, the way it did: ids from the counter.
    ok(s.transact(Mode::Write, &mut |tx| {
        tx.execute(
            "UPDATE counters SET next_value = next_value + 2 WHERE name = 'job'",
            &[],
        )?;
        for id in [1, 2] {
            tx.execute(
                V1_INSERT_JOB,
                &[
                    Value::Int(id),
                    Value::from(old_spec.name.as_str()),
                    Value::from(old_spec.user.as_str()),
                    Value::from(old_spec.account.as_str()),
                    Value::from("gpu"),
                    Value::Int(1_700_000_000),
                    Value::Text(serde_json::to_string(&old_spec).expect("spec as JSON")),
                    Value::from("PENDING"),
                    Value::Text(serde_json::to_string(&status.reason).expect("reason as JSON")),
                ],
            )?;
        }
        Ok(())
    }));
    let versions = |s: &mut H::Store| -> Vec<i64> {
        let rows = ok(s.transact(Mode::Read, &mut |tx| {
            tx.query(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )
        }));
        rows.iter().map(|r| ok(r.int(0))).collect()
    };
    assert_eq!(versions(&mut s), vec![1]);
    drop(s);

    let mut s = open(h);
    assert_eq!(ok(s.schema_version()), SCHEMA_VERSION);
    assert_eq!(
        versions(&mut s),
        (1..=i64::from(SCHEMA_VERSION)).collect::<Vec<_>>()
    );
    let old = |id| StoredJob {
        id: JobId(id),
        spec: old_spec.clone(),
        partition: "gpu".into(),
        status: JobStatus::submitted(),
    };
    assert_eq!(all_jobs(&mut s), vec![old(1), old(2)]);
    assert_eq!(ids(&ok(s.unfinished_jobs())), vec![JobId(1), JobId(2)]);
    // The old jobs have nothing to launch, and say so by name.
    let err = s
        .run_spec(JobId(1))
        .expect_err("a version 1 job has no run spec");
    assert!(
        matches!(err, StoreError::MissingRunSpec { id: 1 }),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("job 1 was submitted before"),
        "{err}"
    );
    // They still change state, and end with an accounting row.
    ok(s.record(&[JobChange {
        id: JobId(2),
        status: JobStatus {
            state: JobState::Failed,
            end_time: Some(Time(1_700_000_050)),
            ..JobStatus::submitted()
        },
        ended_run: Some(RunUsage {
            gpu_milli: 0,
            cpus: 0,
            nodes: String::new(),
        }),
    }]));
    assert_eq!(ok(s.accounting(&AccountingFilter::default())).len(), 1);
    // New jobs continue the old ids and keep their run specs.
    let new = ok(s.submit_batch(&[NewJob {
        run: rich_run(),
        ..new_job("u", "a", "p")
    }]));
    assert_eq!(new, vec![JobId(3)]);
    assert_eq!(ok(s.run_spec(JobId(3))), Some(rich_run()));
    drop(s);
    let mut s = open(h);
    assert_eq!(ok(s.job(JobId(1))), Some(old(1)));
    assert_eq!(ok(s.run_spec(JobId(3))), Some(rich_run()));
}

pub(crate) fn steps_are_written_at_start_and_replaced_at_end<H: Harness>(h: &H) {
    let mut s = open(h);
    let ids = ok(s.submit_batch(&[
        new_job("alice", "physics", "gpu"),
        new_job("bob", "bio", "gpu"),
    ]));
    let step = |job: JobId, step: u32| crate::StepRecord {
        job,
        step,
        name: "python".into(),
        state: JobState::Running,
        nodes: "node[001-002]".into(),
        ntasks: 4,
        cpus: 8,
        start_time: Time(1_700_000_100),
        end_time: None,
        exit_code: None,
        command: "python -u train.py".into(),
    };
    ok(s.record_steps(&[step(ids[0], 0), step(ids[0], 1), step(ids[1], 0)]));
    let mut ended = step(ids[0], 0);
    ended.state = JobState::Failed;
    ended.end_time = Some(Time(1_700_000_200));
    ended.exit_code = Some(3);
    ok(s.record_steps(&[ended.clone()]));
    drop(s);
    let mut s = open(h);
    let all = ok(s.steps(&crate::StepFilter::default()));
    assert_eq!(
        all,
        vec![ended.clone(), step(ids[0], 1), step(ids[1], 0)],
        "steps read back in (job, step) order, the ended one replaced whole"
    );
    let first = ok(s.steps(&crate::StepFilter {
        jobs: vec![ids[0]],
        unfinished: false,
    }));
    assert_eq!(first, vec![ended, step(ids[0], 1)]);
    let running = ok(s.steps(&crate::StepFilter {
        jobs: Vec::new(),
        unfinished: true,
    }));
    assert_eq!(running, vec![step(ids[0], 1), step(ids[1], 0)]);
}

pub(crate) fn specs_are_replaced_whole<H: Harness>(h: &H) {
    let mut s = open(h);
    let ids = ok(s.submit_batch(&[new_job("alice", "physics", "gpu")]));
    let mut spec = ok(s.job(ids[0])).expect("the job").spec;
    spec.time_limit = Dur(90);
    spec.nice = 7;
    ok(s.update_specs(&[(ids[0], spec.clone())]));
    drop(s);
    let mut s = open(h);
    assert_eq!(ok(s.job(ids[0])).expect("the job").spec, spec);
    assert!(matches!(
        s.update_specs(&[(JobId(999_999), spec)]),
        Err(StoreError::UnknownJob { id: 999_999 })
    ));
}

fn queue_object(kind: &str, namespace: &str, name: &str, manifest: &str) -> QueueObjectRecord {
    QueueObjectRecord {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        manifest: manifest.into(),
        applied: Time(1_700_000_000),
    }
}

pub(crate) fn queue_objects_replace_in_place_delete_and_survive_reopen<H: Harness>(h: &H) {
    let mut s = open(h);
    assert!(ok(s.queue_objects()).is_empty());
    let flavor = queue_object("ResourceFlavor", "", "default", "{\"f\":1}");
    let cq = queue_object("ClusterQueue", "", "team", "{\"q\":1}");
    let lq = queue_object("LocalQueue", "ml", "team", "{\"l\":1}");
    ok(s.change_queue_objects(&[flavor.clone(), cq.clone(), lq.clone()], &[]));
    assert_eq!(
        ok(s.queue_objects()),
        [flavor.clone(), cq.clone(), lq.clone()]
    );
    // A new version of the ClusterQueue replaces it where it was; one LocalQueue of the
    // same name in another namespace is another object.
    let cq2 = QueueObjectRecord {
        manifest: "{\"q\":2}".into(),
        applied: Time(1_700_000_100),
        ..cq.clone()
    };
    let other_lq = queue_object("LocalQueue", "default", "team", "{}");
    ok(s.change_queue_objects(&[cq2.clone(), other_lq.clone()], &[]));
    drop(s);
    let mut s = open(h);
    assert_eq!(
        ok(s.queue_objects()),
        [flavor.clone(), cq2.clone(), lq.clone(), other_lq.clone()]
    );
    // Deleted, with a key that is not there: no error; put back, it comes last.
    let missing = queue_object("ClusterQueue", "", "nope", "{}").key();
    ok(s.change_queue_objects(&[], &[lq.key(), missing]));
    assert_eq!(
        ok(s.queue_objects()),
        [flavor.clone(), cq2.clone(), other_lq.clone()]
    );
    ok(s.change_queue_objects(std::slice::from_ref(&lq), &[]));
    assert_eq!(ok(s.queue_objects()), [flavor, cq2, other_lq, lq]);
}

pub(crate) fn a_failed_queue_object_change_commits_nothing<H: Harness>(h: &H) {
    let mut s = open(h);
    let cq = queue_object("ClusterQueue", "", "team", "{}");
    ok(s.change_queue_objects(std::slice::from_ref(&cq), &[]));
    let bad = QueueObjectRecord {
        applied: Time(u64::MAX),
        ..queue_object("ClusterQueue", "", "other", "{}")
    };
    let err = s.change_queue_objects(&[bad], &[cq.key()]);
    assert!(
        matches!(err, Err(StoreError::OutOfRange { .. })),
        "an apply time beyond 64-bit signed seconds is refused: {err:?}"
    );
    assert_eq!(
        ok(s.queue_objects()),
        [cq],
        "the delete was rolled back too"
    );
}

pub(crate) fn job_events_read_back_in_order_and_need_their_job<H: Harness>(h: &H) {
    let mut s = open(h);
    let ids = ok(s.submit_batch(&[new_job("u", "a", "p"), new_job("u", "a", "p")]));
    let event = |job: JobId, at: u64, kind: &str, warning: bool| JobEvent {
        job,
        at: Time(at),
        kind: kind.into(),
        warning,
        message: format!("{kind} of {job}"),
    };
    ok(s.add_job_events(&[
        event(ids[0], 10, "Submitted", false),
        event(ids[1], 10, "Submitted", false),
    ]));
    ok(s.add_job_events(&[
        event(ids[0], 12, "Started", false),
        event(ids[0], 12, "TasksFailed", true),
    ]));
    drop(s);
    let mut s = open(h);
    assert_eq!(
        ok(s.job_events(ids[0])),
        [
            event(ids[0], 10, "Submitted", false),
            event(ids[0], 12, "Started", false),
            event(ids[0], 12, "TasksFailed", true),
        ]
    );
    assert_eq!(ok(s.job_events(ids[1])).len(), 1);
    assert!(ok(s.job_events(JobId(999))).is_empty());
    // An event of a job the store does not have fails its whole batch.
    let err = s.add_job_events(&[
        event(ids[1], 20, "Started", false),
        event(JobId(999), 20, "Started", false),
    ]);
    assert!(
        matches!(err, Err(StoreError::UnknownJob { id: 999 })),
        "{err:?}"
    );
    assert_eq!(ok(s.job_events(ids[1])).len(), 1);
}

pub(crate) fn join_tokens_enrol_once_and_a_node_has_one_live_certificate<H: Harness>(h: &H) {
    let mut s = open(h);
    let token = |secret: &str, node: Option<&str>, expires: u64| NewJoinToken {
        hash: TokenHash::of(secret),
        node: node.map(str::to_owned),
        created: Time(100),
        expires: Time(expires),
    };
    let cert = |serial: &str, node: &str, at: u64| NodeCertRecord {
        serial: serial.into(),
        node: node.into(),
        issued: Time(at),
        expires: Time(at + 1000),
        revoked: None,
    };
    ok(s.create_join_token(&token("any", None, 500)));
    ok(s.create_join_token(&token("for-b", Some("b"), 500)));
    ok(s.create_join_token(&token("late", None, 150)));
    ok(s.create_join_token(&token("again", Some("a"), 500)));
    ok(s.create_join_token(&token("any-2", None, 500)));
    let dup = s.create_join_token(&token("any", None, 900));
    assert!(matches!(dup, Err(StoreError::DuplicateToken)), "{dup:?}");
    // The node a token was made for names an agent that does not say its own.
    let named = |s: &mut H::Store, secret: &str| ok(s.join_token_node(&TokenHash::of(secret)));
    assert_eq!(named(&mut s, "for-b"), Some("b".to_string()));
    assert_eq!(named(&mut s, "any"), None);
    assert_eq!(named(&mut s, "nope"), None);
    let enrol = |s: &mut H::Store, secret: &str, c: &NodeCertRecord| {
        ok(s.enrol_node(&TokenHash::of(secret), c))
    };
    assert_eq!(
        enrol(&mut s, "nope", &cert("01", "a", 200)),
        Err(JoinRefused::Unknown)
    );
    assert_eq!(
        enrol(&mut s, "late", &cert("01", "a", 200)),
        Err(JoinRefused::Expired)
    );
    assert_eq!(
        enrol(&mut s, "for-b", &cert("01", "a", 200)),
        Err(JoinRefused::OtherNode("b".into()))
    );
    assert_eq!(ok(s.node_certs()), Vec::new(), "a refusal writes nothing");
    assert_eq!(enrol(&mut s, "any", &cert("01", "a", 200)), Ok(()));
    assert_eq!(
        enrol(&mut s, "any", &cert("02", "a", 201)),
        Err(JoinRefused::Used),
        "a token enrols once"
    );
    assert_eq!(enrol(&mut s, "for-b", &cert("03", "b", 202)), Ok(()));
    // A token for any node does not take over an enrolled one; one made for it does, and
    // revokes the node's earlier certificate.
    assert_eq!(
        enrol(&mut s, "any-2", &cert("05", "a", 250)),
        Err(JoinRefused::Enrolled("a".into()))
    );
    drop(s);
    let mut s = open(h);
    assert_eq!(enrol(&mut s, "again", &cert("04", "a", 300)), Ok(()));
    assert_eq!(
        ok(s.node_cert("01")).and_then(|c| c.revoked),
        Some(Time(300))
    );
    assert_eq!(ok(s.node_cert("04")).map(|c| c.revoked), Some(None));
    assert_eq!(ok(s.node_cert("ff")), None);
    assert_eq!(ok(s.revoke_node_certs("b", Time(400))), 1);
    assert_eq!(ok(s.revoke_node_certs("b", Time(401))), 0);
    let live: Vec<String> = ok(s.node_certs())
        .into_iter()
        .filter(|c| c.revoked.is_none())
        .map(|c| c.serial)
        .collect();
    assert_eq!(live, ["04"]);
    // Only hashes are kept.
    let rows = ok(s.transact(Mode::Read, &mut |tx| {
        tx.query("SELECT * FROM join_tokens", &[])
    }));
    for row in &rows {
        for v in &row.0 {
            if let Value::Text(text) = v {
                assert!(
                    text != "any" && text != "for-b",
                    "join token stored in clear"
                );
            }
        }
    }
}
