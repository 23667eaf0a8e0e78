//! The durable-submission benchmark behind `cadre bench submit`: one writer thread commits
//! batches of submissions through [`Store::submit_batch`], the way the controller's group
//! commit does, and reports jobs per second. A measurement, not a test: nothing asserts it.

use crate::Store;
use crate::error::StoreError;
use crate::records::NewJob;
use std::time::{Duration, Instant};

/// What one run of [`bench_submit`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SubmitBench {
    pub jobs: u64,
    pub batch: usize,
    pub batches: u64,
    pub elapsed: Duration,
}

impl SubmitBench {
    pub fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Mean time one group commit took.
    pub fn mean_commit(&self) -> Duration {
        self.elapsed / u32::try_from(self.batches.max(1)).unwrap_or(u32::MAX)
    }
}

/// Submits `jobs` copies of `job` in batches of `batch`, each batch one durable commit, and
/// times the whole run. The batch is built once before the clock starts: what is timed is
/// the store (encoding, SQL, commit), not cloning the submissions.
pub fn bench_submit(
    store: &mut dyn Store,
    job: &NewJob,
    jobs: u64,
    batch: usize,
) -> Result<SubmitBench, StoreError> {
    let batch = batch.max(1);
    let full = usize::try_from(jobs).map_or(batch, |jobs| jobs.min(batch));
    let submissions = vec![job.clone(); full];
    let mut done = 0u64;
    let mut batches = 0u64;
    let start = Instant::now();
    while done < jobs {
        let n = usize::try_from(jobs - done).map_or(full, |left| left.min(full));
        store.submit_batch(&submissions[..n])?;
        done += n as u64;
        batches += 1;
    }
    Ok(SubmitBench {
        jobs: done,
        batch,
        batches,
        elapsed: start.elapsed(),
    })
}
