//! `sprio`: the priority factors of pending jobs, from `GET /priorities`, with Slurm's
//! options and formats.
//!
//! The default format shows the weighted factors (each factor times its weight, rounded),
//! with a column only for the factors whose weight is not zero, as Slurm does; `-n` the
//! normalised factors in [0, 1]; `-w` the weights alone; `-l` adds the user and the nice
//! value. cadre has no site factor, association factor or TRES factors: SITE is 0 and the
//! others are left out. It has one factor Slurm has not, expansion (how long a job waited
//! against its time limit): `%X` weighted, `%x` normalised, a column of the default format
//! when its weight is not zero. `-o` takes sprio's `%` fields.

use super::format::{Layout, parse_percent};
use super::query::{self, JobRef, Opt};
use cadre_proto::api::{PriorityList, PriorityView, PriorityWeightsView};
use cadre_slurm::getopt::ArgKind;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "sprio";

const OPTIONS: &[Opt] = &[
    Opt::new('M', "clusters", ArgKind::Required),
    Opt::long("federation", ArgKind::None),
    Opt::new('o', "format", ArgKind::Required),
    Opt::long("help", ArgKind::None),
    Opt::new('j', "jobs", ArgKind::OptionalOrNext),
    Opt::long("local", ArgKind::None),
    Opt::new('l', "long", ArgKind::None),
    Opt::new('h', "noheader", ArgKind::None),
    Opt::new('n', "norm", ArgKind::None),
    Opt::new('p', "partition", ArgKind::Required),
    Opt::long("sibling", ArgKind::None),
    Opt::new('S', "sort", ArgKind::Required),
    Opt::long("usage", ArgKind::None),
    Opt::new('u', "user", ArgKind::Required),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
    Opt::new('w', "weights", ArgKind::None),
];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    JobId,
    Partition,
    User,
    Priority,
    PriorityNorm,
    Site,
    Age,
    AgeNorm,
    Assoc,
    AssocNorm,
    FairShare,
    FairShareNorm,
    JobSize,
    JobSizeNorm,
    PartitionPrio,
    PartitionPrioNorm,
    Qos,
    QosNorm,
    Expansion,
    ExpansionNorm,
    Nice,
    Tres,
    TresNorm,
    Cluster,
}

fn letter(c: char) -> Option<Field> {
    use Field::*;
    Some(match c {
        'i' => JobId,
        'r' => Partition,
        'u' => User,
        'Y' => Priority,
        'y' => PriorityNorm,
        'S' => Site,
        'A' => Age,
        'a' => AgeNorm,
        'B' => Assoc,
        'b' => AssocNorm,
        'F' => FairShare,
        'f' => FairShareNorm,
        'J' => JobSize,
        'j' => JobSizeNorm,
        'P' => PartitionPrio,
        'p' => PartitionPrioNorm,
        'Q' => Qos,
        'q' => QosNorm,
        'X' => Expansion,
        'x' => ExpansionNorm,
        'N' => Nice,
        'T' => Tres,
        't' => TresNorm,
        'c' => Cluster,
        _ => return None,
    })
}

fn header(f: Field) -> &'static str {
    use Field::*;
    match f {
        JobId => "JOBID",
        Partition | PartitionPrio | PartitionPrioNorm => "PARTITION",
        User => "USER",
        Priority | PriorityNorm => "PRIORITY",
        Site => "SITE",
        Age | AgeNorm => "AGE",
        Assoc | AssocNorm => "ASSOC",
        FairShare | FairShareNorm => "FAIRSHARE",
        JobSize | JobSizeNorm => "JOBSIZE",
        Qos | QosNorm => "QOS",
        Expansion | ExpansionNorm => "EXPANSION",
        Nice => "NICE",
        Tres | TresNorm => "TRES",
        Cluster => "CLUSTER",
    }
}

/// The default format for these weights: a column per factor whose weight is not zero.
pub(crate) fn default_format(w: &PriorityWeightsView, long: bool, norm: bool) -> String {
    let mut f = String::from("%.15i %9r");
    if long {
        f.push_str(" %.8u");
    }
    f.push_str(if norm { " %.10y %.10S" } else { " %.10Y %.10S" });
    for (weight, weighted, normalised) in [
        (w.age, 'A', 'a'),
        (w.fairshare, 'F', 'f'),
        (w.job_size, 'J', 'j'),
        (w.partition, 'P', 'p'),
        (w.qos, 'Q', 'q'),
        (w.expansion, 'X', 'x'),
    ] {
        if weight > 0 {
            f.push_str(&format!(
                " %.10{}",
                if norm { normalised } else { weighted }
            ));
        }
    }
    if long {
        f.push_str(" %.11N");
    }
    f
}

/// A field's value for a job.
pub(crate) fn value(j: &PriorityView, w: &PriorityWeightsView, f: Field) -> String {
    use Field::*;
    let weighted = |weight: u32, factor: f64| format!("{:.0}", f64::from(weight) * factor);
    let norm = |factor: f64| format!("{factor:.7}");
    match f {
        JobId => super::format::job_id(j.id.0, j.array),
        Partition => j.partition.clone(),
        User => j.user.clone(),
        Priority => j.priority.to_string(),
        PriorityNorm => format!("{:.8}", j.priority as f64 / f64::from(u32::MAX)),
        Site | Assoc | Tres => "0".into(),
        AssocNorm | TresNorm => norm(0.0),
        Age => weighted(w.age, j.age),
        AgeNorm => norm(j.age),
        FairShare => weighted(w.fairshare, j.fairshare),
        FairShareNorm => norm(j.fairshare),
        JobSize => weighted(w.job_size, j.job_size),
        JobSizeNorm => norm(j.job_size),
        PartitionPrio => weighted(w.partition, j.partition_factor),
        PartitionPrioNorm => norm(j.partition_factor),
        Qos => weighted(w.qos, j.qos),
        QosNorm => norm(j.qos),
        Expansion => weighted(w.expansion, j.expansion),
        ExpansionNorm => norm(j.expansion),
        Nice => j.nice.to_string(),
        Cluster => "cadre".into(),
    }
}

/// The `-w` line: the weights under their factors.
fn weight_value(w: &PriorityWeightsView, f: Field) -> String {
    use Field::*;
    match f {
        JobId => "Weights".into(),
        Age | AgeNorm => w.age.to_string(),
        FairShare | FairShareNorm => w.fairshare.to_string(),
        JobSize | JobSizeNorm => w.job_size.to_string(),
        PartitionPrio | PartitionPrioNorm => w.partition.to_string(),
        Qos | QosNorm => w.qos.to_string(),
        Expansion | ExpansionNorm => w.expansion.to_string(),
        _ => String::new(),
    }
}

/// The lines sprio prints.
pub(crate) fn render(
    layout: &Layout<Field>,
    list: &PriorityList,
    header: bool,
    weights: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if header {
        out.push(layout.render(|f| self::header(f).to_string()));
    }
    if weights {
        out.push(layout.render(|f| weight_value(&list.weights, f)));
        return out;
    }
    for j in &list.jobs {
        out.push(layout.render(|f| value(j, &list.weights, f)));
    }
    out
}

fn usage() -> ExitCode {
    println!(
        "Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]\n       [--federation] [--local] [--sibling] [--usage] [-hlnvVw]"
    );
    ExitCode::SUCCESS
}

/// `sprio [OPTIONS]`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut jobs = Vec::new();
    for text in p.values("jobs").iter().flat_map(|j| query::list(j)) {
        match JobRef::parse(&text) {
            Some(r) => jobs.push(r),
            None => return query::fail(CMD, format!("Invalid job id: {text}")),
        }
    }
    let mut users = Vec::new();
    for u in p.values("user").iter().flat_map(|u| query::list(u)) {
        match query::user_name(&u) {
            Some(n) => users.push(n),
            None => return query::fail(CMD, format!("Invalid user name: {u}")),
        }
    }
    let partitions: Vec<String> = p
        .values("partition")
        .iter()
        .flat_map(|x| query::list(x))
        .collect();
    let mut list: PriorityList = match query::connect().and_then(|mut c| Ok(c.get("/priorities")?))
    {
        Ok(l) => l,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    list.jobs.retain(|j| {
        let view_like = |r: &JobRef| match (r.index, j.array) {
            (None, Some(a)) => j.id.0 == r.id || a.array_job.0 == r.id,
            (None, None) => j.id.0 == r.id,
            (Some(ix), Some(a)) => a.array_job.0 == r.id && a.index == ix,
            (Some(_), None) => false,
        };
        (jobs.is_empty() || jobs.iter().any(view_like))
            && (users.is_empty() || users.contains(&j.user))
            && (partitions.is_empty() || partitions.contains(&j.partition))
    });
    if !jobs.is_empty() && list.jobs.is_empty() && !p.has("weights") {
        eprintln!("Unable to find jobs matching user/id(s) specified");
        return ExitCode::SUCCESS;
    }
    let layout = match p
        .value("format")
        .map(str::to_owned)
        .or_else(|| query::env_var("SPRIO_FORMAT"))
    {
        Some(f) => {
            let (l, bad) = parse_percent(&f, letter);
            for c in bad {
                eprintln!("{CMD}: error: Invalid job format specification: {c}");
            }
            l
        }
        None => {
            parse_percent(
                &default_format(&list.weights, p.has("long"), p.has("norm")),
                letter,
            )
            .0
        }
    };
    for line in render(&layout, &list, !p.has("noheader"), p.has("weights")) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::squeue::tests::framed;
    use cadre_core::job::JobId;

    fn list() -> PriorityList {
        PriorityList {
            weights: PriorityWeightsView {
                age: 1000,
                fairshare: 100_000,
                job_size: 1000,
                partition: 10_000,
                qos: 0,
                expansion: 0,
            },
            jobs: vec![PriorityView {
                id: JobId(65539),
                user: "fred".into(),
                partition: "gpu".into(),
                priority: 62664,
                age: 0.0,
                fairshare: 0.51664,
                job_size: 1.0,
                partition_factor: 1.0,
                qos: 0.0,
                expansion: 0.0,
                nice: 0,
                array: None,
            }],
        }
    }

    fn show(long: bool, norm: bool, weights: bool) -> String {
        let l = list();
        let (layout, bad) = parse_percent(&default_format(&l.weights, long, norm), letter);
        assert!(bad.is_empty());
        framed(render(&layout, &l, true, weights))
    }

    #[test]
    fn expansion_has_a_column_once_weighed() {
        let mut l = list();
        let format = |l: &PriorityList| default_format(&l.weights, false, false);
        assert!(
            !format(&l).contains('X'),
            "no column at weight 0, as Slurm's factors"
        );
        l.weights.expansion = 4000;
        l.jobs[0].expansion = 0.25;
        let (layout, bad) = parse_percent(&format(&l), letter);
        assert!(bad.is_empty());
        let lines = render(&layout, &l, true, false);
        assert!(lines[0].trim_end().ends_with("EXPANSION"), "{lines:?}");
        assert!(lines[1].trim_end().ends_with(" 1000"), "{lines:?}");
        let (norm, _) = parse_percent("%i %x", letter);
        assert_eq!(render(&norm, &l, false, false), ["65539 0.2500000"]);
        let (weights, _) = parse_percent("%i %X", letter);
        let w = render(&weights, &l, false, true);
        assert!(w.last().unwrap().ends_with("4000"), "{w:?}");
    }

    #[test]
    fn weighted_normalised_weights_and_long() {
        insta::assert_snapshot!(show(false, false, false));
        insta::assert_snapshot!(show(false, true, false));
        insta::assert_snapshot!(show(false, false, true));
        insta::assert_snapshot!(show(true, false, false));
    }
}
