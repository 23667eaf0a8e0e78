//! Job tokens: the credential a job's tasks reach the controller with, to start steps of
//! their own job (MPI's `cadre-rsh` in a Kubernetes workload's launcher, which has no
//! token of the user's).
//!
//! **Given** the cluster's agent key, which the controller and every agent hold. **Made**
//! by the agent that launches the task, without asking the controller:
//! `cadre-job-<job id>-<HMAC-SHA256 of "cadre job <id>" under the agent key, in hex>`.
//! **Checked** by the controller ([`verify`]), which then takes the caller for the job's
//! user, and only while the job has not ended. **Must hold**: nobody without the agent key
//! can make a job's token; a token names one job and proves nothing about another.

use cadre_core::job::JobId;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const PREFIX: &str = "cadre-job-";

fn mac(agent_key: &str, job: JobId) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(agent_key.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(format!("cadre job {}", job.0).as_bytes());
    mac
}

/// Job `job`'s token under `agent_key`.
pub fn make(agent_key: &str, job: JobId) -> String {
    let digest = mac(agent_key, job).finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}-{hex}", job.0)
}

/// Whether `token` has a job token's shape (whether it is valid or not).
pub fn is_job_token(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// The job whose token `token` is under `agent_key`, or `None` when it is not one (in
/// time independent of where a forged code differs).
pub fn verify(agent_key: &str, token: &str) -> Option<JobId> {
    let (id, hex) = token.strip_prefix(PREFIX)?.split_once('-')?;
    let job = JobId(id.parse().ok()?);
    if hex.len() != 64 {
        return None;
    }
    let code: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    mac(agent_key, job).verify_slice(&code).ok()?;
    Some(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_job_under_its_key_only() {
        let t = make("key", JobId(42));
        assert!(t.starts_with("cadre-job-42-") && t.len() == "cadre-job-42-".len() + 64);
        assert!(is_job_token(&t));
        assert_eq!(verify("key", &t), Some(JobId(42)));
        assert_eq!(verify("other key", &t), None);
        // Another job's id with this code, a changed code, and shapes that are not tokens.
        assert_eq!(verify("key", &t.replace("-42-", "-43-")), None);
        let mut forged = t.clone();
        forged.replace_range(t.len() - 1.., if t.ends_with('0') { "1" } else { "0" });
        assert_eq!(verify("key", &forged), None);
        for bad in ["cadre-job-42", "cadre-job-x-00", "cadre-job-42-zz", "abc"] {
            assert_eq!(verify("key", bad), None, "{bad}");
        }
    }
}
