//! Durable submissions per second on SQLite through group commit, until `cadre bench submit`
//! calls [`cadre_store::bench_submit`] itself.
//!
//! `cargo run --release -p cadre-store --example bench_submit -- [DIR] [JOBS] [BATCH] [full|normal]`

use cadre_core::job::JobSpec;
use cadre_core::resources::TaskResources;
use cadre_core::time::{Dur, Time};
use cadre_store::{SqliteDurability, SqliteStore, bench_submit};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map_or("/tmp", String::as_str));
    let jobs: u64 = args.get(1).map_or(Ok(20_000), |s| s.parse())?;
    let batch: usize = args.get(2).map_or(Ok(64), |s| s.parse())?;
    let durability = match args.get(3).map(String::as_str) {
        None | Some("full") => SqliteDurability::Full,
        Some("normal") => SqliteDurability::Normal,
        Some(other) => return Err(format!("unknown durability `{other}`").into()),
    };
    let db = tempfile::Builder::new()
        .prefix("cadre-bench-")
        .tempdir_in(&dir)?;
    let mut store = SqliteStore::open_with(&db.path().join("cadre.db"), durability)?;
    let mut spec = JobSpec::simple(
        "alice",
        "ml",
        8,
        TaskResources {
            cpus: 8,
            mem_mib: 65_536,
            gpus: 1,
            ..TaskResources::default()
        },
        Dur::hours(4),
    );
    spec.submit_time = Time(1_700_000_000);
    let r = bench_submit(&mut store, &spec, "gpu", jobs, batch)?;
    println!(
        "{} jobs in batches of {} ({:?}, {}): {:.0} jobs/s, {:.2} ms per commit",
        r.jobs,
        r.batch,
        durability,
        dir.display(),
        r.jobs_per_sec(),
        r.mean_commit().as_secs_f64() * 1000.0
    );
    Ok(())
}
