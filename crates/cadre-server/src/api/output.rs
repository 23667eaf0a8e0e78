//! `GET /jobs/{id}/output`: a piece of one of a job's tasks' output, read by the agent of
//! the task's node from the file the task writes ([`crate::output_reads`]), for the job's
//! owner and administrators; what the dashboard's job page follows while a rank runs.

use super::{node_names, own_job, query_error};
use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::output_reads::ReadFailure;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, Query, State};
use cadre_core::job::{JobId, JobState};
use cadre_proto::agent::{MAX_OUTPUT_READ, OutputReadAnswer, OutputRequest, OutputStream, RunRef};
use cadre_proto::api::{ErrorBody, ErrorCode, TaskOutput};
use serde::Deserialize;

/// Bytes read when the request names no limit.
pub const DEFAULT_LIMIT: u32 = 64 * 1024;

/// What to read of `GET /jobs/{id}/output`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputQuery {
    /// The task's rank over the job (`SLURM_PROCID`); 0 by default. A batch job's script
    /// is task 0.
    task: Option<u32>,
    /// `stdout` (the default) or `stderr` (when the job writes it to a file of its own).
    stream: Option<OutputStream>,
    /// The byte to start from; without it, the last `limit` bytes.
    offset: Option<u64>,
    /// Bytes to read at most: 1 to 262,144 (65,536 by default).
    limit: Option<u32>,
}

/// A piece of one task's output: from `offset`, or its end; follow it by asking again from
/// `next_offset`. Its owner and administrators only.
#[utoipa::path(get, path = "/jobs/{id}/output",
    params(("id" = u64, Path, description = "job id"), OutputQuery),
    responses((status = 200, body = TaskOutput), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(super) async fn job_output(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
    q: Result<Query<OutputQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskOutput>, ApiError> {
    let Query(q) = q.map_err(query_error)?;
    let max = match q.limit {
        None => DEFAULT_LIMIT,
        Some(n @ 1..=MAX_OUTPUT_READ) => n,
        Some(n) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("limit={n}: a read of output takes 1 to {MAX_OUTPUT_READ} bytes"),
            ));
        }
    };
    let task = q.task.unwrap_or(0);
    let stream = q.stream.unwrap_or(OutputStream::Stdout);
    let job = own_job(&st, &who, id).await?;
    if job.status.state == JobState::Pending {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("job {id} is pending: it has no output until it starts"),
        ));
    }
    let Some(alloc) = job.status.allocation.as_ref() else {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("job {id} never started: it has no output"),
        ));
    };
    let order = alloc.rank_order();
    let Some(node) = order
        .get(task as usize)
        .and_then(|&i| alloc.tasks.get(i))
        .map(|t| t.node)
    else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "task={task}: job {id} has tasks 0 to {}",
                order.len().saturating_sub(1)
            ),
        ));
    };
    let names = node_names(&st).await?;
    let Some(node) = names.get(node.0 as usize).cloned() else {
        return Err(ApiError::new(
            ErrorCode::Internal,
            format!(
                "job {id}'s task {task} is on node id {}, which the cluster does not have",
                node.0
            ),
        ));
    };
    let request = OutputRequest {
        run: RunRef::job_run(JobId(id), job.status.requeues),
        task,
        stream,
        offset: q.offset,
        max,
    };
    match st.engine.io().reads().read(&node, request).await {
        Ok(OutputReadAnswer::Piece(piece)) => Ok(Json(TaskOutput {
            job: id,
            task,
            node,
            stream,
            piece,
        })),
        Ok(OutputReadAnswer::Unavailable { why }) => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("node {node}: {why}"),
        )),
        Err(e @ ReadFailure::Busy) => Err(ApiError::new(ErrorCode::Unavailable, e.to_string())),
        Err(e) => Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("job {id}'s task {task}: {e}"),
        )),
    }
}
