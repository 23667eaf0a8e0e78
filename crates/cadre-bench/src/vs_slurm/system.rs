//! One system under test, driven as a user drives it: its `sbatch`, `squeue` and `scancel`
//! (the reference's by full path, cadre's through the links `cadre install-aliases` makes),
//! and its own records of finished jobs (Slurm's jobcomp file, cadre's accounting API).

use super::reference;
use super::replay::RunRecord;
use anyhow::{Context, Result, bail};
use cadre_client::{Client, Target};
use cadre_proto::api::UsageList;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cadre,
    Slurm,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cadre => "cadre",
            Kind::Slurm => "Slurm",
        }
    }
}

/// A system the workloads run on.
pub struct System {
    pub kind: Kind,
    /// The directory of its `sbatch`, `squeue` and `scancel`.
    bin: PathBuf,
    /// Variables its commands need (cadre: the data directory).
    env: Vec<(String, String)>,
    /// The jobs' working directory (where `slurm-%j.out` files land).
    pub work: PathBuf,
    /// CPUs a job asks per task so that as many jobs fit a node on both systems.
    pub cpus_per_job: u32,
    /// Where its records are: cadre's data directory, or Slurm's jobcomp file.
    records: PathBuf,
    /// The jobcomp file's length when the bench started: only later lines are this run's
    /// (job ids start again at 1 when the reference loses its state).
    records_from: u64,
    /// Every job the bench submitted here by `sbatch`: on the reference, the bench waits
    /// for and cancels only its own jobs.
    submitted: Mutex<BTreeSet<u64>>,
}

impl System {
    pub fn slurm(work: PathBuf, cpus_per_job: u32, jobcomp: PathBuf) -> System {
        System {
            kind: Kind::Slurm,
            bin: PathBuf::from("/usr/bin"),
            env: Vec::new(),
            work,
            cpus_per_job,
            records_from: std::fs::metadata(&jobcomp).map_or(0, |m| m.len()),
            records: jobcomp,
            submitted: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn cadre(bin: PathBuf, data_dir: &Path, work: PathBuf, cpus_per_job: u32) -> System {
        System {
            kind: Kind::Cadre,
            bin,
            env: vec![("CADRE_DATA_DIR".into(), data_dir.display().to_string())],
            work,
            cpus_per_job,
            records: data_dir.to_path_buf(),
            records_from: 0,
            submitted: Mutex::new(BTreeSet::new()),
        }
    }

    /// The path of one of its commands.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// One of its commands, with its environment, run in the work directory.
    pub fn command(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.tool(name));
        cmd.current_dir(&self.work)
            .env_remove("CADRE_SERVER")
            .env_remove("CADRE_TOKEN")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// `sbatch --parsable ARGS` (the arguments include `--parsable`): the job's id.
    pub fn submit(&self, args: &[String]) -> Result<u64> {
        let out = self
            .command("sbatch")
            .args(args)
            .output()
            .with_context(|| format!("failed to run {}'s sbatch", self.kind.name()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let id = text.trim().split(';').next().and_then(|v| v.parse().ok());
        match (out.status.success(), id) {
            (true, Some(id)) => {
                self.note_submitted([id]);
                Ok(id)
            }
            _ => bail!(
                "{}'s sbatch {} failed ({}): {}",
                self.kind.name(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    fn note_submitted(&self, ids: impl IntoIterator<Item = u64>) {
        if let Ok(mut s) = self.submitted.lock() {
            s.extend(ids);
        }
    }

    /// The bench's jobs pending, running or completing: on cadre's own cluster every
    /// job; on the reference, those the bench submitted.
    pub fn active(&self) -> Result<BTreeSet<u64>> {
        let mut all = self.listed()?;
        if self.kind == Kind::Slurm
            && let Ok(mine) = self.submitted.lock()
        {
            all.retain(|id| mine.contains(id));
        }
        Ok(all)
    }

    /// Ids of the jobs pending, running or completing (`squeue -h -o %i`).
    fn listed(&self) -> Result<BTreeSet<u64>> {
        let out = self
            .command("squeue")
            .args(["-h", "-r", "-o", "%i"])
            .output()
            .with_context(|| format!("failed to run {}'s squeue", self.kind.name()))?;
        if !out.status.success() {
            bail!(
                "{}'s squeue failed ({}): {}",
                self.kind.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().split('_').next()?.parse().ok())
            .collect())
    }

    /// `squeue -h -j ID -o %T`: the job's state, if it is still listed.
    pub fn state(&self, id: u64) -> Result<Option<String>> {
        let out = self
            .command("squeue")
            .args(["-h", "-j", &id.to_string(), "-o", "%T"])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((!text.is_empty()).then_some(text))
    }

    /// Cancels the bench's jobs that are still queued or running: on cadre's own cluster
    /// every job of this user (`scancel -u USER`), on the reference those the bench
    /// submitted. Jobs ending meanwhile make scancel complain and exit 1; what matters is
    /// that none is left, which [`System::wait_idle`] checks.
    pub fn cancel_all(&self) -> Result<()> {
        if self.kind == Kind::Slurm {
            let ids: Vec<u64> = self.active()?.into_iter().collect();
            for chunk in ids.chunks(1000) {
                self.cancel(chunk);
            }
            return Ok(());
        }
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map_or_else(|| "root".to_string(), |u| u.name);
        self.command("scancel")
            .args(["-u", &user])
            .output()
            .with_context(|| format!("failed to run {}'s scancel", self.kind.name()))?;
        Ok(())
    }

    /// Cancels the given jobs.
    pub fn cancel(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let _ = self
            .command("scancel")
            .args(ids.iter().map(u64::to_string))
            .output();
    }

    /// Waits until no job is pending or running, up to `timeout`.
    pub fn wait_idle(&self, timeout: Duration, what: &str) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let bar = indicatif::ProgressBar::new_spinner();
        loop {
            let n = self.active()?.len();
            if n == 0 {
                bar.finish_and_clear();
                return Ok(());
            }
            bar.set_message(format!("{}: {what}: {n} jobs left", self.kind.name()));
            bar.tick();
            if Instant::now() > deadline {
                bar.finish_and_clear();
                bail!(
                    "{}: {n} jobs were still queued or running {} s after {what}",
                    self.kind.name(),
                    timeout.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The system's own records of the ended runs of `ids`.
    pub fn records(&self, ids: &BTreeSet<u64>) -> Result<BTreeMap<u64, RunRecord>> {
        let mut all = match self.kind {
            Kind::Slurm => {
                let text = match std::fs::read(&self.records) {
                    Ok(mut t) => {
                        t.drain(..(self.records_from as usize).min(t.len()));
                        String::from_utf8_lossy(&t).into_owned()
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!(
                                "failed to read Slurm's jobcomp file {}",
                                self.records.display()
                            )
                        });
                    }
                };
                reference::parse_jobcomp(&text)
            }
            Kind::Cadre => self.cadre_usage(ids)?,
        };
        all.retain(|id, _| ids.contains(id));
        Ok(all)
    }

    /// cadre's accounting (`GET /usage`), one row per run, paged by job id.
    fn cadre_usage(&self, ids: &BTreeSet<u64>) -> Result<BTreeMap<u64, RunRecord>> {
        let mut out: BTreeMap<u64, RunRecord> = BTreeMap::new();
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return Ok(out);
        };
        let mut client = Client::connect(&Target::of_data_dir(&self.records), None)?;
        let mut after = first - 1;
        loop {
            let page: UsageList = client.get(&format!("/usage?after={after}&limit=5000"))?;
            let Some(max) = page.runs.iter().map(|r| r.job.0).max() else {
                break;
            };
            for r in page.runs {
                let Some(start) = r.start_time else { continue };
                let nodes = cadre_core::hostlist::expand(&r.nodes).map_or(0, |v| v.len()) as u32;
                let rec = RunRecord {
                    submit: r.submit_time as f64,
                    start: start as f64,
                    end: r.end_time as f64,
                    nodes,
                    gpus: Some(r.gpus),
                };
                out.entry(r.job.0)
                    .and_modify(|e| {
                        e.start = e.start.min(rec.start);
                        e.end = e.end.max(rec.end);
                    })
                    .or_insert(rec);
            }
            if max >= last || max <= after {
                break;
            }
            after = max;
        }
        Ok(out)
    }
}

/// Runs `jobs` submissions of `sbatch ARGS` from `shells` concurrent shells (`sh -c` loops,
/// as users' scripts submit), each printing `Submitted batch job N`. Returns the seconds
/// from the first shell's start to the last one's end and how many submissions printed no
/// job id.
pub fn submit_from_shells(
    sys: &System,
    jobs: u32,
    shells: u32,
    args: &[&str],
) -> Result<(f64, u32)> {
    let shells = shells.max(1);
    let script = r#"n=$1; shift; i=0
while [ "$i" -lt "$n" ]; do
  "$SBATCH" "$@" || echo "sbatch failed" >&2
  i=$((i + 1))
done"#;
    let t0 = Instant::now();
    let mut children = Vec::new();
    for s in 0..shells {
        let n = jobs / shells + u32::from(s < jobs % shells);
        // `sh` with the system's environment, its sbatch in $SBATCH.
        let mut sh = Command::new("/bin/sh");
        sh.current_dir(&sys.work)
            .env_remove("CADRE_SERVER")
            .env_remove("CADRE_TOKEN")
            .envs(sys.env.iter().map(|(k, v)| (k, v)))
            .env("SBATCH", sys.tool("sbatch"))
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(n.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        children.push(sh.spawn().context("failed to start a submitting shell")?);
    }
    let mut submitted = 0u32;
    let mut first_error = None;
    for child in children {
        let out = child.wait_with_output()?;
        let ids: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("Submitted batch job ")?.trim().parse().ok())
            .collect();
        submitted += ids.len() as u32;
        sys.note_submitted(ids);
        if first_error.is_none() && !out.stderr.is_empty() {
            first_error = Some(
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let failed = jobs.saturating_sub(submitted);
    if failed == jobs {
        bail!(
            "{}: every submission failed: {}",
            sys.kind.name(),
            first_error.unwrap_or_default()
        );
    }
    Ok((seconds, failed))
}
