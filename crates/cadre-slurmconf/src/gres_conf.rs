//! `gres.conf` beside `slurm.conf`: which device files a node's GRES are, how many, of
//! which type, and which cores they are close to.
//!
//! Lives here: the lines as read (`NodeName=` scoping, `Name`, `Type`, `File`, `Count`,
//! `Cores`, `AutoDetect`). Not here: matching them to each node's `Gres=` of `slurm.conf`,
//! which [`crate::build`] does.
//!
//! Device indices: a GPU's index (what `CUDA_VISIBLE_DEVICES` names) is the number at the
//! end of its device file (`/dev/nvidia3` is GPU 3), the usual case where device minor
//! numbers follow the PCI order; a file without a number at its end takes its position.
//! `Links`, `Flags` and `AutoDetect` are accepted and not used: cadre's agents find their
//! GPUs through NVML and set the GPU environment themselves.

use crate::Note;
use crate::error::{Item, Problem, SlurmConfError};
use crate::syntax::{Line, Loc, Pair};
use crate::values::{self, fields};
use cadre_core::hostlist;

/// `gres.conf` as read.
#[derive(Debug, Default)]
pub(crate) struct GresConf {
    pub lines: Vec<GresLine>,
    pub autodetect: Vec<AutoDetect>,
}

/// One resource line (`Name=gpu ...`).
#[derive(Clone, Debug)]
pub(crate) struct GresLine {
    pub at: Loc,
    /// `NodeName=`: the nodes it applies to, with the pair for messages; all nodes if
    /// `None`.
    pub nodes: Option<(Vec<String>, Pair)>,
    /// Lowercase.
    pub name: String,
    pub gtype: Option<String>,
    pub devices: Devices,
    pub affinity: Option<Affinity>,
}

impl GresLine {
    pub fn applies_to(&self, node: &str) -> bool {
        self.nodes
            .as_ref()
            .is_none_or(|(names, _)| names.iter().any(|n| n == node))
    }

    pub fn count(&self) -> u64 {
        match &self.devices {
            Devices::Files(files) => files.len() as u64,
            Devices::Count(n) => *n,
        }
    }
}

/// What a line gives: device files, or a count.
#[derive(Clone, Debug)]
pub(crate) enum Devices {
    /// Each file, with the number at the end of its name.
    Files(Vec<(String, Option<u32>)>),
    Count(u64),
}

/// `Cores=` (core ids) or the older `CPUs=` (CPU ids).
#[derive(Clone, Debug)]
pub(crate) struct Affinity {
    pub pair: Pair,
    /// `Cores=` gives physical core ids; `CPUs=` gives CPU ids.
    pub cores: bool,
    pub ids: Vec<u32>,
}

/// An `AutoDetect=` (global, or for some nodes).
#[derive(Clone, Debug)]
pub(crate) struct AutoDetect {
    pub at: Loc,
    pub nodes: Option<Vec<String>>,
}

const AUTODETECT: &[&str] = &["nvml", "nvidia", "rsmi", "oneapi", "nrt", "off"];

pub(crate) fn read(lines: &[Line], notes: &mut Vec<Note>) -> Result<GresConf, SlurmConfError> {
    let mut conf = GresConf::default();
    for line in lines {
        let item = match line.pairs.iter().find(|p| p.is("NodeName")) {
            Some(p) => Item::of("NodeName", &p.value),
            None => Item::none(),
        };
        let f = fields(&line.pairs, &item)?;
        for p in &line.pairs {
            let known = [
                "nodename",
                "name",
                "type",
                "file",
                "count",
                "cores",
                "cpus",
                "links",
                "flags",
                "autodetect",
            ];
            let key = p.key.to_ascii_lowercase();
            if key == "multiplefiles" {
                return Err(p.at.error(Problem::Refused {
                    item,
                    key: p.key.clone(),
                    why: "MIG devices (several files as one GPU) are not read; cadre counts \
                          whole GPUs",
                }));
            }
            if !known.contains(&key.as_str()) {
                return Err(p.at.error(Problem::UnknownKey {
                    item,
                    key: p.key.clone(),
                }));
            }
        }
        let nodes = match f.get("nodename") {
            None => None,
            Some(p) => {
                let names = hostlist::expand(&p.value).map_err(|error| {
                    p.at.error(Problem::Hostlist {
                        item: item.clone(),
                        key: p.key.clone(),
                        error,
                    })
                })?;
                if names.is_empty() {
                    return Err(p.at.error(Problem::NoNodeNames { item }));
                }
                Some((names, p.clone()))
            }
        };
        if let Some(p) = f.get("autodetect") {
            let value = p.value.trim().to_ascii_lowercase();
            if !AUTODETECT.contains(&value.as_str()) {
                return Err(p.at.error(Problem::BadValue {
                    item,
                    key: p.key.clone(),
                    value: p.value.clone(),
                    expected: "expected nvml, nvidia, rsmi, oneapi, nrt or off",
                }));
            }
            if value != "off" {
                notes.push(Note {
                    at: p.at.location(),
                    message: format!(
                        "{item}AutoDetect={value}: GPUs are counted from slurm.conf's Gres \
                         and gres.conf's lines; cadre's agents find their GPUs through NVML \
                         themselves"
                    ),
                });
            }
            conf.autodetect.push(AutoDetect {
                at: p.at.clone(),
                nodes: nodes.as_ref().map(|(n, _)| n.clone()),
            });
        }
        let Some(name_pair) = f.get("name") else {
            if f.contains_key("autodetect") {
                continue;
            }
            return Err(line.at.error(Problem::GresLineWithoutName));
        };
        let name = name_pair.value.trim().to_ascii_lowercase();
        if name == "mps" || name == "shard" {
            return Err(name_pair.at.error(Problem::GresSharing { item, name }));
        }
        let files = match f.get("file") {
            None => None,
            Some(p) => {
                let names = hostlist::expand(&p.value).map_err(|error| {
                    p.at.error(Problem::Hostlist {
                        item: item.clone(),
                        key: p.key.clone(),
                        error,
                    })
                })?;
                Some(
                    names
                        .into_iter()
                        .map(|file| {
                            let digits = file.len()
                                - file.bytes().rev().take_while(u8::is_ascii_digit).count();
                            let minor = file[digits..].parse().ok();
                            (file, minor)
                        })
                        .collect::<Vec<_>>(),
                )
            }
        };
        let count = match f.get("count") {
            None => None,
            Some(p) => Some(values::suffixed_count(&p.value).ok_or_else(|| {
                p.at.error(Problem::BadValue {
                    item: item.clone(),
                    key: p.key.clone(),
                    value: p.value.clone(),
                    expected: "expected a count such as 8 or 2K",
                })
            })?),
        };
        let devices = match (files, count) {
            (Some(files), Some(count)) if count != files.len() as u64 => {
                return Err(f["count"].at.error(Problem::GresCountAndFiles {
                    count,
                    files: files.len(),
                }));
            }
            (Some(files), _) => Devices::Files(files),
            (None, Some(count)) => Devices::Count(count),
            // Slurm's default: one.
            (None, None) => Devices::Count(1),
        };
        let affinity = match (f.get("cores"), f.get("cpus")) {
            (Some(a), Some(b)) => {
                return Err(b.at.error(Problem::SameSetting {
                    item,
                    key: a.key.clone(),
                    other: b.key.clone(),
                }));
            }
            (Some(p), None) | (None, Some(p)) => Some(Affinity {
                ids: id_ranges(&p.value).ok_or_else(|| {
                    p.at.error(Problem::BadValue {
                        item: item.clone(),
                        key: p.key.clone(),
                        value: p.value.clone(),
                        expected: "expected ids and ranges such as 0-31,64-95",
                    })
                })?,
                cores: p.is("Cores"),
                pair: p.clone(),
            }),
            (None, None) => None,
        };
        conf.lines.push(GresLine {
            at: line.at.clone(),
            nodes,
            name,
            gtype: f.get("type").map(|p| p.value.trim().to_string()),
            devices,
            affinity,
        });
    }
    Ok(conf)
}

/// `0-31,64-95` into ids.
fn id_ranges(text: &str) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    for part in text.split(',').map(str::trim) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
                if lo > hi || hi - lo > crate::slurm_conf::MAX_CPUS {
                    return None;
                }
                ids.extend(lo..=hi);
            }
            None => ids.push(part.parse().ok()?),
        }
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges_parse() {
        assert_eq!(id_ranges("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(id_ranges("5"), Some(vec![5]));
        assert_eq!(id_ranges("3-1"), None);
        assert_eq!(id_ranges("a"), None);
        assert_eq!(id_ranges(""), None);
    }
}
