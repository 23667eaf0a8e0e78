//! Job steps over the API: `srun` creates one and reads its events as JSON lines
//! (`POST /jobs/{id}/steps`), `squeue -s` and `sacct` list them (`GET /steps`), `scancel
//! ID.STEP` cancels one, and the client of an allocation completes its job
//! (`POST /jobs/{id}/complete`).

use super::{Body, act, own_job, read_store};
use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::controller::JobAction;
use crate::engine::{Command, EngineHandle};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use cadre_core::job::JobId;
use cadre_proto::api::{
    CancelRequest, CompleteRequest, ErrorBody, ErrorCode, StepEvent, StepList, StepRequest,
};
use cadre_store::StepFilter;
use serde::Deserialize;
use std::collections::BTreeMap;
use tokio::sync::mpsc::UnboundedReceiver;

/// The answer stream of a step: cancels the step if dropped before its end (its `srun`
/// went away), as Slurm does.
struct StepStream {
    rx: UnboundedReceiver<StepEvent>,
    first: Option<StepEvent>,
    engine: EngineHandle,
    who: Principal,
    job: JobId,
    step: u32,
    ended: bool,
}

impl Drop for StepStream {
    fn drop(&mut self) {
        if !self.ended {
            tracing::info!(job = %self.job, step = self.step, "the step's client went away: cancelling the step");
            let _ = self.engine.send(Command::StepCancel {
                who: self.who.clone(),
                id: self.job,
                step: self.step,
                signal: None,
                reply: None,
            });
        }
    }
}

/// Starts a job step in a running job's allocation. The answer is a stream of JSON lines
/// (`StepEvent`): `created`, the tasks' output when the step has no output files, then
/// `ended`. Closing the connection before `ended` cancels the step.
#[utoipa::path(post, path = "/jobs/{id}/steps", params(("id" = u64, Path, description = "job id")), request_body = StepRequest,
    responses((status = 200, body = StepEvent, content_type = "application/x-ndjson"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn create_step(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
    Body(req): Body<StepRequest>,
) -> Result<Response, ApiError> {
    let (io, rx) = tokio::sync::mpsc::unbounded_channel();
    let view = st
        .engine
        .ask(|reply| Command::StepCreate {
            who: who.clone(),
            id: JobId(id),
            request: Box::new(req),
            io,
            reply,
        })
        .await?;
    let stream = StepStream {
        rx,
        step: view.step,
        first: Some(StepEvent::Created { step: view }),
        engine: st.engine.clone(),
        who,
        job: JobId(id),
        ended: false,
    };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let event = match s.first.take() {
            Some(e) => e,
            None => s.rx.recv().await?,
        };
        if matches!(event, StepEvent::Ended { .. }) {
            s.ended = true;
        }
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(line), s))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// Cancels a step, or with `signal` sends that signal to its tasks (`scancel ID.STEP`).
#[utoipa::path(post, path = "/jobs/{id}/steps/{step}/cancel", params(("id" = u64, Path, description = "job id"), ("step" = u32, Path, description = "step number")), request_body = CancelRequest,
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn cancel_step(
    State(st): State<AppState>,
    who: Principal,
    Path((id, step)): Path<(u64, u32)>,
    Body(req): Body<CancelRequest>,
) -> Result<StatusCode, ApiError> {
    if let Some(sig) = req.signal
        && cadre_core::run::signal_name(sig).is_none()
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("{sig} is not a signal number"),
        ));
    }
    st.engine
        .ask(|reply| Command::StepCancel {
            who,
            id: JobId(id),
            step,
            signal: req.signal,
            reply: Some(reply),
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Ends an allocation (`salloc`'s, or the one `srun` made outside any): the job ends with
/// the client's exit code and its steps are stopped.
#[utoipa::path(post, path = "/jobs/{id}/complete", params(("id" = u64, Path, description = "job id")), request_body = CompleteRequest,
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn complete(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
    Body(req): Body<CompleteRequest>,
) -> Result<StatusCode, ApiError> {
    act(&st, who, id, JobAction::Complete(req.exit_code)).await
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(super) struct StepQuery {
    /// Comma-separated job ids; default: every job's steps.
    job: Option<String>,
    /// Only steps that have not ended.
    running: Option<bool>,
}

/// Job steps, by job then step number: the caller's own, or everyone's for an
/// administrator.
#[utoipa::path(get, path = "/steps", params(StepQuery),
    responses((status = 200, body = StepList), (status = 400, body = ErrorBody)))]
pub(super) async fn list_steps(
    State(st): State<AppState>,
    who: Principal,
    q: Result<Query<StepQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<StepList>, ApiError> {
    let Query(q) = q.map_err(super::query_error)?;
    let mut jobs = Vec::new();
    for part in q
        .job
        .iter()
        .flat_map(|j| j.split(','))
        .filter(|p| !p.is_empty())
    {
        let id = part.trim().parse::<u64>().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("job=`{part}` is not a job id"),
            )
        })?;
        jobs.push(JobId(id));
    }
    let filter = StepFilter {
        jobs,
        unfinished: q.running.unwrap_or(false),
    };
    let (steps, owners) = read_store(&st, move |s| {
        let steps = s.steps(&filter)?;
        let mut owners = BTreeMap::new();
        for rec in &steps {
            if !owners.contains_key(&rec.job)
                && let Some(j) = s.job(rec.job)?
            {
                owners.insert(rec.job, j);
            }
        }
        Ok((steps, owners))
    })
    .await?;
    let steps = steps
        .iter()
        .filter_map(|rec| {
            let job = owners.get(&rec.job)?;
            (who.admin || job.spec.user == who.user).then(|| {
                crate::controller::step_view(
                    rec,
                    &crate::controller::StepJob {
                        user: &job.spec.user,
                        account: &job.spec.account,
                        partition: &job.partition,
                        time_limit: job.spec.time_limit.0,
                    },
                )
            })
        })
        .collect();
    Ok(Json(StepList { steps }))
}

/// The steps of one job (its owner's or an administrator's).
#[utoipa::path(get, path = "/jobs/{id}/steps", params(("id" = u64, Path, description = "job id")),
    responses((status = 200, body = StepList), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn job_steps(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<Json<StepList>, ApiError> {
    let job = own_job(&st, &who, id).await?;
    let steps = read_store(&st, move |s| {
        s.steps(&StepFilter {
            jobs: vec![JobId(id)],
            unfinished: false,
        })
    })
    .await?;
    let j = crate::controller::StepJob {
        user: &job.spec.user,
        account: &job.spec.account,
        partition: &job.partition,
        time_limit: job.spec.time_limit.0,
    };
    Ok(Json(StepList {
        steps: steps
            .iter()
            .map(|r| crate::controller::step_view(r, &j))
            .collect(),
    }))
}
