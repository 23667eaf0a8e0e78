//! `GET /ui/scheduler`: the scheduler's health now, for the dashboard's scheduler page:
//! its passes (as `sdiag` counts them), the queue, and submissions since the start. The
//! page keeps the history it draws itself, from the samples it took while open.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use cadre_core::job::JobState;
use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SchedulerView {
    /// Scheduling passes since the controller started.
    pub passes: i64,
    /// The last, longest and mean pass, in microseconds.
    pub last_pass_us: i64,
    pub max_pass_us: i64,
    pub mean_pass_us: i64,
    pub pending: u64,
    pub held: u64,
    pub running: u64,
    /// Jobs submitted (and committed) since the controller started.
    pub submitted: u64,
    /// The controller's clock (seconds since the epoch), for the page's samples.
    pub now: u64,
}

/// `GET /ui/scheduler`.
pub async fn scheduler(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<SchedulerView>, ApiError> {
    let (pending, held, running) = st
        .engine
        .read(|c| {
            c.sched()
                .jobs()
                .fold((0, 0, 0), |(p, h, r), j| match j.state {
                    JobState::Pending if j.hold.is_some() => (p + 1, h + 1, r),
                    JobState::Pending => (p + 1, h, r),
                    JobState::Running => (p, h, r + 1),
                    _ => (p, h, r),
                })
        })
        .await?;
    let (passes, last, max, mean) = st.metrics.cycle_summary();
    Ok(Json(SchedulerView {
        passes,
        last_pass_us: last,
        max_pass_us: max,
        mean_pass_us: mean,
        pending,
        held,
        running,
        submitted: st.metrics.submitted_total(),
        now: crate::engine::wall_now().0,
    }))
}
