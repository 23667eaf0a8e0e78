//! cadre's `sbatch` and `scontrol show job` against the real Slurm, script by script.
//!
//! The reference is Slurm 22.05 started by `../shared/slurm/start-slurm.sh` (`.ci/run`
//! starts it and sets `CADRE_TEST_SLURM=1`); its commands are used by full path. cadre's
//! side is a controller (`cadre server`, no agents: every job is submitted held and never
//! runs) on a cluster description made from the reference's own nodes, so that node
//! names, sizes and features are the same on both sides.
//!
//! Every script of `tests/slurm-scripts/*.sh` is submitted `--hold` to both and
//! `scontrol show job -o` is compared field by field (the fields of [`COMPARED`]); every
//! script of `tests/slurm-scripts/bad/*.sh` must be refused by both with the same message
//! and exit code. A script's header comments say how to submit it:
//!
//! - `# args: ...`: command-line options before the script (split at blanks);
//! - `# env: NAME=value ...`: input environment variables;
//! - `# stdin`: the script goes to standard input; `# wrap: command`: submitted with
//!   `--wrap` instead of the script;
//! - `# known: Field reason`: a difference that is understood and accepted (printed, not
//!   failed); `# known: message reason` for refusals whose texts differ.
//!
//! `@PARENT@`, `@PARENT2@` and `@ARRAY@` in a script or its arguments stand for jobs
//! submitted (held) on each side first, so that dependencies name real jobs.
//!
//! Without the reference the test is skipped with a note, except under CI (`$CI` set),
//! where it fails.

use cadre_test_support::{run_dir_of, wait_until};

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The fields compared, as `scontrol show job -o` names them.
const COMPARED: &[&str] = &[
    "JobName",
    "NumNodes",
    "NumCPUs",
    "NumTasks",
    "CPUs/Task",
    "TimeLimit",
    "TresPerNode",
    "TresPerJob",
    "TresPerTask",
    "MinMemoryNode",
    "MinMemoryCPU",
    "Partition",
    "Account",
    "QOS",
    "Features",
    "Dependency",
    "ArrayTaskId",
    "StdOut",
    "StdErr",
    // Beyond the list: the rest of the request as scontrol shows it.
    "ArrayJobId",
    "JobState",
    "Reason",
    "Nice",
    "Requeue",
    "TimeMin",
    "MinCPUsNode",
    "NtasksPerN:B:S:C",
    "ReqB:S:C:T",
    "CpusPerTres",
    "MemPerTres",
    "OverSubscribe",
    "Contiguous",
    "Command",
    "WorkDir",
    "Comment",
    "StdIn",
    "Switches",
    "MailUser",
    "MailType",
];

const FEATURES: &str = "a100,ib";

fn reference_available() -> bool {
    if std::env::var_os("CADRE_TEST_SLURM").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the reference Slurm is required under CI: .ci/run starts it and sets CADRE_TEST_SLURM"
    );
    eprintln!(
        "note: skipping the comparison with Slurm: start it with ../shared/slurm/start-slurm.sh 4 8 64 and set CADRE_TEST_SLURM=1"
    );
    false
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `Key=value` pairs of an `-o` record; values may hold blanks (`Comment=a b`).
fn fields(record: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<String> = None;
    for word in record.trim_end().split(' ') {
        let is_key = word.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty()
                && k.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | ':' | '_'))
        });
        match (is_key, &last) {
            (true, _) => {
                let (k, v) = word.split_once('=').unwrap_or((word, ""));
                out.insert(k.to_string(), v.to_string());
                last = Some(k.to_string());
            }
            (false, Some(k)) => {
                if let Some(v) = out.get_mut(k) {
                    v.push(' ');
                    v.push_str(word);
                }
            }
            (false, None) => {}
        }
    }
    // Slurm ends some values with a blank (`Comment=hi there `).
    for v in out.values_mut() {
        *v = v.trim_end().to_string();
    }
    out
}

/// One side: how to run its `sbatch` and `scontrol`.
struct Side {
    name: &'static str,
    sbatch: PathBuf,
    scontrol: PathBuf,
    env: Vec<(String, String)>,
    /// Ids of the parent jobs, by placeholder.
    parents: BTreeMap<&'static str, u64>,
}

struct Submission {
    out: Output,
}

impl Submission {
    fn job_id(&self) -> Option<u64> {
        text(&self.out.stdout)
            .trim()
            .strip_prefix("Submitted batch job ")
            .and_then(|s| s.parse().ok())
    }
    fn stderr(&self) -> String {
        text(&self.out.stderr)
    }
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
}

/// How a corpus script is submitted.
#[derive(Default)]
struct Header {
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: bool,
    wrap: Option<String>,
    known: BTreeMap<String, String>,
}

fn header(script: &str) -> Header {
    let mut h = Header::default();
    for line in script.lines() {
        let Some(c) = line.strip_prefix("# ") else {
            continue;
        };
        if let Some(a) = c.strip_prefix("args: ") {
            h.args = a.split_whitespace().map(str::to_string).collect();
        } else if let Some(e) = c.strip_prefix("env: ") {
            h.env = e
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        } else if c.trim() == "stdin" {
            h.stdin = true;
        } else if let Some(w) = c.strip_prefix("wrap: ") {
            h.wrap = Some(w.to_string());
        } else if let Some(k) = c.strip_prefix("known: ") {
            let (field, why) = k.split_once(' ').unwrap_or((k, ""));
            h.known.insert(field.to_string(), why.to_string());
        }
    }
    h
}

impl Side {
    fn substitute(&self, s: &str) -> String {
        let mut s = s.to_string();
        // Longest placeholder first (`@PARENT2@` before `@PARENT@`).
        let mut names: Vec<&&str> = self.parents.keys().collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for name in names {
            s = s.replace(name, &self.parents[name].to_string());
        }
        s
    }

    /// Writes the script (placeholders substituted) to `path` and submits it held.
    fn submit(&self, work: &Path, file: &str, script: &str, h: &Header) -> Submission {
        let path = work.join(file);
        std::fs::write(&path, self.substitute(script)).expect("write script");
        let mut cmd = Command::new(&self.sbatch);
        cmd.current_dir(work)
            .env_clear()
            .envs(self.env.iter().cloned())
            .envs(h.env.iter().cloned())
            .arg("--hold")
            .args(h.args.iter().map(|a| self.substitute(a)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(w) = &h.wrap {
            cmd.arg(format!("--wrap={w}")).stdin(Stdio::null());
        } else if h.stdin {
            cmd.stdin(Stdio::piped());
        } else {
            cmd.arg(file).stdin(Stdio::null());
        }
        let mut child = cmd.spawn().expect("sbatch runs");
        if h.stdin && h.wrap.is_none() {
            let mut input = child.stdin.take().expect("stdin");
            input
                .write_all(self.substitute(script).as_bytes())
                .expect("write stdin");
        }
        Submission {
            out: child.wait_with_output().expect("sbatch ends"),
        }
    }

    fn show(&self, id: u64) -> BTreeMap<String, String> {
        let out = run_ok(
            Command::new(&self.scontrol)
                .env_clear()
                .envs(self.env.iter().cloned())
                .args(["show", "job", "-o", &id.to_string()]),
        );
        fields(out.lines().next().unwrap_or(""))
    }

    /// A parent job for dependencies.
    fn parent(&mut self, work: &Path, placeholder: &'static str, args: &[&str]) {
        let h = Header {
            args: args.iter().map(|s| s.to_string()).collect(),
            wrap: Some("true".into()),
            ..Header::default()
        };
        let s = self.submit(work, "parent.sh", "", &h);
        let id = s
            .job_id()
            .unwrap_or_else(|| panic!("{} refused a parent job: {}", self.name, s.stderr()));
        self.parents.insert(placeholder, id);
    }
}

/// A value as compared: job ids, parents and 22.05's TRES prefix made neutral.
fn normalize(side: &Side, field: &str, value: &str, job: u64, work: &Path) -> String {
    let mut v = value
        .replace("gres:gpu", "gres/gpu")
        .replace(&work.display().to_string(), "<work>");
    if field == "Dependency" {
        let mut names: Vec<(&&str, &u64)> = side.parents.iter().collect();
        names.sort_by_key(|(_, id)| std::cmp::Reverse(id.to_string().len()));
        for (name, id) in names {
            v = v.replace(&format!(":{id}"), &format!(":{name}"));
        }
    }
    if matches!(field, "StdOut" | "StdErr" | "StdIn" | "ArrayJobId") {
        v = replace_number(&v, job, "<job>");
    }
    v
}

/// `text` with every whole number `n` (not part of a longer number) replaced.
fn replace_number(text: &str, n: u64, by: &str) -> String {
    let n = n.to_string();
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(&n) {
        let before = rest[..i].chars().last();
        let after = rest[i + n.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(|c| c.is_ascii_digit()) || after.is_some_and(|c| c.is_ascii_digit()) {
            out.push_str(&n);
        } else {
            out.push_str(by);
        }
        rest = &rest[i + n.len()..];
    }
    out.push_str(rest);
    out
}

/// The cadre controller of the comparison, stopped when dropped: `cadre server` alone (no
/// agents, so that no job ever runs), not the `cadre up` of cadre-test-support's harness.
struct Controller {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cluster description of the reference's nodes: one shape (the first node's), every
/// node, the default partition.
fn cluster_of_reference() -> String {
    let nodes = run_ok(Command::new("/usr/bin/sinfo").args(["-h", "-o", "%N"]));
    let part = run_ok(Command::new("/usr/bin/sinfo").args(["-h", "-o", "%R"]));
    let first = run_ok(Command::new("/usr/bin/scontrol").args(["show", "node", "-o"]));
    let f = fields(first.lines().next().unwrap_or(""));
    let gpus: u32 = f
        .get("Gres")
        .and_then(|g| g.rsplit(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    format!(
        "version = 1\nname = \"ref\"\n\n[[shape]]\nname = \"ref\"\ncores = {}\nmemory = {}\nnuma = 1\ngpus = {gpus}\ngpu_model = \"a100\"\ngpu_memory = \"80G\"\n\n[[nodes]]\nnames = \"{}\"\nshape = \"ref\"\nfeatures = [{}]\n\n[[partition]]\nname = \"{}\"\nnodes = \"ALL\"\ndefault = true\n",
        f["CPUTot"],
        f["RealMemory"],
        nodes.trim(),
        FEATURES
            .split(',')
            .map(|x| format!("\"{x}\""))
            .collect::<Vec<_>>()
            .join(", "),
        part.lines().next().unwrap_or("gpu").trim()
    )
}

fn start_cadre() -> (Controller, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path().join("data");
    let bin = dir.path().join("bin");
    std::fs::write(dir.path().join("cluster.toml"), cluster_of_reference()).unwrap();
    std::fs::write(
        dir.path().join("policy.toml"),
        "version = 1\n[[qos]]\nname = \"normal\"\npriority = 0\n[[qos]]\nname = \"high\"\npriority = 100\n",
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_cadre");
    run_ok(Command::new(exe).arg("install-aliases").arg(&bin));
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let child = Command::new(exe)
        .arg("server")
        .arg("--data-dir")
        .arg(&data)
        .arg("--cluster")
        .arg(dir.path().join("cluster.toml"))
        .arg("--policy")
        .arg(dir.path().join("policy.toml"))
        .env_remove("CADRE_SERVER")
        .env_remove("CADRE_TOKEN")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cadre server starts");
    wait_until("cadre server comes up", || {
        std::os::unix::net::UnixStream::connect(run_dir_of(&data).join("cadre.sock")).is_ok()
    });
    let c = Controller { child, _dir: dir };
    (c, data, bin)
}

fn base_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn corpus(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("corpus directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Getopt's messages name the program by its path; make both sides `sbatch`.
fn message(s: &str) -> String {
    s.lines()
        .map(|l| match l.split_once(": ") {
            Some((prog, rest)) if prog.ends_with("/sbatch") => format!("sbatch: {rest}"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sbatch_and_scontrol_show_job_match_slurm_on_the_corpus() {
    if !reference_available() {
        return;
    }
    // The reference's nodes get the features the corpus asks for, and their own back
    // at the end (others may be comparing against the same reference).
    let nodes = run_ok(Command::new("/usr/bin/sinfo").args(["-h", "-o", "%N"]));
    let before = run_ok(Command::new("/usr/bin/sinfo").args(["-h", "-o", "%f"]));
    let before = before.lines().next().unwrap_or("").trim().to_string();
    let set_features = |f: &str| {
        let f = if f == "(null)" { "" } else { f };
        run_ok(Command::new("/usr/bin/scontrol").args([
            "update",
            &format!("NodeName={}", nodes.trim()),
            &format!("AvailableFeatures={f}"),
            &format!("ActiveFeatures={f}"),
        ]));
    };
    set_features(FEATURES);
    let (_controller, data, bin) = start_cadre();
    let work_dir = tempfile::tempdir().expect("work directory");
    let work = work_dir.path().canonicalize().unwrap();
    let mut sides = [
        Side {
            name: "slurm",
            sbatch: "/usr/bin/sbatch".into(),
            scontrol: "/usr/bin/scontrol".into(),
            env: base_env(&[]),
            parents: BTreeMap::new(),
        },
        Side {
            name: "cadre",
            sbatch: bin.join("sbatch"),
            scontrol: bin.join("scontrol"),
            env: base_env(&[("CADRE_DATA_DIR", data.to_str().unwrap())]),
            parents: BTreeMap::new(),
        },
    ];
    for side in &mut sides {
        side.parent(&work, "@PARENT@", &["-J", "parent"]);
        side.parent(&work, "@PARENT2@", &["-J", "parent2"]);
        side.parent(&work, "@ARRAY@", &["-J", "parent-array", "--array=1-3"]);
    }
    let corpus_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm-scripts");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut slurm_ids = Vec::new();
    let good = corpus(&corpus_dir);
    assert!(good.len() >= 40, "the corpus has {} scripts", good.len());
    for (file, script) in &good {
        let h = header(script);
        let subs: Vec<Submission> = sides
            .iter()
            .map(|s| s.submit(&work, file, script, &h))
            .collect();
        let ids: Vec<Option<u64>> = subs.iter().map(Submission::job_id).collect();
        let (Some(ref_id), Some(cadre_id)) = (ids[0], ids[1]) else {
            failures.push(format!(
                "{file}: not accepted by both: slurm {} `{}`, cadre {} `{}`",
                subs[0].code(),
                subs[0].stderr().trim(),
                subs[1].code(),
                subs[1].stderr().trim()
            ));
            continue;
        };
        slurm_ids.push(ref_id);
        let warnings: Vec<String> = subs.iter().map(|s| message(s.stderr().trim())).collect();
        if warnings[0] != warnings[1] {
            failures.push(format!(
                "{file}: stderr differs: slurm `{}`, cadre `{}`",
                warnings[0], warnings[1]
            ));
        }
        let shown = [sides[0].show(ref_id), sides[1].show(cadre_id)];
        if std::env::var_os("CADRE_COMPARE_DUMP").is_some() {
            for (side, f) in sides.iter().zip(&shown) {
                let picked: Vec<String> = COMPARED
                    .iter()
                    .filter_map(|k| f.get(*k).map(|v| format!("{k}={v}")))
                    .collect();
                eprintln!("{file} {}: {}", side.name, picked.join(" "));
            }
        }
        let mut diffs = Vec::new();
        for f in COMPARED {
            let (Some(r), c) = (shown[0].get(*f), shown[1].get(*f)) else {
                if let Some(c) = shown[1].get(*f) {
                    diffs.push(format!("{f}: slurm has none, cadre `{c}`"));
                }
                continue;
            };
            // Without accounting the reference drops accounts and QOS it was not given.
            if (*f == "Account" || *f == "QOS") && r == "(null)" {
                continue;
            }
            let r = normalize(&sides[0], f, r, ref_id, &work);
            let c = c.map(|c| normalize(&sides[1], f, c, cadre_id, &work));
            if c.as_deref() != Some(r.as_str()) {
                diffs.push(format!(
                    "{f}: slurm `{r}`, cadre `{}`",
                    c.unwrap_or_default()
                ));
            }
        }
        let (known, unknown): (Vec<String>, Vec<String>) = diffs
            .into_iter()
            .partition(|d| h.known.contains_key(d.split(':').next().unwrap_or("")));
        for d in &known {
            let field = d.split(':').next().unwrap_or("");
            report.push(format!("{file}: known: {d} ({})", h.known[field]));
        }
        for d in unknown {
            failures.push(format!("{file}: {d}"));
        }
    }

    let bad = corpus(&corpus_dir.join("bad"));
    for (file, script) in &bad {
        let h = header(script);
        let subs: Vec<Submission> = sides
            .iter()
            .map(|s| s.submit(&work, file, script, &h))
            .collect();
        if let Some(id) = subs[0].job_id() {
            slurm_ids.push(id);
        }
        let msgs: Vec<String> = subs.iter().map(|s| message(s.stderr().trim())).collect();
        let codes: Vec<i32> = subs.iter().map(Submission::code).collect();
        if codes[0] == 0 || codes[1] == 0 {
            failures.push(format!(
                "bad/{file}: not refused by both: slurm {} `{}`, cadre {} `{}`",
                codes[0], msgs[0], codes[1], msgs[1]
            ));
            continue;
        }
        if codes[0] != codes[1] {
            failures.push(format!(
                "bad/{file}: exit codes differ: slurm {}, cadre {}",
                codes[0], codes[1]
            ));
        }
        if msgs[0] != msgs[1] {
            let d = format!("message: slurm `{}`, cadre `{}`", msgs[0], msgs[1]);
            match h.known.get("message") {
                Some(why) => report.push(format!("bad/{file}: known: {d} ({why})")),
                None => failures.push(format!("bad/{file}: {d}")),
            }
        }
    }
    // Leave the reference as it was: cancel what this test submitted there.
    slurm_ids.extend(sides[0].parents.values());
    let _ = Command::new("/usr/bin/scancel")
        .args(slurm_ids.iter().map(u64::to_string))
        .output();
    set_features(&before);
    for line in &report {
        eprintln!("{line}");
    }
    eprintln!(
        "compared {} scripts and {} malformed scripts with Slurm: {} known differences, {} failures",
        good.len(),
        bad.len(),
        report.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "differences from Slurm:\n{}",
        failures.join("\n")
    );
}

/// `scontrol show hostnames` and `show hostlist`, which torchrun-style scripts build their
/// rendezvous from, print what Slurm prints.
#[test]
fn scontrol_hostlists_match_slurm() {
    if !reference_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let exe = env!("CARGO_BIN_EXE_cadre");
    run_ok(Command::new(exe).arg("install-aliases").arg(dir.path()));
    let ours = dir.path().join("scontrol");
    let mut failures = Vec::new();
    for (what, list) in [
        ("hostnames", "gpu[001-004]"),
        ("hostnames", "n[1-3,7],m5"),
        ("hostnames", "rack[1-2]-node[01-02]"),
        ("hostnames", "a,b,c"),
        ("hostnames", "x[09-11]"),
        ("hostlist", "tux2,tux1,tux2"),
        ("hostlist", "gpu001,gpu002,gpu003,gpu007"),
        ("hostlist", "n1,n10,n2"),
    ] {
        let theirs = Command::new("/usr/bin/scontrol")
            .args(["show", what, list])
            .output()
            .expect("scontrol runs");
        let mine = Command::new(&ours)
            .args(["show", what, list])
            .output()
            .expect("cadre's scontrol runs");
        if theirs.stdout != mine.stdout || theirs.status.code() != mine.status.code() {
            failures.push(format!(
                "show {what} {list}: slurm `{}`, cadre `{}`",
                text(&theirs.stdout).trim(),
                text(&mine.stdout).trim()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
