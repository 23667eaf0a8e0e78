//! Job tokens: the credential a job's tasks reach the controller with, to start steps of
//! their own job (MPI's `cadre-rsh` in a Kubernetes workload's launcher, which has no
//! token of the user's).
//!
//! **Given** the cluster's agent key, which the controller and every agent hold. **Made**
//! by the agent that launches the task, without asking the controller, for one run of the
//! job (its requeue count when it started, [`crate::agent::RunRef::run`]):
//! `cadre-job-<job id>-<run>-<HMAC-SHA256 of "cadre job <id> run <run>" under the agent
//! key, in hex>`. **Checked** by the controller ([`verify`]), which then takes the caller
//! for the job's user, and only while that very run lives: once the job ends or goes back
//! to the queue, the token is worth nothing, also when the job runs again. **Must hold**:
//! nobody without the agent key can make a job's token; a token names one run of one job
//! and proves nothing about another job or another run of the same job.

use cadre_core::job::JobId;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const PREFIX: &str = "cadre-job-";

fn mac(agent_key: &str, job: JobId, run: u32) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(agent_key.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("cadre job {} run {run}", job.0).as_bytes());
    mac
}

/// The token of run `run` of job `job` under `agent_key`.
pub fn make(agent_key: &str, job: JobId, run: u32) -> String {
    let digest = mac(agent_key, job, run).finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}-{run}-{hex}", job.0)
}

/// Whether `token` has a job token's shape (whether it is valid or not).
pub fn is_job_token(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// The job and run whose token `token` is under `agent_key`, or `None` when it is not one
/// (in time independent of where a forged code differs).
pub fn verify(agent_key: &str, token: &str) -> Option<(JobId, u32)> {
    let (id, rest) = token.strip_prefix(PREFIX)?.split_once('-')?;
    let (run, hex) = rest.split_once('-')?;
    let job = JobId(id.parse().ok()?);
    let run: u32 = run.parse().ok()?;
    if hex.len() != 64 {
        return None;
    }
    let code: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    mac(agent_key, job, run).verify_slice(&code).ok()?;
    Some((job, run))
}

/// The controller's seal on `what` under `agent_key` (hex HMAC-SHA256 of `cadre seal
/// <what>`): what it decided for a job and keeps in the job's spec, which no one without
/// the key can make, so that a value a submitter wrote there (to a controller that did not
/// yet clear it) is never taken for the controller's.
pub fn seal(agent_key: &str, what: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(agent_key.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("cadre seal {what}").as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `code` is the seal of `what` under `agent_key` (in time independent of where a
/// forged code differs); never with an empty key.
pub fn sealed(agent_key: &str, what: &str, code: &str) -> bool {
    if agent_key.is_empty() || code.len() != 64 {
        return false;
    }
    let Some(bytes) = (0..32)
        .map(|i| u8::from_str_radix(code.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(agent_key.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("cadre seal {what}").as_bytes());
    mac.verify_slice(&bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_for_its_value_and_key_alone() {
        let code = seal("k", "a");
        assert!(sealed("k", "a", &code));
        assert!(!sealed("k", "b", &code));
        assert!(!sealed("other", "a", &code));
        assert!(!sealed("", "a", &seal("", "a")));
        assert!(!sealed("k", "a", "zz"));
    }

    #[test]
    fn a_token_names_one_run_of_its_job_under_its_key_only() {
        let t = make("key", JobId(42), 3);
        assert!(t.starts_with("cadre-job-42-3-") && t.len() == "cadre-job-42-3-".len() + 64);
        assert!(is_job_token(&t));
        assert_eq!(verify("key", &t), Some((JobId(42), 3)));
        assert_eq!(verify("other key", &t), None);
        // Another job's id or another run with this code, a changed code, and shapes that
        // are not tokens.
        assert_eq!(verify("key", &t.replace("-42-", "-43-")), None);
        assert_eq!(verify("key", &t.replace("-42-3-", "-42-4-")), None);
        assert_ne!(make("key", JobId(42), 4), t);
        let mut forged = t.clone();
        forged.replace_range(t.len() - 1.., if t.ends_with('0') { "1" } else { "0" });
        assert_eq!(verify("key", &forged), None);
        for bad in [
            "cadre-job-42",
            "cadre-job-x-00",
            "cadre-job-42-zz",
            "cadre-job-42-3-zz",
            "cadre-job-42-x-00",
            "abc",
        ] {
            assert_eq!(verify("key", bad), None, "{bad}");
        }
    }
}
