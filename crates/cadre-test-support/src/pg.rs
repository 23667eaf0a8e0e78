//! A PostgreSQL server of a test's own ([`OwnPostgres`]): made with the machine's
//! PostgreSQL binaries (`/usr/lib/postgresql/*/bin`), run as the `postgres` user, on a
//! free port, optionally inside a host of a [`crate::netns::Network`]; a test may stop and
//! start it. The shared test server (`CADRE_TEST_POSTGRES`) must never be restarted under
//! the other tests. On the shared server, a test works in a schema of its own
//! ([`TestSchema`]).

use std::path::PathBuf;
use std::process::Command;

pub struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The address it listens on and its port.
    pub host: String,
    pub port: u16,
    /// The network namespace it runs in, if any.
    netns: Option<String>,
}

impl OwnPostgres {
    /// A server on `host` (`127.0.0.1`, or a namespace's address with `netns`), with a
    /// database `cadre_test` owned by the role `cadre`. `Err`: why it cannot run here (not
    /// root, no PostgreSQL).
    pub fn start(host: &str, netns: Option<&str>) -> Result<OwnPostgres, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("it runs a server as root's postgres user".into());
        }
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .max()
            .ok_or("no PostgreSQL binaries in /usr/lib/postgresql")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let chown = Command::new("chown")
            .args(["postgres:", &dir.path().display().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        if !chown.success() {
            return Err("cannot give the server's directory to postgres".into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let pg = OwnPostgres {
            dir,
            bin,
            host: host.to_owned(),
            port,
            netns: netns.map(str::to_owned),
        };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        if host != "127.0.0.1" {
            // Clients from the test's own hosts (network namespaces) too.
            use std::io::Write;
            let hba = pg.dir.path().join("data").join("pg_hba.conf");
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&hba)
                .map_err(|e| format!("{}: {e}", hba.display()))?;
            writeln!(f, "host all all {host}/24 trust").map_err(|e| e.to_string())?;
        }
        pg.ctl_start()?;
        let port = pg.port.to_string();
        pg.run(
            "psql",
            &[
                "-q",
                "-h",
                &pg.host,
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                "CREATE ROLE cadre LOGIN",
                "-c",
                "CREATE DATABASE cadre_test OWNER cadre",
            ],
        )?;
        Ok(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The database's URL, as `cadre server --database` takes it.
    pub fn url(&self) -> String {
        format!("postgres://cadre@{}:{}/cadre_test", self.host, self.port)
    }

    /// A PostgreSQL tool, as `postgres`, in the server's namespace.
    fn command(&self, tool: &str) -> Command {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg("--")
                    .arg("runuser");
                c
            }
            None => Command::new("runuser"),
        };
        cmd.args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .current_dir(self.dir.path());
        cmd
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .map_err(|e| format!("{tool}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{tool}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Starts the server (again).
    pub fn ctl_start(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log").display().to_string();
        let options = format!(
            "-k {} -p {} -h {}",
            self.dir.path().display(),
            self.port,
            self.host
        );
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options, "start",
            ],
        )
    }

    /// Stops it (its clients' connections are closed).
    pub fn ctl_stop(&self) -> Result<(), String> {
        let data = self.data();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}

/// A schema of its own in the shared test database (`CADRE_TEST_POSTGRES`), dropped with
/// it, and the URL whose connections use it.
pub struct TestSchema {
    /// The database URL with the schema as its search path.
    pub url: String,
    /// The schema's name, to name its tables in queries.
    pub name: String,
    /// A connection of the test's own, for looking into what was committed.
    pub admin: postgres::Client,
}

impl TestSchema {
    /// `cadre_<tag>_<pid>` in the test database; `None` where there is none (outside CI,
    /// see [`crate::postgres_url`]).
    pub fn new(tag: &str) -> Option<TestSchema> {
        let url = crate::postgres_url()?;
        let name = format!("cadre_{tag}_{}", std::process::id());
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("test database");
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .expect("test schema");
        let sep = if url.contains('?') { '&' } else { '?' };
        Some(TestSchema {
            url: format!("{url}{sep}options=-c%20search_path%3D{name}"),
            name,
            admin,
        })
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}
