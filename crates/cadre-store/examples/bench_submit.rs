//! Durable submissions per second through group commit, until `cadre bench submit` calls
//! [`cadre_store::bench_submit`] itself. Each job carries a realistic run spec: a batch
//! script and the 40-variable environment of a login shell on a cluster (about 3.5 KB of
//! JSON), as `sbatch` captures it.
//!
//! `cargo run --release -p cadre-store --example bench_submit -- [DIR|URL] [JOBS] [BATCH] [full|normal] [ENV]`
//!
//! DIR: a directory for a throwaway SQLite database (default `/tmp`); a `postgres://` URL
//! benchmarks that database instead (its jobs are left in it; durability is the server's).
//! ENV: how many of the 40 environment variables each job carries (default all), to see
//! what the size of a row costs.

use cadre_core::job::JobSpec;
use cadre_core::resources::TaskResources;
use cadre_core::run::{PreEndSignal, RunSpec};
use cadre_core::time::{Dur, Time};
use cadre_store::{NewJob, SqliteDurability, SqliteStore, Store, bench_submit};
use std::path::PathBuf;

/// What a login shell on a GPU cluster exports: modules, conda, CUDA, SSH, and the long
/// `LS_COLORS` every distribution sets.
fn shell_env() -> Vec<(String, String)> {
    let ls_colors = "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:\
        cd=40;33;01:or=40;31;01:mi=00:su=37;41:sg=30;43:ca=30;41:tw=30;42:ow=34;42:st=37;44:\
        ex=01;32:*.tar=01;31:*.tgz=01;31:*.arc=01;31:*.arj=01;31:*.taz=01;31:*.lha=01;31:\
        *.lz4=01;31:*.lzh=01;31:*.lzma=01;31:*.tlz=01;31:*.txz=01;31:*.tzo=01;31:*.t7z=01;31:\
        *.zip=01;31:*.z=01;31:*.dz=01;31:*.gz=01;31:*.lrz=01;31:*.lz=01;31:*.lzo=01;31:\
        *.xz=01;31:*.zst=01;31:*.tzst=01;31:*.bz2=01;31:*.bz=01;31:*.tbz=01;31:*.tbz2=01;31:\
        *.tz=01;31:*.deb=01;31:*.rpm=01;31:*.jar=01;31:*.war=01;31:*.ear=01;31:*.sar=01;31:\
        *.rar=01;31:*.alz=01;31:*.ace=01;31:*.zoo=01;31:*.cpio=01;31:*.7z=01;31:*.rz=01;31:\
        *.cab=01;31:*.wim=01;31:*.swm=01;31:*.dwm=01;31:*.esd=01;31:*.jpg=01;35:*.jpeg=01;35:\
        *.mjpg=01;35:*.mjpeg=01;35:*.gif=01;35:*.bmp=01;35:*.pbm=01;35:*.pgm=01;35:\
        *.ppm=01;35:*.tga=01;35:*.xbm=01;35:*.xpm=01;35:*.tif=01;35:*.tiff=01;35:*.png=01;35:\
        *.svg=01;35:*.svgz=01;35:*.mng=01;35:*.pcx=01;35:*.mov=01;35:*.mpg=01;35:*.mpeg=01;35:\
        *.m2v=01;35:*.mkv=01;35:*.webm=01;35:*.webp=01;35:*.ogm=01;35:*.mp4=01;35:*.m4v=01;35:\
        *.mp4v=01;35:*.vob=01;35:*.qt=01;35:*.nuv=01;35:*.wmv=01;35:*.asf=01;35:*.rm=01;35:\
        *.flac=00;36:*.m4a=00;36:*.mid=00;36:*.midi=00;36:*.mka=00;36:*.mp3=00;36:*.ogg=00;36";
    let vars: [(&str, &str); 40] = [
        ("SHELL", "/bin/bash"),
        ("USER", "alice"),
        ("LOGNAME", "alice"),
        ("HOME", "/home/alice"),
        ("PWD", "/scratch/alice/llama-70b"),
        ("OLDPWD", "/home/alice"),
        ("LANG", "en_US.UTF-8"),
        ("LC_ALL", "en_US.UTF-8"),
        ("TERM", "xterm-256color"),
        ("SHLVL", "2"),
        ("HOSTNAME", "login01.cluster.example.org"),
        ("MAIL", "/var/spool/mail/alice"),
        ("HISTSIZE", "100000"),
        ("EDITOR", "vim"),
        ("TMPDIR", "/scratch/alice/tmp"),
        ("XDG_RUNTIME_DIR", "/run/user/41235"),
        ("XDG_SESSION_ID", "18734"),
        ("SSH_CLIENT", "10.12.0.77 51234 22"),
        ("SSH_CONNECTION", "10.12.0.77 51234 10.1.0.11 22"),
        ("SSH_TTY", "/dev/pts/7"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-XXXXa1b2c3/agent.48211"),
        (
            "PATH",
            "/home/alice/.conda/envs/llm/bin:/opt/conda/condabin:/usr/local/cuda-12.4/bin:\
             /opt/openmpi/4.1.6/bin:/home/alice/.local/bin:/usr/local/sbin:/usr/local/bin:\
             /usr/sbin:/usr/bin:/sbin:/bin",
        ),
        (
            "LD_LIBRARY_PATH",
            "/usr/local/cuda-12.4/lib64:/usr/local/cuda-12.4/extras/CUPTI/lib64:\
             /opt/openmpi/4.1.6/lib:/opt/nccl/2.21.5/lib",
        ),
        (
            "MANPATH",
            "/opt/openmpi/4.1.6/share/man:/usr/local/share/man:/usr/share/man",
        ),
        (
            "MODULEPATH",
            "/etc/modulefiles:/usr/share/modulefiles:/opt/modulefiles/compilers:\
             /opt/modulefiles/libraries",
        ),
        ("LOADEDMODULES", "cuda/12.4:openmpi/4.1.6:nccl/2.21.5"),
        (
            "_LMFILES_",
            "/opt/modulefiles/libraries/cuda/12.4:/opt/modulefiles/libraries/openmpi/4.1.6:\
             /opt/modulefiles/libraries/nccl/2.21.5",
        ),
        ("CONDA_EXE", "/opt/conda/bin/conda"),
        ("CONDA_PREFIX", "/home/alice/.conda/envs/llm"),
        ("CONDA_DEFAULT_ENV", "llm"),
        ("CONDA_SHLVL", "2"),
        ("CONDA_PROMPT_MODIFIER", "(llm) "),
        ("CUDA_HOME", "/usr/local/cuda-12.4"),
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3"),
        ("OMP_NUM_THREADS", "8"),
        ("HF_HOME", "/scratch/alice/hf-cache"),
        ("WANDB_PROJECT", "llama-70b-sft"),
        ("PS1", "(llm) [\\u@\\h \\W]\\$ "),
        ("LS_COLORS", ls_colors),
    ];
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn run_spec(env_vars: usize) -> RunSpec {
    let mut run = RunSpec::command(
        vec!["--config".into(), "configs/sft-70b.yaml".into()],
        "/scratch/alice/llama-70b".into(),
    );
    run.script = Some(
        "#!/bin/bash\n#SBATCH --gpus-per-node=8\n#SBATCH --nodes=4\n#SBATCH --time=04:00:00\n\
         #SBATCH --signal=B:USR1@120\nsource ~/.bashrc\nconda activate llm\n\
         srun python -m train --resume-from latest \"$@\"\n"
            .into(),
    );
    run.submit_host = Some("login01".into());
    run.stdout = Some("logs/%x-%j.out".into());
    run.signal = Some(PreEndSignal {
        signal: 10,
        before_secs: 120,
        target: cadre_core::run::SignalTarget::Leader,
    });
    run.env = shell_env();
    run.env.truncate(env_vars);
    run
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target = args.first().map_or("/tmp", String::as_str);
    let jobs: u64 = args.get(1).map_or(Ok(20_000), |s| s.parse())?;
    let batch: usize = args.get(2).map_or(Ok(64), |s| s.parse())?;
    let durability = match args.get(3).map(String::as_str) {
        None | Some("full") => SqliteDurability::Full,
        Some("normal") => SqliteDurability::Normal,
        Some(other) => return Err(format!("unknown durability `{other}`").into()),
    };
    let env_vars: usize = args.get(4).map_or(Ok(40), |s| s.parse())?;
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
    let job = NewJob {
        spec,
        run: run_spec(env_vars),
        partition: "gpu".into(),
        array_of: None,
    };
    let run_json = serde_json::to_string(&job.run)?.len();

    // Kept until the end: dropping it removes the database.
    let mut _dir = None;
    let (mut store, backend): (Box<dyn Store>, String) =
        if target.starts_with("postgres://") || target.starts_with("postgresql://") {
            (cadre_store::open(target)?, "PostgreSQL".into())
        } else {
            let dir = PathBuf::from(target);
            let db = tempfile::Builder::new()
                .prefix("cadre-bench-")
                .tempdir_in(&dir)?;
            let store = SqliteStore::open_with(&db.path().join("cadre.db"), durability)?;
            _dir = Some(db);
            (
                Box::new(store),
                format!("SQLite {durability:?}, {}", dir.display()),
            )
        };
    let r = bench_submit(store.as_mut(), &job, jobs, batch)?;
    println!(
        "{} jobs in batches of {} ({backend}, run spec {run_json} B): {:.0} jobs/s, \
         {:.2} ms per commit",
        r.jobs,
        r.batch,
        r.jobs_per_sec(),
        r.mean_commit().as_secs_f64() * 1000.0
    );
    Ok(())
}
