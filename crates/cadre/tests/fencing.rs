//! Fencing: an agent whose pings its controller no longer answers cannot renew its lease,
//! and stops its runs itself by the lease's end, before the controller could requeue them
//! elsewhere (the lease and a margin after the agent's last frame); it reports them
//! NODE_FAIL once it is heard again, so that the job is requeued whole.

use cadre_test_support::{Cluster, read_pid, wait_until};

/// The pids of processes whose command line is exactly `words`.
fn processes(words: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).expect("the signal is sent");
}

#[test]
fn an_agent_cut_off_from_its_controller_stops_its_runs_before_they_are_requeued() {
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(1)
        .args(&["--node-lease", "3"])
        .start();
    // A command line no other test runs.
    let marker = ["sleep", "4217.5"];
    let out = c.ok(&["submit", "--parsable", "--", marker[0], marker[1]]);
    let id: u64 = out.trim().parse().expect("a job id");
    wait_until("the job's task runs", || processes(&marker).len() == 1);
    let controller = read_pid(&c.data().join("cadre.pid"));
    // The controller stops answering: it can neither stop the task nor requeue the job.
    signal(controller, nix::sys::signal::Signal::SIGSTOP);
    let resume = Resume(controller);
    wait_until("the agent stops the task on its own", || {
        processes(&marker).is_empty()
    });
    drop(resume);
    // Heard again: the run is reported a node failure, and the job goes back whole.
    wait_until("the job is requeued", || {
        let (_, job) = c.api("GET", &format!("/jobs/{id}"), None);
        job["requeues"].as_u64() == Some(1)
    });
    let agent_log = c.data().join("agents/node001.log");
    let log = std::fs::read_to_string(&agent_log).unwrap_or_default();
    assert!(
        log.contains("stopping every run (fencing)"),
        "the agent's log does not say why: {log}"
    );
}

/// Resumes the controller when dropped, also when the test fails.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}
