//! What the agent writes down about each run it supervises, so that its next life can
//! adopt the run's tasks instead of losing them (an agent killed with SIGKILL and started
//! again): the controller's order, the node's id in it, when the tasks started, and for
//! each task its keeper, cgroup and status file ([`crate::keeper`]).
//!
//! One file per run in `state_dir/runs/` (0700), written whole to a new file renamed over
//! the old (a crash leaves the old record or the new, never half of one), 0600 and never
//! through a link: it holds the order, with the job's token and environment. Written once
//! the run's tasks have started; removed once its end was reported. Only runs whose every
//! task has a keeper and a cgroup of its own get a record: only those can be told apart
//! from whatever else runs on the node after a restart.

use crate::prolog::JobFacts;
use cadre_core::cluster::NodeId;
use cadre_proto::agent::{LaunchOrder, RunRef};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The directory of the run records, in the agent's state directory.
pub(crate) const RUNS_DIR: &str = "runs";

/// The largest record read back: an order is bounded by the controller's own limits; a
/// larger file is not the agent's.
const MAX_RECORD: u64 = 64 << 20;

/// One task of a recorded run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    /// Its position in the allocation.
    pub(crate) index: usize,
    /// Its keeper's pid, and when that process started (clock ticks since boot), which
    /// tells it from a later process given the same pid.
    pub(crate) keeper: u32,
    pub(crate) keeper_start: u64,
    pub(crate) cgroup: PathBuf,
    pub(crate) status: PathBuf,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: Option<PathBuf>,
    /// `(runtime command, container name)` of a container task.
    pub(crate) container: Option<(Vec<String>, String)>,
    pub(crate) leftovers_outlive: bool,
}

/// A run the agent supervises, as written down.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) order: LaunchOrder,
    pub(crate) node_id: NodeId,
    /// When its tasks started: CLOCK_MONOTONIC, in nanoseconds (the machine's clock since
    /// boot, the same for every process), for its time limit.
    pub(crate) started_ns: u64,
    /// The run's directory (script, job files), removed at its end.
    pub(crate) script_dir: Option<PathBuf>,
    /// What its epilog is told, for a job's run (not a step's).
    pub(crate) facts: Option<JobFacts>,
    /// Empty: a run holding its share of the node with nothing to run (an allocation).
    pub(crate) tasks: Vec<TaskRecord>,
}

fn file_name(run: RunRef) -> String {
    match run.step {
        None => format!("job{}.{}.json", run.job, run.run),
        Some(s) => format!("job{}.{}.step{s}.json", run.job, run.run),
    }
}

/// Writes the record of its run, replacing an older one.
pub(crate) fn write(state_dir: &Path, record: &RunRecord) -> io::Result<()> {
    let dir = state_dir.join(RUNS_DIR);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)?;
    let path = dir.join(file_name(record.order.run));
    let tmp = path.with_extension("new");
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(record).map_err(io::Error::other)?)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// Drops a record whose run is not adopted: the record, and its tasks' status files.
pub(crate) fn forget(state_dir: &Path, record: &RunRecord) {
    for t in &record.tasks {
        let _ = std::fs::remove_file(&t.status);
    }
    remove(state_dir, record.order.run);
}

/// Removes the record of `run`, if any.
pub(crate) fn remove(state_dir: &Path, run: RunRef) {
    let _ = std::fs::remove_file(state_dir.join(RUNS_DIR).join(file_name(run)));
}

/// Every record a previous life left, and what could not be read (path, why; removed).
/// The records read stay until their runs end here ([`remove`]), or are dropped
/// ([`forget`]).
///
/// A previous life killed after writing a record whole but before renaming it into place
/// left a `.new` file that reads as a whole record (JSON read to its end: a cut one does
/// not): that rename is finished here, so the run is adopted rather than lost with its
/// tasks. A `.new` file that does not read whole is removed, and the record it was to
/// replace, if any, stands.
pub(crate) fn take_all(state_dir: &Path) -> (Vec<RunRecord>, Vec<(PathBuf, String)>) {
    let (mut records, mut bad) = (Vec::new(), Vec::new());
    let dir = state_dir.join(RUNS_DIR);
    let unrenamed: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "new"))
        .collect();
    for path in unrenamed {
        let done = read_record(&path).and_then(|_| {
            std::fs::rename(&path, path.with_extension("json")).map_err(|e| e.to_string())
        });
        if let Err(why) = done {
            bad.push((path.clone(), why));
            let _ = std::fs::remove_file(&path);
        }
    }
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (records, bad);
    };
    for e in entries.flatten() {
        let path = e.path();
        match read_record(&path) {
            Ok(r) if path.extension().is_some_and(|x| x == "json") => {
                records.push(r);
                continue;
            }
            Ok(_) => bad.push((path.clone(), "not a .json record".into())),
            Err(why) => bad.push((path.clone(), why)),
        }
        let _ = std::fs::remove_file(&path);
    }
    records.sort_by_key(|r| r.order.run);
    (records, bad)
}

/// Reads one record whole, never through a link.
fn read_record(path: &Path) -> Result<RunRecord, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.len() > MAX_RECORD {
        return Err(format!(
            "not a record (a regular file of at most {MAX_RECORD} bytes)"
        ));
    }
    serde_json::from_reader(io::BufReader::new(f)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of run `run` of job `job`, on node 0, with `tasks`.
    fn record_of(job: u64, run: u32, tasks: Vec<TaskRecord>) -> RunRecord {
        let mut order = *super::super::session::tests::order(job);
        order.run = RunRef::job_run(cadre_core::job::JobId(job), run);
        RunRecord {
            order,
            node_id: NodeId(0),
            started_ns: 5,
            script_dir: None,
            facts: None,
            tasks,
        }
    }

    #[test]
    fn records_are_private_read_back_whole_and_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let record = record_of(
            4,
            2,
            vec![TaskRecord {
                index: 0,
                keeper: 99,
                keeper_start: 1234,
                cgroup: "/sys/fs/cgroup/x/job4.2.task0".into(),
                status: "/state/tasks/job4.2.task0".into(),
                stdout: "/home/a/out".into(),
                stderr: None,
                container: None,
                leftovers_outlive: false,
            }],
        );
        write(dir.path(), &record).unwrap();
        use std::os::unix::fs::PermissionsExt;
        // No one but root may put a record (or a `.new` one to be renamed into place) there.
        assert_eq!(
            std::fs::metadata(dir.path().join("runs"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let path = dir.path().join("runs/job4.2.json");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(dir.path().join("runs/job5.0.json"), "{half").unwrap();
        let (got, bad) = take_all(dir.path());
        assert_eq!(got, vec![record.clone()]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        // The unreadable one is gone; the record stays until its run ends or is dropped.
        assert_eq!(take_all(dir.path()), (vec![record.clone()], Vec::new()));
        forget(dir.path(), &record);
        assert_eq!(take_all(dir.path()).0, Vec::new());
    }

    /// Regression: an agent killed between writing a run's record and renaming it into
    /// place (the multi-host test killed one while `sync_all` ran) lost the run, and its
    /// next life killed the tasks it should have adopted.
    #[test]
    fn a_record_written_whole_but_not_renamed_is_adopted_and_a_cut_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let record = record_of(7, 0, Vec::new());
        write(dir.path(), &record).unwrap();
        let runs = dir.path().join("runs");
        std::fs::rename(runs.join("job7.0.json"), runs.join("job7.0.new")).unwrap();
        let text = serde_json::to_string(&record).unwrap();
        std::fs::write(runs.join("job8.0.new"), &text[..text.len() / 2]).unwrap();
        let (got, bad) = take_all(dir.path());
        assert_eq!(got, vec![record.clone()]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].0.ends_with("job8.0.new"), "{bad:?}");
        assert!(runs.join("job7.0.json").exists(), "the rename was finished");
        assert!(
            !runs.join("job8.0.new").exists(),
            "the cut record was removed"
        );
        // The record is in place: its run's end removes it as any other.
        remove(dir.path(), record.order.run);
        assert_eq!(take_all(dir.path()), (Vec::new(), Vec::new()));
    }
}
