//! `GET /ui/queue`: what the dashboard's queue page draws, from the controller's live state
//! in one read: the pending jobs in priority order and the running jobs, the first
//! `limit` of each (1,000 by default) with the few fields the page shows, and how many
//! there are in all.
//!
//! The REST API's job list (`GET /api/v1/jobs`) reads every job from the store in id order
//! with its whole record; with 10,000 pending jobs the page took over a second just to
//! fetch and sort them. The same visibility applies here as there: users see their own
//! jobs, administrators every job.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::controller::Controller;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Query, State};
use cadre_core::hostlist;
use cadre_core::job::JobState;
use cadre_core::resources::MILLI_PER_GPU;
use cadre_proto::api::ErrorCode;
use serde::{Deserialize, Serialize};

/// Rows of each list at most, by default and at most.
const DEFAULT_LIMIT: usize = 1_000;
const MAX_LIMIT: usize = 10_000;

#[derive(Debug, Deserialize)]
pub struct QueueQuery {
    /// Rows of each list at most (1 to 10,000; default 1,000).
    pub limit: Option<usize>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QueueView {
    /// Pending jobs the caller sees, in all.
    pub pending_total: usize,
    /// The first of them in priority order (highest first, then by id).
    pub pending: Vec<PendingRow>,
    pub running_total: usize,
    /// The first running jobs by id.
    pub running: Vec<RunningRow>,
    /// The controller's clock (seconds since the epoch), for elapsed times.
    pub now: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PendingRow {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub partition: String,
    pub gpus: f64,
    pub priority: u64,
    pub reason: String,
    pub expected_start: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunningRow {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub partition: String,
    pub nodes: String,
    pub gpus: f64,
    pub start_time: Option<u64>,
    pub time_limit: u64,
}

/// The view for `who` from the controller's live state.
pub fn view(c: &Controller, who: &Principal, limit: usize) -> QueueView {
    let sched = c.sched();
    let cluster = sched.cluster();
    let seen = |user: &str| who.admin || user == who.user;
    let gpus = |milli: u64| milli as f64 / MILLI_PER_GPU as f64;
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let mut running = Vec::new();
    let mut running_total = 0;
    for job in sched.jobs() {
        if !seen(&job.spec.user) {
            continue;
        }
        match job.state {
            JobState::Pending => pending.push((sched.priority(job), job.id.0)),
            JobState::Running | JobState::Preempting => {
                running_total += 1;
                if running.len() < limit {
                    running.push(job);
                }
            }
            _ => {}
        }
    }
    let pending_total = pending.len();
    let by_priority = |a: &(u64, u64), b: &(u64, u64)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    if pending.len() > limit {
        pending.select_nth_unstable_by(limit, by_priority);
        pending.truncate(limit);
    }
    pending.sort_unstable_by(by_priority);
    let pending = pending
        .into_iter()
        .filter_map(|(_, id)| {
            let id = cadre_core::job::JobId(id);
            let job = sched.job(id)?;
            let live = crate::api::live_of(c, id)?;
            Some(PendingRow {
                id: id.0,
                name: job.spec.name.clone(),
                user: job.spec.user.clone(),
                partition: cluster.partition(job.partition).name.clone(),
                gpus: gpus(job.spec.amounts().gpu_milli),
                priority: live.priority,
                reason: live.reason,
                expected_start: live.expected_start,
            })
        })
        .collect();
    let running = running
        .into_iter()
        .map(|job| {
            let names: Vec<&str> = job
                .allocation
                .as_ref()
                .map(|a| {
                    a.nodes()
                        .iter()
                        .map(|&n| cluster.node(n).name.as_str())
                        .collect()
                })
                .unwrap_or_default();
            RunningRow {
                id: job.id.0,
                name: job.spec.name.clone(),
                user: job.spec.user.clone(),
                partition: cluster.partition(job.partition).name.clone(),
                nodes: hostlist::compress(&names),
                gpus: gpus(job.spec.amounts().gpu_milli),
                start_time: job.start_time.map(|t| t.0),
                time_limit: job.spec.time_limit.0,
            }
        })
        .collect();
    QueueView {
        pending_total,
        pending,
        running_total,
        running,
        now: crate::engine::wall_now().0,
    }
}

/// `GET /ui/queue`.
pub async fn queue(
    State(st): State<AppState>,
    who: Principal,
    q: Result<Query<QueueQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<QueueView>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    let limit = match q.limit {
        None => DEFAULT_LIMIT,
        Some(n @ 1..=MAX_LIMIT) => n,
        Some(n) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("limit={n}: the queue page shows 1 to {MAX_LIMIT} rows of each list"),
            ));
        }
    };
    Ok(Json(st.engine.read(move |c| view(c, &who, limit)).await?))
}

#[cfg(test)]
mod tests {
    use super::view;
    use crate::controller::tests::{Harness, alice, gpu_job, program, root};

    /// The dashboard's queue view: the pending jobs in priority order, cut to the limit with
    /// the totals kept, and a user sees only their own jobs (as the REST API's list).
    #[test]
    fn the_queue_view_lists_pending_jobs_in_priority_order_and_only_the_user_s_own() {
        let mut h = Harness::new(2);
        h.connect_all();
        let running = h.start(gpu_job(8), program());
        let mut bob = gpu_job(8);
        bob.user = "bob".into();
        bob.account = "bob".into();
        h.submit(bob, program());
        let mut urgent = gpu_job(8);
        urgent.nice = -100;
        for spec in [gpu_job(8), urgent, gpu_job(8)] {
            h.submit(spec, program());
        }
        h.tick(true);
        let all = view(&h.ctl, &root(), 1_000);
        assert_eq!(all.pending_total, 4);
        assert_eq!(all.running_total, 1);
        assert_eq!(all.running[0].id, running.0);
        let order: Vec<(u64, u64)> = all.pending.iter().map(|r| (r.priority, r.id)).collect();
        let mut sorted = order.clone();
        sorted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        assert_eq!(order, sorted, "priority order");
        assert!(order[0].0 > order[1].0, "the nice job first: {order:?}");
        let alices = view(&h.ctl, &alice(), 2);
        assert_eq!(alices.pending_total, 3, "bob's job is not alice's to see");
        assert_eq!(alices.pending.len(), 2);
        assert!(alices.pending.iter().all(|r| r.user == "alice"));
        assert_eq!(alices.pending[0].id, all.pending[0].id);
        assert!(
            alices
                .pending
                .iter()
                .all(|r| r.reason == "Resources" || r.reason == "Priority")
        );
    }
}
