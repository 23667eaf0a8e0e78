//! The REST API under `/api/v1`: handlers, and the OpenAPI document describing them.
//!
//! Every handler authenticates first ([`Principal`]'s extractor): without valid credentials
//! the answer is 401 and nothing else. Writes go through the engine and are answered after
//! their commit; reads of the durable record (job lists, accounting, tokens) go to a
//! separate read handle of the store, overlaid with the scheduler's live view (pending
//! reasons, priorities, expected starts) from the engine.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::controller::{Controller, JobAction, NodeAction};
use crate::engine::{Command, wall_now};
use crate::metrics::scrape_state;
use crate::state::AppState;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cadre_core::cluster::NodeId;
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobState};
use cadre_core::resources::MILLI_PER_GPU;
use cadre_core::time::Dur;
use cadre_proto::api::*;
use cadre_store::{
    AccountingFilter, JobFilter, NewJob, NewToken, StoredJob, TokenHash, TokenRecord,
};
use serde::Deserialize;
use utoipa::OpenApi;

mod enrol;
mod output;
mod steps;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                reason: self.reason,
                subject: self.subject,
                message: self.message,
            },
        };
        (status, Json(body)).into_response()
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<crate::auth::Peer>>()
            .map(|c| c.0.clone())
            .ok_or_else(|| ApiError::new(ErrorCode::Internal, "no connection info"))?;
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        // The dashboard's session cookie stands for a token when no header is given.
        let who = match authorization {
            None => {
                match crate::dashboard::session_principal(&state.dashboard, &state.reads, parts)
                    .await
                {
                    Some(who) => who?,
                    None => state.auth.identify(&peer, None).await?,
                }
            }
            Some(_) => state.auth.identify(&peer, authorization).await?,
        };
        if let crate::auth::Via::JobToken(job) = who.via {
            let path = parts.uri.path();
            let path = path.strip_prefix(PREFIX).unwrap_or(path);
            if !crate::auth::job_token_reaches(job, &parts.method, path) {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "a job token reaches only its own job {job}: the job, its steps and the nodes"
                    ),
                ));
            }
        }
        Ok(who)
    }
}

/// A JSON body whose errors are the API's errors.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(ApiError::because(
                ErrorReason::InvalidBody,
                rejection_text(&e),
            )),
        }
    }
}

fn rejection_text(e: &JsonRejection) -> String {
    format!("invalid request body: {}", e.body_text())
}

/// The routes under `/api/v1`, plus `/metrics` and the agents' WebSocket.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/openapi.json", get(openapi))
        .route("/whoami", get(whoami))
        .route("/status", get(controller_status))
        .route("/jobs", post(submit).get(list_jobs))
        .route("/jobs/{id}", get(get_job).delete(cancel).patch(update_job))
        .route("/jobs/{id}/cancel", post(cancel_with))
        .route("/jobs/{id}/hold", post(hold))
        .route("/jobs/{id}/release", post(release))
        .route("/jobs/{id}/requeue", post(requeue))
        .route("/jobs/{id}/explain", get(explain))
        .route("/jobs/{id}/run", get(get_run))
        .route(
            "/jobs/{id}/steps",
            post(steps::create_step).get(steps::job_steps),
        )
        .route("/jobs/{id}/steps/{step}/cancel", post(steps::cancel_step))
        .route("/jobs/{id}/complete", post(steps::complete))
        .route("/steps", get(steps::list_steps))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/output", get(output::job_output))
        .route("/queues", get(list_queues))
        .route(
            "/queue-objects",
            get(list_queue_objects).post(change_queue_objects),
        )
        .route("/nodes", get(list_nodes))
        .route("/nodes/{name}", get(get_node))
        .route("/nodes/{name}/drain", post(drain))
        .route("/nodes/{name}/resume", post(resume))
        .route("/nodes/{name}/revoke", post(enrol::revoke))
        .route("/nodes/join-tokens", post(enrol::create_join_token))
        .route("/nodes/enrol", post(enrol::enrol))
        .route("/partitions", get(list_partitions))
        .route("/shares", get(shares))
        .route("/usage", get(usage))
        .route("/priorities", get(priorities))
        .route("/tokens", post(create_token).get(list_tokens))
        .route("/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/ui/links", post(create_ui_link));
    Router::new()
        .nest(PREFIX, api)
        .route("/metrics", get(metrics))
        .route(
            cadre_proto::agent::CONNECT_PATH,
            get(crate::agents::connect),
        )
        .with_state(state)
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cadre",
        description = "cadre's controller: jobs, nodes, partitions, fair-share, accounting and tokens. Local clients authenticate by the Unix socket's peer credentials, remote ones with `Authorization: Bearer <token>`."
    ),
    paths(
        whoami,
        controller_status,
        submit,
        list_jobs,
        get_job,
        cancel,
        cancel_with,
        update_job,
        hold,
        release,
        requeue,
        explain,
        get_run,
        steps::create_step,
        steps::job_steps,
        steps::cancel_step,
        steps::complete,
        steps::list_steps,
        job_events,
        output::job_output,
        list_queues,
        list_queue_objects,
        change_queue_objects,
        list_nodes,
        get_node,
        drain,
        resume,
        enrol::create_join_token,
        enrol::enrol,
        enrol::revoke,
        list_partitions,
        shares,
        usage,
        priorities,
        create_token,
        list_tokens,
        revoke_token,
        create_ui_link
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCode, ErrorReason))
)]
struct ApiDoc;

/// The OpenAPI document of this API.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.servers = Some(vec![utoipa::openapi::Server::new(PREFIX)]);
    doc
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(openapi_document())
}

/// What this controller is: alone, or the leader of replicated ones (standbys answer this
/// too). No authentication: it tells nothing of jobs.
#[utoipa::path(get, path = "/status", responses((status = 200, body = ControllerStatus)))]
async fn controller_status(State(st): State<AppState>) -> Json<cadre_proto::api::ControllerStatus> {
    Json(st.status.clone())
}

/// Who the controller takes the caller for.
#[utoipa::path(get, path = "/whoami", responses((status = 200, body = WhoAmI), (status = 401, body = ErrorBody)))]
async fn whoami(who: Principal) -> Json<WhoAmI> {
    Json(WhoAmI {
        user: who.user,
        admin: who.admin,
        via: who.via.as_str().into(),
    })
}

/// Submits jobs. Answered once they are committed; all of them, or none.
#[utoipa::path(post, path = "/jobs", request_body = SubmitRequest,
    responses((status = 201, body = SubmitResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn submit(
    State(st): State<AppState>,
    who: Principal,
    headers: axum::http::HeaderMap,
    Body(req): Body<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    if req.jobs.is_empty() {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "no jobs given"));
    }
    let key = idempotency_key(&headers)?;
    let mut jobs = Vec::with_capacity(req.jobs.len());
    for (
        i,
        JobSubmission {
            mut spec,
            run,
            array_of,
        },
    ) in req.jobs.into_iter().enumerate()
    {
        if spec.user.is_empty() || (!who.admin && spec.user != who.user) {
            if !spec.user.is_empty() && spec.user != who.user {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "jobs[{i}]: `{}` may not submit as user `{}`",
                        who.user, spec.user
                    ),
                ));
            }
            spec.user = who.user.clone();
        }
        run.validate()
            .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, format!("jobs[{i}].run: {e}")))?;
        crate::limits::check_job(&spec, &run).map_err(|e| e.answer(&format!("jobs[{i}].")))?;
        crate::authority::check_spec_change(&who, None, &spec)
            .and_then(|()| crate::authority::check_host_paths(&who, &run))
            .map_err(|e| ApiError {
                message: format!("jobs[{i}]: {}", e.message),
                ..e
            })?;
        jobs.push(NewJob {
            // The controller resolves it (`Controller::prepare`).
            partition: String::new(),
            spec,
            run,
            array_of,
        });
    }
    crate::authority::check_arrays(&jobs)?;
    let dry_run = req.dry_run;
    let job_ids = st
        .engine
        .ask(|reply| Command::Submit {
            jobs,
            dry_run,
            key,
            reply,
        })
        .await?;
    let status = if dry_run {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(SubmitResponse { job_ids })))
}

/// A request's `Idempotency-Key`, checked: at most
/// [`cadre_proto::api::MAX_IDEMPOTENCY_KEY`] of `[A-Za-z0-9._:-]`.
fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    use cadre_proto::api::{IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY};
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::because(
            ErrorReason::InvalidRequest,
            format!(
                "the {IDEMPOTENCY_KEY} header must be 1 to {MAX_IDEMPOTENCY_KEY} of letters, \
                 digits and `._:-`"
            ),
        )
    };
    let key = value.to_str().map_err(|_| bad())?;
    let ok = !key.is_empty()
        && key.len() <= MAX_IDEMPOTENCY_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(Some(key.to_owned()))
    } else {
        Err(bad())
    }
}

/// Filters of `GET /jobs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
struct JobQuery {
    /// Comma-separated states (`PENDING,RUNNING`).
    state: Option<String>,
    user: Option<String>,
    account: Option<String>,
    partition: Option<String>,
    /// Only jobs above this id.
    after: Option<u64>,
    limit: Option<u32>,
    /// Include each job's spec and allocation, as `GET /jobs/{id}` does.
    detail: Option<bool>,
}

/// What the engine knows of a live job beyond the store.
#[derive(Clone, Debug)]
pub(crate) struct Live {
    state: JobState,
    pub(crate) reason: String,
    pub(crate) priority: u64,
    pub(crate) expected_start: Option<u64>,
    held: bool,
    /// The spec's values that change after submission (`scontrol update`): the store keeps
    /// the spec as submitted.
    time_limit: Dur,
    nice: i32,
}

pub(crate) fn live_of(e: &Controller, id: JobId) -> Option<Live> {
    let job = e.sched().job(id)?;
    let reason = if job.state == JobState::Pending {
        match (job.hold, e.launch_error(id)) {
            (Some(cadre_core::scheduler::Hold::Admin), Some(why)) => {
                format!("launch failed requeued held: {why}")
            }
            (Some(cadre_core::scheduler::Hold::Admin), None) => "JobHeldAdmin".into(),
            (Some(cadre_core::scheduler::Hold::User), _) => "JobHeldUser".into(),
            (None, _) => job.reason.as_str().to_owned(),
        }
    } else {
        "None".into()
    };
    Some(Live {
        state: job.state,
        reason,
        priority: e.sched().priority(job),
        expected_start: e.sched().expected_start(id).map(|t| t.0),
        held: job.hold.is_some(),
        time_limit: job.spec.time_limit,
        nice: job.spec.nice,
    })
}

fn job_view(e_names: &[String], mut job: StoredJob, live: Option<Live>, full: bool) -> JobView {
    if let Some(l) = &live {
        job.spec.time_limit = l.time_limit;
        job.spec.nice = l.nice;
    }
    let s = &job.status;
    let nodes = s.allocation.as_ref().map_or_else(String::new, |a| {
        let names: Vec<&str> = a
            .nodes()
            .iter()
            .filter_map(|n| e_names.get(n.0 as usize).map(String::as_str))
            .collect();
        hostlist::compress(&names)
    });
    let state = live.as_ref().map_or(s.state, |l| l.state);
    let cpus = s
        .allocation
        .as_ref()
        .map_or_else(|| job.spec.amounts().cpus, |a| a.amounts().cpus);
    JobView {
        id: job.id,
        name: job.spec.name.clone(),
        user: job.spec.user.clone(),
        account: job.spec.account.clone(),
        partition: job.partition.clone(),
        state,
        reason: live
            .as_ref()
            .map_or_else(|| "None".into(), |l| l.reason.clone()),
        submit_time: job.spec.submit_time.0,
        start_time: s.start_time.map(|t| t.0),
        end_time: s.end_time.map(|t| t.0),
        time_limit: job.spec.time_limit.0,
        nodes,
        tasks: job.spec.tasks(),
        gpus: job.spec.amounts().gpu_milli as f64 / MILLI_PER_GPU as f64,
        exit_code: s.exit_code,
        requeues: s.requeues,
        expected_start: live.as_ref().and_then(|l| l.expected_start),
        priority: live.as_ref().map(|l| l.priority),
        held: live.as_ref().is_some_and(|l| l.held),
        array: job.spec.array,
        cpus,
        allocation: if full { s.allocation.clone() } else { None },
        spec: full.then_some(job.spec),
        run: None,
    }
}

async fn node_names(st: &AppState) -> Result<Vec<String>, ApiError> {
    st.engine
        .read(|e| {
            e.sched()
                .cluster()
                .nodes
                .iter()
                .map(|n| n.name.clone())
                .collect()
        })
        .await
}

/// Runs a read of the durable record on the read handle.
async fn read_store<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&mut dyn cadre_store::Store) -> Result<T, cadre_store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    st.reads.with(f).await
}

async fn views(st: &AppState, jobs: Vec<StoredJob>, full: bool) -> Result<Vec<JobView>, ApiError> {
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let live: Vec<Option<Live>> = st
        .engine
        .read(move |e| ids.iter().map(|&id| live_of(e, id)).collect())
        .await?;
    let names = node_names(st).await?;
    Ok(jobs
        .into_iter()
        .zip(live)
        .map(|(j, l)| job_view(&names, j, l, full))
        .collect())
}

fn parse_states(text: &str) -> Result<Vec<JobState>, ApiError> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            serde_json::from_value(serde_json::Value::String(s.trim().to_ascii_uppercase()))
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidRequest,
                        format!("`{s}` is not a job state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, PREEMPTING)"),
                    )
                })
        })
        .collect()
}

fn query_error(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, e.body_text())
}

/// Lists jobs, in id order. Users see their own jobs; administrators every job.
#[utoipa::path(get, path = "/jobs", params(JobQuery),
    responses((status = 200, body = JobList), (status = 400, body = ErrorBody)))]
async fn list_jobs(
    State(st): State<AppState>,
    who: Principal,
    q: Result<Query<JobQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = q.map_err(query_error)?;
    let user = match (q.user, who.admin) {
        (Some(u), true) => Some(u),
        (Some(u), false) if u != who.user => {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("`{}` may not list the jobs of `{u}`", who.user),
            ));
        }
        (_, false) => Some(who.user.clone()),
        (None, true) => None,
    };
    let filter = JobFilter {
        states: q
            .state
            .as_deref()
            .map(parse_states)
            .transpose()?
            .unwrap_or_default(),
        user,
        account: q.account,
        partition: q.partition,
        after: q.after.map(JobId),
        limit: q.limit,
    };
    let jobs = read_store(&st, move |s| s.list_jobs(&filter)).await?;
    Ok(Json(JobList {
        jobs: views(&st, jobs, q.detail.unwrap_or(false)).await?,
    }))
}

async fn own_job(st: &AppState, who: &Principal, id: u64) -> Result<StoredJob, ApiError> {
    let job = read_store(st, move |s| s.job(JobId(id))).await?;
    match job {
        Some(j) if who.admin || j.spec.user == who.user => Ok(j),
        Some(_) => Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("job {id} belongs to another user"),
        )),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("job {id} does not exist"),
        )),
    }
}

/// One job, with its spec and allocation.
#[utoipa::path(get, path = "/jobs/{id}", params(("id" = u64, Path, description = "job id")),
    responses((status = 200, body = JobView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_job(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<Json<JobView>, ApiError> {
    let job = own_job(&st, &who, id).await?;
    let run = read_store(&st, move |s| s.run_spec(JobId(id))).await?;
    let mut v = views(&st, vec![job], true).await?;
    let mut view = v
        .pop()
        .ok_or_else(|| ApiError::new(ErrorCode::Internal, "job view missing"))?;
    // The captured environment stays out: it is large, and nothing shows it.
    view.run = run.map(|mut r| {
        r.env = Vec::new();
        redacted(r)
    });
    Ok(Json(view))
}

/// What a job runs (its run spec: program, directories, environment, and a Kubernetes
/// workload's translation), for its owner and administrators.
#[utoipa::path(get, path = "/jobs/{id}/run", params(("id" = u64, Path, description = "job id")),
    responses((status = 200, body = cadre_core::run::RunSpec), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_run(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<Json<cadre_core::run::RunSpec>, ApiError> {
    own_job(&st, &who, id).await?;
    read_store(&st, move |s| s.run_spec(JobId(id)))
        .await?
        .map(|r| Json(redacted(r)))
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("job {id} does not exist")))
}

/// A run spec as the API shows it: a Kubernetes workload's Secrets' values redacted (its
/// nodes' agents get them with the launch, nobody else does).
fn redacted(mut run: cadre_core::run::RunSpec) -> cadre_core::run::RunSpec {
    if let Some(k) = run.kubernetes.as_mut() {
        cadre_k8s::config::redact_secrets(k);
    }
    run
}

async fn act(
    st: &AppState,
    who: Principal,
    id: u64,
    action: JobAction,
) -> Result<StatusCode, ApiError> {
    st.engine
        .ask(|reply| Command::Job {
            who,
            id: JobId(id),
            action,
            reply,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Cancels a job: a pending one ends at once, a running one is stopped (SIGTERM, then
/// SIGKILL after the kill wait).
#[utoipa::path(delete, path = "/jobs/{id}", params(("id" = u64, Path, description = "job id")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn cancel(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiError> {
    act(&st, who, id, JobAction::Cancel).await
}

/// Cancels a job, or with `signal` sends that signal to its tasks.
#[utoipa::path(post, path = "/jobs/{id}/cancel", params(("id" = u64, Path, description = "job id")), request_body = CancelRequest,
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn cancel_with(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
    Body(req): Body<CancelRequest>,
) -> Result<StatusCode, ApiError> {
    let action = match req.signal {
        Some(sig) if cadre_core::run::signal_name(sig).is_none() => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("{sig} is not a signal number"),
            ));
        }
        Some(sig) => JobAction::Signal(sig),
        None => JobAction::Cancel,
    };
    act(&st, who, id, action).await
}

/// Changes a job's time limit or nice value.
#[utoipa::path(patch, path = "/jobs/{id}", params(("id" = u64, Path, description = "job id")), request_body = JobUpdate,
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn update_job(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
    Body(req): Body<JobUpdate>,
) -> Result<StatusCode, ApiError> {
    if req.time_limit.is_none() && req.nice.is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "nothing to update: give time_limit or nice",
        ));
    }
    if let Some(limit) = req.time_limit {
        act(&st, who.clone(), id, JobAction::SetTimeLimit(Dur(limit))).await?;
    }
    if let Some(nice) = req.nice {
        act(&st, who, id, JobAction::SetNice(nice)).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Holds a pending job.
#[utoipa::path(post, path = "/jobs/{id}/hold", params(("id" = u64, Path, description = "job id")),
    responses((status = 204), (status = 409, body = ErrorBody)))]
async fn hold(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiError> {
    act(&st, who, id, JobAction::Hold).await
}

/// Releases a held job.
#[utoipa::path(post, path = "/jobs/{id}/release", params(("id" = u64, Path, description = "job id")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn release(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiError> {
    act(&st, who, id, JobAction::Release).await
}

/// Stops a running job and puts it back in the queue.
#[utoipa::path(post, path = "/jobs/{id}/requeue", params(("id" = u64, Path, description = "job id")),
    responses((status = 204), (status = 409, body = ErrorBody)))]
async fn requeue(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiError> {
    act(&st, who, id, JobAction::Requeue).await
}

/// Why a job waits: its reason, priority factors, planned start, and node by node why not.
#[utoipa::path(get, path = "/jobs/{id}/explain", params(("id" = u64, Path, description = "job id")),
    responses((status = 200, body = ExplainView), (status = 404, body = ErrorBody)))]
async fn explain(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<Json<ExplainView>, ApiError> {
    let job = own_job(&st, &who, id).await?;
    let final_state = job.status.state;
    let view = st
        .engine
        .read(move |e| {
            let x = e.sched().explain(JobId(id), wall_now(), true)?;
            let live = live_of(e, JobId(id));
            let factors = x.factors.map_or_else(Vec::new, |f| {
                vec![
                    ("age".to_string(), f.age),
                    ("fairshare".into(), f.fairshare),
                    ("job_size".into(), f.job_size),
                    ("partition".into(), f.partition),
                    ("qos".into(), f.qos),
                    ("expansion".into(), f.expansion),
                    ("nice".into(), f64::from(f.nice)),
                ]
            });
            Some(ExplainView {
                id: x.job,
                state: x.state,
                reason: live.map_or_else(|| x.reason.as_str().to_owned(), |l| l.reason),
                priority: x.priority,
                factors,
                expected_start: x.expected_start.map(|t| t.0),
                starving_since: x.starving_since.map(|t| t.0),
                ends_backlog: x.ends_backlog,
                largest_first: x.largest_first,
                largest_first_for_gaps: x.largest_first_for_gaps,
                nodes: x.nodes.into_iter().map(|n| (n.node, n.why)).collect(),
                detail: e.sched().reason_detail(JobId(id)),
            })
        })
        .await?;
    Ok(Json(view.unwrap_or(ExplainView {
        id: JobId(id),
        state: final_state,
        reason: "None".into(),
        priority: 0,
        factors: Vec::new(),
        expected_start: None,
        starving_since: None,
        ends_backlog: false,
        largest_first: false,
        largest_first_for_gaps: false,
        nodes: Vec::new(),
        detail: None,
    })))
}

/// A job's events, oldest first: `Submitted` from its record, then those the controller
/// recorded (pending reasons worth telling, starts, rank failures, preemptions, requeues,
/// deletion, the end), then, for a pending job, its reason now.
#[utoipa::path(get, path = "/jobs/{id}/events", params(("id" = u64, Path, description = "job id")),
    responses((status = 200, body = JobEventList), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn job_events(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<Json<JobEventList>, ApiError> {
    let job = own_job(&st, &who, id).await?;
    let recorded = read_store(&st, move |s| s.job_events(JobId(id))).await?;
    let queue = job
        .spec
        .queue
        .as_ref()
        .map_or_else(String::new, |q| format!(", queue {q}"));
    let mut events = vec![JobEventView {
        at: job.spec.submit_time.0,
        kind: "Submitted".into(),
        warning: false,
        message: format!(
            "submitted by user {} (account {}) to partition {}{queue}",
            job.spec.user, job.spec.account, job.partition
        ),
    }];
    events.extend(recorded.into_iter().map(|e| JobEventView {
        at: e.at.0,
        kind: e.kind,
        warning: e.warning,
        message: e.message,
    }));
    let now = st
        .engine
        .read(move |e| {
            let j = e.sched().job(JobId(id))?;
            if j.state != JobState::Pending {
                return None;
            }
            let live = live_of(e, JobId(id))?;
            let detail = e
                .sched()
                .reason_detail(JobId(id))
                .map_or_else(String::new, |d| format!(": {d}"));
            Some(JobEventView {
                at: wall_now().0,
                kind: "Waiting".into(),
                warning: false,
                message: format!("pending now, reason {}{detail}", live.reason),
            })
        })
        .await?;
    events.extend(now);
    Ok(Json(JobEventList {
        id: JobId(id),
        events,
    }))
}

fn limit_view(q: &cadre_core::quota::QuotaAmounts) -> QueueAmountsView {
    QueueAmountsView {
        cpus: q.cpus,
        mem_mib: q.mem_mib,
        gpus: q.gpu_milli.map(|m| m as f64 / f64::from(MILLI_PER_GPU)),
        nics: q.nics,
    }
}

fn amounts_view(a: &cadre_core::resources::Amounts) -> QueueAmountsView {
    limit_view(&cadre_core::quota::QuotaAmounts::from(*a))
}

/// `a` on the components `nominal` manages only (what a queue can borrow).
fn managed_view(
    a: &cadre_core::resources::Amounts,
    nominal: &cadre_core::quota::QuotaAmounts,
) -> QueueAmountsView {
    let all = amounts_view(a);
    QueueAmountsView {
        cpus: nominal.cpus.and(all.cpus),
        mem_mib: nominal.mem_mib.and(all.mem_mib),
        gpus: nominal.gpu_milli.and(all.gpus),
        nics: nominal.nics.and(all.nics),
    }
}

/// Every queue (the policy file's and the queue objects'), with its quota, use, and the
/// jobs it admitted and holds back; the LocalQueues and ResourceFlavors applied.
#[utoipa::path(get, path = "/queues", responses((status = 200, body = QueueList)))]
async fn list_queues(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<QueueList>, ApiError> {
    let list = st
        .engine
        .read(|e| {
            let sched = &e.sched();
            let book = sched.quota();
            let objects = e.queue_objects();
            let set = objects.set();
            let mut pending: std::collections::BTreeMap<&str, u64> = Default::default();
            let mut over: std::collections::BTreeSet<usize> = Default::default();
            let mut by_local: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
            for j in sched.jobs() {
                if j.state == JobState::Pending
                    && let Some(q) = &j.spec.queue
                {
                    *pending.entry(q.as_str()).or_default() += 1;
                }
                if j.state.is_active()
                    && sched.is_over_quota(j.id)
                    && let Some(q) = book.resolve(j.queue, &j.spec.account)
                {
                    over.insert(q.index());
                }
                if let Some(l) = j
                    .spec
                    .annotations
                    .get(crate::queues::LOCAL_QUEUE_ANNOTATION)
                {
                    let c = by_local.entry(l.as_str()).or_default();
                    if j.state == JobState::Pending {
                        c.0 += 1;
                    } else if j.state.is_active() {
                        c.1 += 1;
                    }
                }
            }
            let configs = &sched.policy().quotas.queues;
            let queues = book
                .rows()
                .into_iter()
                .zip(book.queues())
                .map(|(row, ix)| {
                    let config = configs.iter().find(|c| c.name == row.queue);
                    let flavor = set
                        .queues
                        .iter()
                        .find(|q| q.config.name == row.queue)
                        .and_then(|q| q.flavor.clone());
                    QueueView {
                        source: objects.source_of(&row.queue).into(),
                        cohort: row.cohort.clone(),
                        weight: row.weight,
                        flavor,
                        nominal: limit_view(&row.nominal),
                        borrowing_limit: config
                            .and_then(|c| c.borrowing_limit.as_ref().map(limit_view)),
                        lending_limit: config
                            .and_then(|c| c.lending_limit.as_ref().map(limit_view)),
                        capability: config.and_then(|c| c.capability.as_ref().map(limit_view)),
                        used: amounts_view(&row.used),
                        borrowed: managed_view(&row.borrowed, &row.nominal),
                        admitted: row.running_jobs,
                        pending: pending.get(row.queue.as_str()).copied().unwrap_or(0),
                        over_quota: over.contains(&ix.index()),
                        name: row.queue,
                    }
                })
                .collect();
            let local_queues = set
                .local_queues
                .iter()
                .map(|l| {
                    let key = format!("{}/{}", l.namespace, l.name);
                    let (pending, admitted) = by_local.get(key.as_str()).copied().unwrap_or((0, 0));
                    LocalQueueView {
                        namespace: l.namespace.clone(),
                        name: l.name.clone(),
                        cluster_queue: l.cluster_queue.clone(),
                        pending,
                        admitted,
                    }
                })
                .collect();
            let flavors = set
                .flavors
                .iter()
                .map(|f| FlavorView {
                    name: f.name.clone(),
                    node_labels: f.node_labels.clone(),
                })
                .collect();
            let namespace_quotas = set
                .resource_quotas
                .iter()
                .map(|q| NamespaceQuotaView {
                    namespace: q.namespace.clone(),
                    name: q.name.clone(),
                    hard: limit_view(&q.hard),
                    used: managed_view(&book.namespace_used(&q.namespace), &q.hard),
                })
                .collect();
            QueueList {
                queues,
                local_queues,
                flavors,
                namespace_quotas,
            }
        })
        .await?;
    Ok(Json(list))
}

/// Every Kubernetes queue object applied, in the order first applied.
#[utoipa::path(get, path = "/queue-objects", responses((status = 200, body = QueueObjectList)))]
async fn list_queue_objects(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<QueueObjectList>, ApiError> {
    let records = st
        .engine
        .read(|e| e.queue_objects().records().to_vec())
        .await?;
    let objects = records
        .into_iter()
        .map(|r| QueueObjectView {
            manifest: shown(&r.kind, &r.manifest),
            kind: r.kind,
            api_version: r.api_version,
            namespace: r.namespace,
            name: r.name,
            applied: r.applied.0,
        })
        .collect();
    Ok(Json(QueueObjectList { objects }))
}

/// A kept object's manifest as the API shows it: a Secret's values blanked (its keys stay,
/// for the workloads applied after it; its values reach only its owner's jobs, put in by
/// the controller).
fn shown(kind: &str, manifest: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(manifest).unwrap_or(serde_json::Value::Null);
    if kind != "Secret" {
        return v;
    }
    // Only what names it and its keys: an annotation may hold the whole object
    // (`kubectl.kubernetes.io/last-applied-configuration` of an exported Secret).
    let keys = |field: &str| -> serde_json::Map<String, serde_json::Value> {
        v.get(field)
            .and_then(|d| d.as_object())
            .map(|m| m.keys().map(|k| (k.clone(), "".into())).collect())
            .unwrap_or_default()
    };
    let meta = |f: &str| v.pointer(&format!("/metadata/{f}")).cloned();
    let mut metadata = serde_json::Map::new();
    for f in ["name", "namespace", "uid", "labels"] {
        if let Some(x) = meta(f) {
            metadata.insert(f.into(), x);
        }
    }
    if let Some(o) = cadre_k8s::storage::owner_of(&v) {
        metadata.insert(
            "annotations".into(),
            serde_json::json!({ cadre_k8s::storage::OWNER_ANNOTATION: o }),
        );
    }
    let mut out = serde_json::json!({
        "apiVersion": v.get("apiVersion").cloned().unwrap_or_default(),
        "kind": "Secret",
        "metadata": metadata,
        "data": keys("data"),
    });
    if let Some(t) = v.get("type") {
        out["type"] = t.clone();
    }
    if !keys("stringData").is_empty() {
        out["stringData"] = keys("stringData").into();
    }
    out
}

/// Applies and deletes Kubernetes queue, namespace and storage objects (administrators;
/// any user their own PersistentVolumeClaims): all of them, or none.
/// Committed before the scheduler's quotas are replaced; running jobs are never stopped by
/// it.
#[utoipa::path(post, path = "/queue-objects", request_body = QueueObjectsRequest,
    responses((status = 200, body = QueueObjectsResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn change_queue_objects(
    State(st): State<AppState>,
    who: Principal,
    Body(req): Body<QueueObjectsRequest>,
) -> Result<Json<QueueObjectsResponse>, ApiError> {
    if req.put.is_empty() && req.delete.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "no queue object to put or delete",
        ));
    }
    let request = Box::new(req);
    let response = st
        .engine
        .ask(|reply| Command::QueueObjects {
            who,
            request,
            reply,
        })
        .await?;
    Ok(Json(response))
}

fn node_view(e: &Controller, id: NodeId) -> NodeView {
    let cluster = e.sched().cluster();
    let node = cluster.node(id);
    let shape = cluster.shape(id);
    let cap = shape.capacity();
    let used = node.usage.amounts();
    NodeView {
        name: node.name.clone(),
        state: cluster.node_state(id).to_string(),
        avail: node.avail,
        reason: node.reason.clone(),
        connected: e.is_connected(id),
        partitions: node
            .partitions
            .iter()
            .map(|&p| cluster.partition(p).name.clone())
            .collect(),
        cpus: cap.cpus,
        cpus_alloc: used.cpus,
        memory_mib: cap.mem_mib,
        memory_alloc_mib: used.mem_mib,
        gpus: cap.gpu_milli / u64::from(MILLI_PER_GPU),
        gpus_alloc: used.gpu_milli as f64 / MILLI_PER_GPU as f64,
        gpu_model: shape.gpus.first().map(|g| g.model.clone()),
        emulated_gpus: e.node_emulated(id) && cap.gpu_milli > 0,
        features: node.features.clone(),
        container_runtime: e.node_runtime(id).map(str::to_string),
        address: e.node_address(id).map(str::to_string),
        agent_version: e.node_agent(id).map(|(v, _)| v.to_string()),
        agent_protocol: e.node_agent(id).map(|(_, p)| p),
        last_heard: None,
        cert_expires: None,
        health: e.node_health(id),
    }
}

/// What the connections and the store know of nodes beside the engine: when each agent
/// was last heard, and when each node's live certificate expires.
async fn with_connections_and_certs(
    st: &AppState,
    mut nodes: Vec<NodeView>,
) -> Result<Vec<NodeView>, ApiError> {
    let certs = read_store(st, |s| s.node_certs()).await?;
    for n in &mut nodes {
        n.last_heard = st.engine.io().last_heard(&n.name);
        n.cert_expires = certs
            .iter()
            .filter(|c| c.node == n.name && c.revoked.is_none())
            .map(|c| c.expires.0)
            .max();
    }
    Ok(nodes)
}

/// Every node.
#[utoipa::path(get, path = "/nodes", responses((status = 200, body = NodeList)))]
async fn list_nodes(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<NodeList>, ApiError> {
    let nodes = st
        .engine
        .read(|e| {
            (0..e.sched().cluster().nodes.len())
                .map(|n| node_view(e, NodeId(n as u32)))
                .collect()
        })
        .await?;
    let nodes = with_connections_and_certs(&st, nodes).await?;
    Ok(Json(NodeList { nodes }))
}

/// One node.
#[utoipa::path(get, path = "/nodes/{name}", params(("name" = String, Path, description = "node name")),
    responses((status = 200, body = NodeView), (status = 404, body = ErrorBody)))]
async fn get_node(
    State(st): State<AppState>,
    _who: Principal,
    Path(name): Path<String>,
) -> Result<Json<NodeView>, ApiError> {
    let missing = format!("node `{name}` does not exist");
    let node = st
        .engine
        .read(move |e| {
            e.sched()
                .cluster()
                .node_id(&name)
                .map(|id| node_view(e, id))
        })
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, missing))?;
    let mut nodes = with_connections_and_certs(&st, vec![node]).await?;
    Ok(Json(nodes.remove(0)))
}

/// Drains a node: it takes no new jobs; running ones finish (administrators).
#[utoipa::path(post, path = "/nodes/{name}/drain", params(("name" = String, Path, description = "node name")), request_body = DrainRequest,
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn drain(
    State(st): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
    Body(req): Body<DrainRequest>,
) -> Result<StatusCode, ApiError> {
    if req.reason.trim().is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a drain needs a reason",
        ));
    }
    let action = NodeAction::Drain { reason: req.reason };
    st.engine
        .ask(|reply| Command::Node {
            who,
            name,
            action,
            reply,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes a drained node (administrators).
#[utoipa::path(post, path = "/nodes/{name}/resume", params(("name" = String, Path, description = "node name")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn resume(
    State(st): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let action = NodeAction::Resume;
    st.engine
        .ask(|reply| Command::Node {
            who,
            name,
            action,
            reply,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every partition.
#[utoipa::path(get, path = "/partitions", responses((status = 200, body = PartitionList)))]
async fn list_partitions(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<PartitionList>, ApiError> {
    let partitions = st
        .engine
        .read(|e| {
            let c = e.sched().cluster();
            c.partitions
                .iter()
                .map(|p| {
                    let names: Vec<&str> =
                        p.nodes.iter().map(|&n| c.node(n).name.as_str()).collect();
                    let (gpus, used) = p.nodes.iter().fold((0, 0), |(g, u), &n| {
                        let cap = c.shape(n).capacity().gpu_milli;
                        (g + cap, u + c.node(n).usage.amounts().gpu_milli)
                    });
                    PartitionView {
                        name: p.name.clone(),
                        default: p.default,
                        up: p.up,
                        nodes: hostlist::compress(&names),
                        node_count: p.nodes.len() as u32,
                        max_time: p.max_time.map(|d| d.0),
                        default_time: p.default_time.map(|d| d.0),
                        priority_tier: p.priority_tier,
                        gpus: gpus / u64::from(MILLI_PER_GPU),
                        gpus_alloc: used as f64 / MILLI_PER_GPU as f64,
                    }
                })
                .collect()
        })
        .await?;
    Ok(Json(PartitionList { partitions }))
}

/// The fair-share tree, as `sshare -l` shows it.
#[utoipa::path(get, path = "/shares", responses((status = 200, body = ShareList)))]
async fn shares(State(st): State<AppState>, _who: Principal) -> Result<Json<ShareList>, ApiError> {
    let shares = st
        .engine
        .read(|e| {
            let tree = e.sched().fairshare();
            tree.rows(e.sched().fairshare_algorithm())
                .into_iter()
                .map(|r| {
                    let parent = tree
                        .account(&r.account)
                        .and_then(|a| tree.account_parent(a))
                        .map(|p| tree.account_name(p).to_owned());
                    ShareView {
                        user: r.user.unwrap_or_default(),
                        parent,
                        account: r.account,
                        raw_shares: match r.raw_shares {
                            cadre_core::fairshare::Shares::Raw(n) => n.to_string(),
                            cadre_core::fairshare::Shares::Parent => "parent".into(),
                        },
                        norm_shares: r.norm_shares,
                        raw_usage: r.raw_usage,
                        effective_usage: r.effective_usage,
                        fairshare: r.fairshare.or(r.level_fs).unwrap_or(0.0),
                    }
                })
                .collect()
        })
        .await?;
    Ok(Json(ShareList { shares }))
}

/// Filters of `GET /usage`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    user: Option<String>,
    account: Option<String>,
    partition: Option<String>,
    /// Comma-separated end states.
    state: Option<String>,
    /// Runs that ended at or after this time (seconds since the epoch).
    since: Option<u64>,
    /// Runs that ended before this time.
    before: Option<u64>,
    after: Option<u64>,
    limit: Option<u32>,
}

/// Accounting: one row per ended run (`sacct`). Users see their own.
#[utoipa::path(get, path = "/usage", params(UsageQuery), responses((status = 200, body = UsageList)))]
async fn usage(
    State(st): State<AppState>,
    who: Principal,
    q: Result<Query<UsageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<UsageList>, ApiError> {
    let Query(q) = q.map_err(query_error)?;
    let user = if who.admin {
        q.user
    } else {
        Some(who.user.clone())
    };
    let filter = AccountingFilter {
        user,
        account: q.account,
        partition: q.partition,
        states: q
            .state
            .as_deref()
            .map(parse_states)
            .transpose()?
            .unwrap_or_default(),
        ended_since: q.since.map(cadre_core::time::Time),
        ended_before: q.before.map(cadre_core::time::Time),
        after: q.after.map(JobId),
        limit: q.limit,
    };
    // The array membership and time limit are the job's, not the run's: read them from
    // the jobs, once per job.
    let (rows, jobs) = read_store(&st, move |s| {
        let rows = s.accounting(&filter)?;
        let mut jobs = std::collections::BTreeMap::new();
        for r in &rows {
            if let std::collections::btree_map::Entry::Vacant(v) = jobs.entry(r.job) {
                v.insert(s.job(r.job)?.map(|j| (j.spec.array, j.spec.time_limit.0)));
            }
        }
        Ok((rows, jobs))
    })
    .await?;
    let runs = rows
        .into_iter()
        .map(|r| {
            let (array, time_limit) = jobs.get(&r.job).copied().flatten().unwrap_or((None, 0));
            let gpus = r.usage.gpu_milli as f64 / MILLI_PER_GPU as f64;
            let secs = r.start_time.map_or(0, |s| r.end_time.0.saturating_sub(s.0));
            UsageView {
                job: r.job,
                run: r.run,
                name: r.name,
                user: r.user,
                account: r.account,
                partition: r.partition,
                submit_time: r.submit_time.0,
                start_time: r.start_time.map(|t| t.0),
                end_time: r.end_time.0,
                state: r.state,
                exit_code: r.exit_code,
                gpus,
                cpus: r.usage.cpus,
                nodes: r.usage.nodes,
                gpu_seconds: gpus * secs as f64,
                array,
                time_limit,
            }
        })
        .collect();
    Ok(Json(UsageList { runs }))
}

/// Filters of `GET /priorities`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
struct PriorityQuery {
    user: Option<String>,
    partition: Option<String>,
}

/// The priority factors of every pending job (`sprio`), and the weights. Users see their
/// own jobs; administrators every job.
#[utoipa::path(get, path = "/priorities", params(PriorityQuery),
    responses((status = 200, body = PriorityList), (status = 400, body = ErrorBody)))]
async fn priorities(
    State(st): State<AppState>,
    who: Principal,
    q: Result<Query<PriorityQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PriorityList>, ApiError> {
    let Query(q) = q.map_err(query_error)?;
    let user = if who.admin { q.user } else { Some(who.user) };
    let list = st
        .engine
        .read(move |e| {
            let now = wall_now();
            let w = &e.sched().policy().priority;
            let weights = PriorityWeightsView {
                age: w.age,
                fairshare: w.fairshare,
                job_size: w.job_size,
                partition: w.partition,
                qos: w.qos,
                expansion: w.expansion,
            };
            let cluster = e.sched().cluster();
            let mut jobs: Vec<PriorityView> = e
                .sched()
                .jobs()
                .filter(|j| j.state == JobState::Pending)
                .filter(|j| user.as_ref().is_none_or(|u| &j.spec.user == u))
                .filter_map(|j| {
                    let partition = cluster.partition(j.partition).name.clone();
                    if q.partition.as_ref().is_some_and(|p| p != &partition) {
                        return None;
                    }
                    let f = e.sched().factors(j.id, now)?;
                    Some(PriorityView {
                        id: j.id,
                        user: j.spec.user.clone(),
                        partition,
                        priority: e.sched().priority(j),
                        age: f.age,
                        fairshare: f.fairshare,
                        job_size: f.job_size,
                        partition_factor: f.partition,
                        qos: f.qos,
                        expansion: f.expansion,
                        nice: f.nice,
                        array: j.spec.array,
                    })
                })
                .collect();
            jobs.sort_by_key(|j| j.id);
            PriorityList { weights, jobs }
        })
        .await?;
    Ok(Json(list))
}

fn token_view(t: TokenRecord, secret: Option<String>) -> TokenView {
    TokenView {
        id: t.id,
        user: t.user,
        admin: t.admin,
        created: t.created.0,
        revoked: t.revoked.map(|r| r.0),
        token: secret,
    }
}

fn admin_only(who: &Principal, what: &str) -> Result<(), ApiError> {
    if who.admin {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("only an administrator may {what}"),
        ))
    }
}

/// Creates a bearer token for a user (administrators). The secret is in this answer only.
#[utoipa::path(post, path = "/tokens", request_body = TokenRequest,
    responses((status = 201, body = TokenView), (status = 403, body = ErrorBody)))]
async fn create_token(
    State(st): State<AppState>,
    who: Principal,
    Body(req): Body<TokenRequest>,
) -> Result<(StatusCode, Json<TokenView>), ApiError> {
    admin_only(&who, "create tokens")?;
    if req.user.trim().is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a token needs a user",
        ));
    }
    let secret = crate::state::random_secret("cadre_");
    let new = NewToken {
        user: req.user,
        admin: req.admin,
        hash: TokenHash::of(&secret),
        created: wall_now(),
    };
    let rec = read_store(&st, move |s| s.create_token(&new)).await?;
    Ok((StatusCode::CREATED, Json(token_view(rec, Some(secret)))))
}

/// Every token, revoked ones included (administrators).
#[utoipa::path(get, path = "/tokens", responses((status = 200, body = TokenList), (status = 403, body = ErrorBody)))]
async fn list_tokens(
    State(st): State<AppState>,
    who: Principal,
) -> Result<Json<TokenList>, ApiError> {
    admin_only(&who, "list tokens")?;
    let tokens = read_store(&st, |s| s.tokens()).await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(|t| token_view(t, None)).collect(),
    }))
}

/// Revokes a token (administrators).
#[utoipa::path(delete, path = "/tokens/{id}", params(("id" = u64, Path, description = "token id")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn revoke_token(
    State(st): State<AppState>,
    who: Principal,
    Path(id): Path<u64>,
) -> Result<StatusCode, ApiError> {
    admin_only(&who, "revoke tokens")?;
    let now = wall_now();
    if read_store(&st, move |s| s.revoke_token(id, now)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no unrevoked token {id}"),
        ))
    }
}

/// A one-time login link to the dashboard for the caller (`cadre ui`): good for one
/// login within five minutes. Made with the socket's peer credentials or a token.
#[utoipa::path(post, path = "/ui/links",
    responses((status = 201, body = UiLinkView), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn create_ui_link(
    State(st): State<AppState>,
    who: Principal,
) -> Result<(StatusCode, Json<UiLinkView>), ApiError> {
    let link = crate::dashboard::create_link(&st.dashboard, &who)?;
    Ok((StatusCode::CREATED, Json(link)))
}

/// `/metrics`: Prometheus text format. Unauthenticated, as scrapers expect; it shows
/// counts and which job holds which GPU, not job contents.
/// The metrics. Which user and job hold each GPU (`cadre_gpu_job_info`) only for a
/// caller with valid credentials (a token over TCP; the socket's peer credentials always
/// are); every other series for anyone, as scrapers expect.
async fn metrics(
    State(st): State<AppState>,
    who: Result<Principal, ApiError>,
) -> Result<Response, ApiError> {
    let metrics = st.metrics.clone();
    let scope = if who.is_ok() {
        crate::metrics::Scope::WithJobs
    } else {
        crate::metrics::Scope::Anonymous
    };
    let usage = st.engine.io().gpu_usages();
    let text = st
        .engine
        .read(move |e| metrics.render(&scrape_state(e.sched(), e.emulated_gpus(), &usage, scope)))
        .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_every_route_and_body() {
        let doc = serde_json::to_value(openapi_document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/whoami",
            "/status",
            "/jobs",
            "/jobs/{id}",
            "/jobs/{id}/cancel",
            "/jobs/{id}/hold",
            "/jobs/{id}/release",
            "/jobs/{id}/requeue",
            "/jobs/{id}/explain",
            "/nodes",
            "/nodes/{name}",
            "/nodes/{name}/drain",
            "/nodes/{name}/resume",
            "/partitions",
            "/shares",
            "/usage",
            "/priorities",
            "/tokens",
            "/tokens/{id}",
        ] {
            assert!(paths.contains_key(p), "{p} missing from {:?}", paths.keys());
        }
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for s in [
            "SubmitRequest",
            "JobSpec",
            "RunSpec",
            "JobView",
            "PriorityList",
            "UsageView",
            "ErrorBody",
            "ErrorCode",
        ] {
            assert!(schemas.contains_key(s), "schema {s} missing");
        }
        // Serde's names, not Rust's: the job state enum is SCREAMING_SNAKE_CASE.
        let states = doc["components"]["schemas"]["JobState"].to_string();
        assert!(states.contains("OUT_OF_MEMORY"), "{states}");
        assert_eq!(doc["servers"][0]["url"], "/api/v1");
    }

    #[test]
    fn errors_answer_with_their_status_and_a_json_body() {
        let resp = ApiError::new(ErrorCode::Forbidden, "no").into_response();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let resp = ApiError::new(ErrorCode::Unauthenticated, "who").into_response();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    }
}
