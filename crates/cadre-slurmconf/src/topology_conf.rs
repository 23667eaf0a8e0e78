//! `topology.conf` beside `slurm.conf`: the switch tree of `topology/tree`
//! (`SwitchName=s0 Nodes=...`, `SwitchName=spine Switches=s[0-3]`) or the base blocks of
//! `topology/block` (`BlockName=b1 Nodes=...`, `BlockSizes=16,32`).
//!
//! Lives here: the lines as read, checked against the plugin `slurm.conf` names (a
//! `BlockName` line under `topology/tree` is an error). Not here: whether the names
//! resolve and the switches form a forest, which [`crate::build`] checks. `LinkSpeed` is
//! accepted and not used (Slurm does not use it either).

use crate::error::{Item, Problem, SlurmConfError};
use crate::syntax::{Line, Loc, Pair};
use crate::values::{self, fields};

/// Which topology `TopologyPlugin` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plugin {
    Tree,
    Block,
}

impl Plugin {
    pub fn name(self) -> &'static str {
        match self {
            Plugin::Tree => "topology/tree",
            Plugin::Block => "topology/block",
        }
    }
}

/// `topology.conf` as read.
#[derive(Debug, Default)]
pub(crate) struct TopologyConf {
    pub switches: Vec<SwitchLine>,
    pub blocks: Vec<BlockLine>,
    pub block_sizes: Option<(Vec<u32>, Pair)>,
}

#[derive(Clone, Debug)]
pub(crate) struct SwitchLine {
    pub at: Loc,
    pub item: Item,
    pub name: String,
    pub nodes: Option<Pair>,
    pub switches: Option<Pair>,
}

#[derive(Clone, Debug)]
pub(crate) struct BlockLine {
    pub at: Loc,
    pub item: Item,
    pub name: String,
    pub nodes: Pair,
}

pub(crate) fn read(lines: &[Line], plugin: Plugin) -> Result<TopologyConf, SlurmConfError> {
    let mut conf = TopologyConf::default();
    for line in lines {
        let head = line.head();
        let kind = head.key.to_ascii_lowercase();
        let wants = match kind.as_str() {
            "switchname" => Plugin::Tree,
            "blockname" | "blocksizes" => Plugin::Block,
            _ => {
                return Err(head.at.error(Problem::UnknownKey {
                    item: Item::none(),
                    key: head.key.clone(),
                }));
            }
        };
        if wants != plugin {
            return Err(head.at.error(Problem::WrongTopologyLine {
                key: head.key.clone(),
                wants: match wants {
                    Plugin::Tree => "tree",
                    Plugin::Block => "block",
                },
                plugin: plugin.name().to_string(),
            }));
        }
        let item = if kind == "blocksizes" {
            Item::none()
        } else {
            Item::of(&head.key, &head.value)
        };
        let allowed: &[&str] = match kind.as_str() {
            "switchname" => &["switchname", "nodes", "switches", "linkspeed"],
            "blockname" => &["blockname", "nodes"],
            _ => &["blocksizes"],
        };
        for p in &line.pairs {
            if !allowed.contains(&p.key.to_ascii_lowercase().as_str()) {
                return Err(p.at.error(Problem::UnknownKey {
                    item,
                    key: p.key.clone(),
                }));
            }
        }
        let f = fields(&line.pairs, &item)?;
        let name = head.value.trim().to_string();
        match kind.as_str() {
            "switchname" => {
                if !values::valid_name(&name) {
                    return Err(head.at.error(Problem::BadName { item }));
                }
                conf.switches.push(SwitchLine {
                    at: line.at.clone(),
                    name,
                    nodes: f.get("nodes").cloned(),
                    switches: f.get("switches").cloned(),
                    item,
                });
            }
            "blockname" => {
                if !values::valid_name(&name) {
                    return Err(head.at.error(Problem::BadName { item }));
                }
                let Some(nodes) = f.get("nodes").cloned() else {
                    return Err(head.at.error(Problem::BlockWithoutNodes { item }));
                };
                conf.blocks.push(BlockLine {
                    at: line.at.clone(),
                    name,
                    nodes,
                    item,
                });
            }
            _ => {
                if conf.block_sizes.is_some() {
                    return Err(head.at.error(Problem::DuplicateKey {
                        item,
                        key: head.key.clone(),
                    }));
                }
                let mut sizes = Vec::new();
                for s in head.value.split(',') {
                    let n = s.trim().parse::<u32>().ok().filter(|&n| n > 0);
                    let Some(n) = n else {
                        return Err(head.at.error(Problem::BadValue {
                            item,
                            key: head.key.clone(),
                            value: head.value.clone(),
                            expected: "expected positive node counts such as 16,32,64",
                        }));
                    };
                    sizes.push(n);
                }
                conf.block_sizes = Some((sizes, head.clone()));
            }
        }
    }
    Ok(conf)
}
